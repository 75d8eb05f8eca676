import unittest

from text import is_palindrome


class PalindromeTest(unittest.TestCase):
    def test_sentence(self):
        self.assertTrue(is_palindrome("A man, a plan, a canal: Panama"))

    def test_not_one(self):
        self.assertFalse(is_palindrome("steward"))

    def test_empty(self):
        self.assertTrue(is_palindrome(""))


if __name__ == "__main__":
    unittest.main()
