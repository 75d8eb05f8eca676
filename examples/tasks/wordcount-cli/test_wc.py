import subprocess
import sys
import unittest


class WordCountTest(unittest.TestCase):
    def test_sample_file(self):
        done = subprocess.run(
            [sys.executable, "wc.py", "sample.txt"], capture_output=True, text=True, check=True
        )
        self.assertEqual(done.stdout.split(), ["4", "9", "46"])

    def test_usage(self):
        done = subprocess.run([sys.executable, "wc.py"], capture_output=True, text=True)
        self.assertEqual(done.returncode, 2)


if __name__ == "__main__":
    unittest.main()
