"""Splitting a list into pages."""


def page(items, number, size):
    """Page ``number`` (from 1) of ``items``, ``size`` items per page."""
    start = number * size
    return items[start : start + size]


def page_count(items, size):
    return (len(items) + size - 1) // size
