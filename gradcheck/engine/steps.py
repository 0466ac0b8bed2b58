"""A behaviour session: the program run once, then each step's action on the engine (backward
twice, `.grad = None`, `detach`, an SGD step, ...) and the fields its expectations read.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from gradcheck.engine.run import Record, Run, floats, lookup, plain_numbers, read_field
from gradcheck.program.language import Program
from gradcheck.program.session import ACTIONS


def behaviour(run: Run, program: Program, request: Mapping[str, Any]) -> Record:
    try:
        env = run.forward(program, run.leaves(program, request["point"],
                                              set(request["requires_grad"])))
    except Exception as exc:
        return {"error": run.error(exc), "steps": []}
    steps = []
    for step in request["steps"]:
        action, args = _action(step)
        error = None
        try:
            run.enter(action)
            _STEPS[action](run, program, env, args)
        except Exception as exc:
            error = run.error(exc)
        run.enter("read")
        observed = {}
        for item in step.get("expect") or []:
            kind, name = item.split(".", 1)
            observed[item] = run.attempt(lambda k=kind, n=name: read_field(k, lookup(env, n), n))
        steps.append({"error": error, "observed": observed})
    return {"error": None, "steps": steps}


def _action(step: Mapping[str, Any]) -> tuple[str, Any]:
    return next((key, step[key]) for key in ACTIONS if step.get(key) is not None)


def _step_forward(run: Run, program: Program, env: dict, args: Mapping[str, Any]) -> None:
    leaves = {name: lookup(env, name) for name in program.inputs}
    env.update(run.forward(program, leaves, bool(args.get("no_grad"))))


def _step_backward(run: Run, program: Program, env: dict, args: Mapping[str, Any]) -> None:
    target = lookup(env, args.get("of") or program.output_name)
    kwargs: dict[str, Any] = {}
    if args.get("gradient") is not None:
        kwargs["gradient"] = run.engine.tensor(floats(args["gradient"]))
    if args.get("retain_graph"):
        kwargs["retain_graph"] = True
    target.backward(**kwargs)


def _step_zero_grad(run: Run, program: Program, env: dict, names: list[str]) -> None:
    for name in names:
        lookup(env, name).grad = None


def _step_retain_grad(run: Run, program: Program, env: dict, names: list[str]) -> None:
    for name in names:
        lookup(env, name).retain_grad()


def _step_detach(run: Run, program: Program, env: dict, args: Mapping[str, str]) -> None:
    env[args["name"]] = lookup(env, args["of"]).detach()


def _step_requires_grad(run: Run, program: Program, env: dict, flags: Mapping[str, bool]) -> None:
    for name, flag in flags.items():
        lookup(env, name).requires_grad_(flag)


def _step_sgd(run: Run, program: Program, env: dict, args: Mapping[str, Any]) -> None:
    lr = float(args["lr"])
    for name in args["params"]:
        w = lookup(env, name)
        with run.engine.no_grad():
            g = w.grad
            if issubclass(type(g), (list, tuple)):  # the protocol allows a list for a 1-D grad
                g = run.engine.tensor(plain_numbers(g, f"{name}.grad"))
            new = w - lr * g
        new.requires_grad_()
        env[name] = new


_STEPS: dict[str, Callable[..., None]] = {
    "forward": _step_forward, "backward": _step_backward, "zero_grad": _step_zero_grad,
    "retain_grad": _step_retain_grad, "detach": _step_detach,
    "requires_grad": _step_requires_grad, "sgd": _step_sgd,
}
