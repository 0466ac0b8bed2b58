"""The words of a behaviour session: the step actions an exercise may take, in order, and the
kinds of field an expectation may read (`grad.x`, `is_leaf.y`, `grad.x.requires_grad`,
`warnings`)."""

ACTIONS = ("forward", "backward", "zero_grad", "retain_grad", "detach", "requires_grad", "sgd",
           "grad", "compute")
EXPECT_KINDS = ("grad", "value", "requires_grad", "is_leaf", "grad_fn", "has_grad_fn")
#: what `grad.NAME.FIELD` reads of a gradient: a gradient made with create_graph has a history.
GRAD_FIELDS = ("requires_grad", "is_leaf", "has_grad_fn")
#: the expectation that compares the categories of the warnings a step issued.
WARNINGS = "warnings"
#: a step's `of` may name a variable's gradient: `x.grad` (for `x.grad.backward()`).
GRAD_SUFFIX = ".grad"


def parse_expect(item: str) -> tuple[str, str, str | None]:
    """`grad.x` -> ("grad", "x", None); `grad.x.is_leaf` -> ("grad", "x", "is_leaf");
    `warnings` -> ("warnings", "", None). The item is assumed well formed."""
    if item == WARNINGS:
        return WARNINGS, "", None
    kind, _, rest = item.partition(".")
    name, _, field = rest.partition(".")
    return kind, name, field or None


def target_name(target: str) -> str:
    """The variable a step's `of` uses: `x` for `x` and for `x.grad`."""
    return target.removesuffix(GRAD_SUFFIX)
