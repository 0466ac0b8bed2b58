"""The package's one module, which imports a module that sits beside the package."""
from tiny import Tensor, no_grad, tensor  # noqa: F401

WHERE = __name__
