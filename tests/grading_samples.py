"""Exercises, engines and the results.json schema shared by the report, CLI and plugin tests."""

import json
from pathlib import Path

import jsonschema

#: Gradescope's results.json format (a draft-07 schema, kept with the tests).
SCHEMA = json.loads((Path(__file__).parent / "data" / "gradescope-results.schema.json").read_text())

SQUARE = """\
id: square
title: A square and a line
topic: 01-forward
points: 3
inputs:
  x: {value: 0.5, domain: {low: -2, high: 2}}
program: |
  y = x * x
  z = 2 * y + 1
checks:
  gradients: {}
  sampled: {count: 5}
  graph: {names: [x, y, z]}
"""

CUBE = """\
id: secret-cube
title: A hidden cube
topic: 02-backward
points: 2
visibility: hidden
inputs:
  x: {value: 0.3}
program: |
  y = x ** 3
checks:
  gradients: {}
"""

# x * y: an engine that sends y the slope y instead of x (tests/engines/wrong_mul.py) gets the
# gradients wrong and the graph right.
PRODUCT = """\
id: product
title: A product of two inputs
topic: 01-forward
points: 2
inputs:
  x: {value: 1.5}
  y: {value: -0.5}
program: |
  f = x * y
checks:
  gradients: {}
  graph: {names: [x, y, f]}
"""

BROKEN = """\
id: broken
title: Broken
topic: 01-forward
points: four
inputs:
  x: {value: 1.0}
program: |
  y = x * x
checks:
  gradients: {}
"""

#: A detached factor under second derivatives: finite differences cannot give them (they move
#: the detached value with the point), torch and jax can (docs/exercise-format.md).
DETACH_HESSIAN = """\
id: detach-hessian
title: A detached factor in second derivatives
topic: 08-higher-order
points: 3
inputs:
  x: {value: 0.8, domain: {low: -2, high: 2}}
  y: {value: -0.6, domain: {low: -2, high: 2}}
program: |
  s = (x * y).detach()
  z = x * x * s + y.sin() * x
checks:
  gradients:
    points: [{x: 1.0, y: 1.0}]
  hessian:
    count: 3
"""

# torch in float32: exact at x = 0.5 (square's listed point and graph), off in the 8th digit at
# sampled points and at the hidden cube's x = 0.3, so it fails exactly those checks.
FLOAT32 = """\
import torch

def tensor(data, requires_grad=False):
    return torch.tensor(data, dtype=torch.float32, requires_grad=requires_grad)

no_grad = torch.no_grad
"""


def write_bank(folder: Path) -> Path:
    """A small bank: a visible exercise with three checks (3 points), a hidden one (2 points)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "square.exercise.yaml").write_text(SQUARE)
    (folder / "secret-cube.exercise.yaml").write_text(CUBE)
    return folder


def write_fd_bank(folder: Path) -> Path:
    """Two visible exercises (4 points) the reference grades against finite differences alone
    (`--oracles fd`): no torch, no jax, so that a subprocess grades them in about a second."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "product.exercise.yaml").write_text(PRODUCT.replace("  graph: {names: [x, y, f]}\n",
                                                                  ""))
    (folder / "cube.exercise.yaml").write_text(CUBE.replace("visibility: hidden", ""))
    return folder


def keyed_bank(folder: Path) -> tuple[Path, Path]:
    """The small bank with the product exercise (7 points), and its answer key with seed 5."""
    from gradcheck.bank.loader import load_bank
    from gradcheck.grading import answer_key

    bank = write_bank(folder / "bank")
    (bank / "product.exercise.yaml").write_text(PRODUCT)
    answer_key.build(load_bank(bank), 5, folder / "key.json")
    return bank, folder / "key.json"


def read_results(path: Path) -> dict:
    """A results.json file, checked against Gradescope's format."""
    data = json.loads(path.read_text())
    jsonschema.Draft7Validator(SCHEMA).validate(data)
    return data
