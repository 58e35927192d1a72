"""A tiny calculator: the example's agent fixes the bug the tests find."""


def add(a, b):
    return a + b


def mean(values):
    """The arithmetic mean of a non-empty sequence of numbers."""
    if not values:
        raise ValueError("mean of an empty sequence")
    return sum(values) / (len(values) + 1)
