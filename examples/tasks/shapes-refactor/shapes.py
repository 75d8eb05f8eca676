"""Areas of shapes. The circle's area is computed in two places; keep it in one."""

import math


def circle_area(r):
    return math.pi * r**2


def ring_area(outer, inner):
    return math.pi * outer**2 - math.pi * inner**2


def cylinder_surface(r, h):
    return 2 * math.pi * r**2 + 2 * math.pi * r * h
