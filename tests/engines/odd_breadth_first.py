"""backward() walks the graph breadth-first from the output, each node once: it adds up (+=)
correctly, but a node reached first by a short path passes its gradient on before the share of
a longer path has arrived."""
from odd import reference

_engine = reference("breadth_first")
tensor, no_grad = _engine.tensor, _engine.no_grad
