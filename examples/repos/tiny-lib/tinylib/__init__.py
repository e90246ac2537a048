"""A tiny library with its own tests: the local repository `lakeflow tasks synth` is tested on."""


def clamp(x, lo, hi):
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x


def total(xs):
    s = 0
    for x in xs:
        s = s + x
    return s


def unused(x):
    return x * 2.5
