"""micrograd's order: backward() sorts the graph depth first over each node's operands as a set,
so a node's gradient adds up what its consumers pass in an order that changes from run to run:
the last bits differ, as they differ from torch's, and nothing more."""
from odd import reference

_engine = reference("set_depth_first")
tensor, no_grad, grad = _engine.tensor, _engine.no_grad, _engine.grad
