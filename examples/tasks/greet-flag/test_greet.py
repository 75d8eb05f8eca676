import subprocess
import sys
import unittest


def greet(*args):
    return subprocess.run([sys.executable, "greet.py", *args], capture_output=True, text=True)


class GreetTest(unittest.TestCase):
    def test_plain(self):
        self.assertEqual(greet("Ada").stdout.strip(), "Hello, Ada!")

    def test_shout_is_a_flag(self):
        done = greet("Ada", "--shout")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(done.stdout.strip(), "HELLO, ADA!")


if __name__ == "__main__":
    unittest.main()
