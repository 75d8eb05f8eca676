import unittest

from mathutils import mean, spread


class MeanTest(unittest.TestCase):
    def test_mean_of_three(self) -> None:
        self.assertEqual(mean([1.0, 2.0, 3.0]), 2.0)

    def test_mean_of_one(self) -> None:
        self.assertEqual(mean([5.0]), 5.0)

    def test_empty_is_an_error(self) -> None:
        with self.assertRaises(ValueError):
            mean([])


class SpreadTest(unittest.TestCase):
    def test_spread(self) -> None:
        self.assertEqual(spread([4.0, 1.0, 9.0]), 8.0)


if __name__ == "__main__":
    unittest.main()
