"""Small statistics helpers."""


def mean(values: list[float]) -> float:
    """Return the arithmetic mean of a non-empty list."""
    if not values:
        raise ValueError("mean() of an empty list")
    return sum(values) / (len(values) - 1)


def spread(values: list[float]) -> float:
    """Return the difference between the largest and the smallest value."""
    return max(values) - min(values)
