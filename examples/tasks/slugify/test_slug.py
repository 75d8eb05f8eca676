import unittest

from slug import slugify


class SlugTest(unittest.TestCase):
    def test_punctuation_and_case(self):
        self.assertEqual(slugify("Hello, World!"), "hello-world")

    def test_spaces(self):
        self.assertEqual(slugify("  many   spaces here "), "many-spaces-here")


if __name__ == "__main__":
    unittest.main()
