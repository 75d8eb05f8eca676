import unittest

from cart import total_price
from checkout import receipt


class CartTest(unittest.TestCase):
    def test_total(self):
        self.assertEqual(total_price([1.5, 2.5]), 4.0)

    def test_discount(self):
        self.assertEqual(total_price([10.0], discount=0.1), 9.0)

    def test_receipt(self):
        self.assertEqual(receipt([1.0, 2.0]), "total: 3.00")


if __name__ == "__main__":
    unittest.main()
