"""backward() visits the nodes in the order of a Python set, which changes from one run to the
next; here every other backward() is breadth-first, so that tests can pin what a grader sees."""
from odd import reference

_engine = reference("set_order")
tensor, no_grad = _engine.tensor, _engine.no_grad
