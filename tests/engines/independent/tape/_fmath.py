"""Scalar float64 math that gives IEEE values (inf, nan) where Python raises."""
import math

inf, nan = math.inf, math.nan


def add(a, b): return a + b
def sub(a, b): return a - b
def mul(a, b): return a * b


def div(a, b):
    try:
        return a / b
    except ZeroDivisionError:
        if a != a or a == 0:
            return nan
        return math.copysign(inf, a) * math.copysign(1.0, b)


def _odd_int(b):
    return b == b and not math.isinf(b) and b == int(b) and int(b) % 2 == 1


def pow_(a, b):
    try:
        return math.pow(a, b)
    except OverflowError:
        return -inf if (a < 0 and _odd_int(b)) else inf
    except ValueError:          # 0 ** negative, or negative ** fraction
        if a == 0:
            return math.copysign(inf, a) if _odd_int(b) else inf
        return nan


def pow_scalar(a, e):
    """x ** e for a constant exponent, with the same special cases as torch's CPU kernel."""
    if e == 0: return 1.0
    if e == 1: return a
    if e == 0.5: return sqrt(a)
    if e == 2: return a * a
    if e == 3: return a * a * a
    if e == -0.5: return div(1.0, sqrt(a))
    if e == -1: return div(1.0, a)
    if e == -2: return div(1.0, a * a)
    return pow_(a, e)


def exp(x):
    try:
        return math.exp(x)
    except OverflowError:
        return inf


def log(x):
    if x > 0: return math.log(x)
    if x == 0: return -inf
    return nan                  # negative or nan


def sqrt(x): return math.sqrt(x) if x >= 0 else nan
def sin(x): return nan if math.isinf(x) else math.sin(x)
def cos(x): return nan if math.isinf(x) else math.cos(x)
def tanh(x): return math.tanh(x)
def sigmoid(x): return div(1.0, 1.0 + exp(-x))
def relu(x): return 0.0 if x < 0 else x       # keeps nan and -0.0, like torch
def sgn(x): return 1.0 if x > 0 else (-1.0 if x < 0 else 0.0)   # torch: sgn(nan) = 0
