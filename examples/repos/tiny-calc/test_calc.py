"""Run with `python3 test_calc.py`: prints ok when calc.py is right."""

from calc import add, mul

assert add(3, 4) == 7, f"add(3, 4) == {add(3, 4)}"
assert mul(3, 4) == 12, f"mul(3, 4) == {mul(3, 4)}"
print("ok")
