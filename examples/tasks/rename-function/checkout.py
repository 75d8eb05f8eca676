from cart import calc_total


def receipt(prices):
    return f"total: {calc_total(prices):.2f}"
