import math
import unittest

from shapes import circle_area, cylinder_surface, ring_area


class ShapesTest(unittest.TestCase):
    def test_circle(self):
        self.assertAlmostEqual(circle_area(2), 4 * math.pi)

    def test_ring(self):
        self.assertAlmostEqual(ring_area(3, 1), 8 * math.pi)

    def test_cylinder(self):
        self.assertAlmostEqual(cylinder_surface(1, 2), 6 * math.pi)


if __name__ == "__main__":
    unittest.main()
