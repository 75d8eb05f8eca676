"""A shopping cart."""


def calc_total(prices, discount=0.0):
    return round(sum(prices) * (1 - discount), 2)
