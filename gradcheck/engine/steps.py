"""A behaviour session: the program run once, then each step's action on the engine (backward
twice, `.grad = None`, `detach`, an SGD step, `grad(...)`, ...) and the fields its expectations
read, with the categories of the warnings the step issued.
"""

from __future__ import annotations

import json
import warnings
from typing import Any, Callable, Mapping

from gradcheck.engine.run import (
    Record,
    Run,
    builtin_kinds,
    floats,
    lookup,
    plain_numbers,
    plain_value,
    read_grad_field,
    type_label,
)
from gradcheck.engine.wire import ProtocolError
from gradcheck.program.language import (
    Program,
    engine_apply,
    evaluate,
    free_names,
    parse_expression,
)
from gradcheck.program.ops import CREATE_GRAPH
from gradcheck.program.session import ACTIONS, GRAD_SUFFIX, WARNINGS, parse_expect


def behaviour(run: Run, program: Program, request: Mapping[str, Any], touched: bool = False
              ) -> Record:
    """Each step's error and what its expectations read; with `touched` (asked of torch, never
    of a worker), of a backward that raised, also the variables whose gradient it changed: the
    part of the graph torch runs before it raises, which no engine is expected to match."""
    try:
        env = run.forward(program, run.leaves(program, request["point"],
                                              set(request["requires_grad"])))
    except Exception as exc:
        return {"error": run.error(exc), "steps": []}
    steps = []
    for step in request["steps"]:
        action, args = _action(step)
        error = None
        before = _gradients(run, program, env) if touched and action == "backward" else None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                run.enter(action)
                _STEPS[action](run, program, env, args)
            except Exception as exc:
                error = run.error(exc)
            run.enter("read")
            observed = {item: run.attempt(_read, run, program, env, item)
                        for item in step.get("expect") or [] if item != WARNINGS}
        if WARNINGS in (step.get("expect") or []):
            observed[WARNINGS] = _categories(caught)
        steps.append({"error": error, "observed": observed})
        if before is not None and error is not None:
            after = _gradients(run, program, env)
            steps[-1]["touched"] = [name for name in after
                                    if json.dumps(after[name]) != json.dumps(before.get(name))]
    return {"error": None, "steps": steps}


def _gradients(run: Run, program: Program, env: dict) -> dict[str, Any]:
    """The gradient of every variable of the session, as plain data (or the error reading it)."""
    return {name: run.attempt(_read, run, program, env, f"grad.{name}")
            for name in env}


def _read(run: Run, program: Program, env: dict, item: str) -> Any:
    kind, name, field = parse_expect(item)
    if field is not None:
        run.using("grad", program.names.get(name), lookup(env, name))
        return read_grad_field(field, lookup(env, name), name)
    return run.read(kind, lookup(env, name), name, program.names.get(name))


def _categories(caught: list[warnings.WarningMessage]) -> list[str]:
    """The warnings' categories, each once, in the order they were first issued: each the
    builtin category it is, so that an engine's own subclass of UserWarning is a UserWarning,
    as a warnings filter of UserWarning takes it."""
    names = [(builtin_kinds(w.category) or ["?"])[0] if isinstance(w.category, type) else "?"
             for w in caught]
    return list(dict.fromkeys(names))[:20]


def _target(env: dict, target: str) -> Any:
    """What a step's `of` names: a variable, or a variable's gradient (`x.grad`)."""
    if target.endswith(GRAD_SUFFIX):
        return lookup(env, target.removesuffix(GRAD_SUFFIX)).grad
    return lookup(env, target)


def _action(step: Mapping[str, Any]) -> tuple[str, Any]:
    return next((key, step[key]) for key in ACTIONS if step.get(key) is not None)


def _step_forward(run: Run, program: Program, env: dict, args: Mapping[str, Any]) -> None:
    leaves = {name: lookup(env, name) for name in program.inputs}
    env.update(run.forward(program, leaves, args.get("no_grad") or False))


def _step_backward(run: Run, program: Program, env: dict, args: Mapping[str, Any]) -> None:
    of = args.get("of") or program.output_name
    target = _target(env, of)
    kwargs: dict[str, Any] = {}
    if args.get("gradient") is not None:
        run.using("tensor", None, run.engine)
        kwargs["gradient"] = run.engine.tensor(floats(args["gradient"]))
    if args.get("retain_graph") is not None:
        kwargs["retain_graph"] = args["retain_graph"]
    if args.get("create_graph"):  # asked only of the engines that need it
        kwargs["create_graph"] = True
    # a backward() that fails only with create_graph misses that piece (no owner: its absence
    # is a keyword backward() does not take, which no attribute shows)
    run.using(*((CREATE_GRAPH, program.names.get(of)) if kwargs.get("create_graph")
                else ("backward", program.names.get(of), target)))
    target.backward(**kwargs)


def _step_grad(run: Run, program: Program, env: dict, args: Mapping[str, Any]) -> None:
    """`names = grad(of, wrt, ...)`: bind each input's gradient (None if unused). A list `of`
    is passed as a tuple of outputs, and `grad_outputs` then as a tuple of seeds, one each."""
    of = args.get("of") or program.output_name
    several = isinstance(of, list)
    target = tuple(_target(env, one) for one in of) if several else _target(env, of)
    inputs = tuple(lookup(env, name) for name in args["wrt"])
    kwargs: dict[str, Any] = {key: True for key in ("create_graph", "allow_unused")
                              if args.get(key)}
    if args.get("grad_outputs") is not None:
        run.using("tensor", None, run.engine)
        seeds = tuple(run.engine.tensor(floats(seed)) for seed in args["grad_outputs"])
        kwargs["grad_outputs"] = seeds if several else seeds[0]
    run.use = None  # what raises now is grad() itself, which the step's code names
    if args.get("retain_graph") is not None:
        kwargs["retain_graph"] = args["retain_graph"]
    results = run.engine.grad(target, inputs, **kwargs)
    if not issubclass(type(results), (tuple, list)) or len(results) != len(inputs):
        raise ProtocolError(f"grad() returned a {type_label(results)}; it should return a tuple "
                            f"with one gradient per input ({len(inputs)})")
    for name, result in zip(args["names"], results):
        env[name] = result


def _step_zero_grad(run: Run, program: Program, env: dict, names: list[str]) -> None:
    for name in names:
        run.using("grad", program.names.get(name))
        lookup(env, name).grad = None


def _step_retain_grad(run: Run, program: Program, env: dict, names: list[str]) -> None:
    for name in names:
        run.using("retain_grad", program.names.get(name), lookup(env, name))
        lookup(env, name).retain_grad()


def _step_detach(run: Run, program: Program, env: dict, args: Mapping[str, str]) -> None:
    of = lookup(env, args["of"])
    run.using("detach", program.names.get(args["of"]), of)
    env[args["name"]] = of.detach()


def _step_requires_grad(run: Run, program: Program, env: dict, flags: Mapping[str, bool]) -> None:
    for name, flag in flags.items():
        run.using("requires_grad_", program.names.get(name), lookup(env, name))
        lookup(env, name).requires_grad_(flag)


def _step_sgd(run: Run, program: Program, env: dict, args: Mapping[str, Any]) -> None:
    lr = float(args["lr"])
    for name in args["params"]:
        w = lookup(env, name)
        node = program.names.get(name)
        run.using("no_grad", None, run.engine)
        with run.engine.no_grad():
            run.using("grad", node, w)
            g = w.grad
            # the protocol allows a list for a 1-D grad (not the engine's own list tensor)
            if issubclass(type(g), (list, tuple)) and not callable(getattr(g, "tolist", None)):
                run.using("tensor", None, run.engine)
                g = run.engine.tensor(plain_numbers(g, f"{name}.grad"))
            # the tensor first, so that only __mul__ and __sub__ are asked (as the step says)
            run.using("__mul__", node, g)
            step = g * lr
            run.using("__sub__", node, w)
            new = w - step
        run.using("requires_grad_", node, new)
        new.requires_grad_()
        env[name] = new


def _step_compute(run: Run, program: Program, env: dict, args: Mapping[str, str]) -> None:
    """`name = expression`, in the program language over the session's variables and their
    gradients (`x.grad`, and those bound by grad steps), recorded by the engine like the
    program."""
    used = {name: _target(env, name) for name in free_names(args["expr"])}
    sizes = {}
    for name, value in used.items():
        if value is None:  # as `None * x` would, but saying which
            raise TypeError(f"{name} is None, not a tensor")
        plain = plain_value(value, name)
        sizes[name] = len(plain) if isinstance(plain, list) else None
    expression = parse_expression(args["expr"], sizes)
    env[args["name"]] = evaluate(expression, used, engine_apply)[expression.output]


_STEPS: dict[str, Callable[..., None]] = {
    "forward": _step_forward, "backward": _step_backward, "zero_grad": _step_zero_grad,
    "retain_grad": _step_retain_grad, "detach": _step_detach,
    "requires_grad": _step_requires_grad, "sgd": _step_sgd, "grad": _step_grad,
    "compute": _step_compute,
}
