import tempfile
import unittest
from pathlib import Path

from settings import DEFAULTS, read_settings


class SettingsTest(unittest.TestCase):
    def write(self, text):
        folder = Path(tempfile.mkdtemp())
        (folder / "app.conf").write_text(text)
        return folder / "app.conf"

    def test_file_overrides_a_default(self):
        self.assertEqual(read_settings(self.write("port = 9000\n"))["port"], "9000")

    def test_defaults_stay_as_they_are(self):
        read_settings(self.write("port = 9000\n"))
        self.assertEqual(DEFAULTS["port"], "8080")
        self.assertEqual(read_settings(self.write("# nothing\n"))["port"], "8080")


if __name__ == "__main__":
    unittest.main()
