"""The words of a behaviour session: the step actions an exercise may take, in order, and the
kinds of field an expectation may read (`grad.x`, `is_leaf.y`)."""

ACTIONS = ("forward", "backward", "zero_grad", "retain_grad", "detach", "requires_grad", "sgd")
EXPECT_KINDS = ("grad", "value", "requires_grad", "is_leaf", "grad_fn")
