from tinylib import clamp, total


def test_clamp_below():
    assert clamp(-3, 0, 10) == 0


def test_clamp_above():
    assert clamp(42, 0, 10) == 10


def test_clamp_inside():
    assert clamp(5, 0, 10) == 5


def test_total():
    assert total([1, 2, 3]) == 6, "the sum of 1, 2, 3"
