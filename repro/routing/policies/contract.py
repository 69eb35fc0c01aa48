"""The policy contract, checked where a user's policy comes in: importing a class by path (`import_policy`) and
what it lacks of `repro.routing.policies.base`'s interface (`contract_problems`), in one `ConfigError` naming
all of it (`contract_message`)."""

from __future__ import annotations

import inspect
import sys
from typing import Any

from repro.errors import ConfigError
from repro.routing.policies.base import Policy


def import_policy(name: str, allowed: tuple[str, ...] = ()) -> Any:
    """The object an import path ``pkg.module:Class`` (or ``pkg.module.Class``) names, unchecked;
    `ConfigError` if it does not resolve: no such module, a module that raises on import (its own
    error or one of its imports': which module and why), no such attribute. ``allowed``: the registered names,
    said when ``name`` is neither one nor a path."""
    if ":" not in name and "." not in name:
        raise ConfigError(
            f"policy: unknown policy {name!r}; allowed: {sorted(allowed)} or an import path 'pkg.module:Class'"
        )
    module_name, _, attr = name.partition(":") if ":" in name else name.rpartition(".")
    if not module_name or not attr:
        raise ConfigError(f"policy: import path {name!r} must be 'package.module:ClassName'")
    try:
        from repro.sources import fresh_module

        fresh_module(module_name)  # imported, or reloaded when its files changed since (an edited policy)
        module = sys.modules[module_name]
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise ConfigError(f"policy: cannot import {name!r}: no module named {exc.name!r} "
                              "(is its folder on the Python path?)") from None
        raise ConfigError(f"policy: cannot import {name!r}: importing module {module_name!r} failed: "
                          f"{_import_failure(exc)}") from None
    except Exception as exc:  # the module (or one it imports) raised: a SyntaxError, its own error
        raise ConfigError(f"policy: cannot import {name!r}: importing module {module_name!r} failed: "
                          f"{_import_failure(exc)}") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            found = sorted(k for k, v in vars(module).items() if isinstance(v, type)
                           and callable(getattr(v, "place", None)) and v.__module__ == module.__name__)
            hint = f"; its classes with a place method: {', '.join(found[:10])}" if found else ""
            raise ConfigError(f"policy: cannot import {name!r}: module {module_name!r} has no attribute "
                              f"{attr!r}{hint}")
        obj = getattr(obj, part)
    return obj


def _import_failure(exc: BaseException) -> str:
    """``Type: message (file, line N)``: why a module raised on import, and where."""
    import traceback

    from repro.errors import one_line

    where = ""
    if isinstance(exc, SyntaxError) and exc.filename:
        where = f" ({exc.filename}, line {exc.lineno})"
        text = exc.msg
    else:
        frames = traceback.extract_tb(exc.__traceback__)
        user = [f for f in frames if "importlib" not in f.filename]
        if user:
            where = f" ({user[-1].filename}, line {user[-1].lineno})"
        text = str(exc)
    return f"{type(exc).__name__}: {one_line(text, 500)}{where}"


def contract_problems(cls: Any, options: dict[str, Any] | None = None) -> list[str]:
    """What ``cls`` lacks of the policy contract (`repro.routing.policies.base`), one entry each;
    empty if nothing. A class, with a ``place(request, view)`` method it implements, a ``name`` that
    is a string if it has one, and (``options`` given) a constructor callable as
    ``cls(cost_model=..., **options)`` (as ``cls(**options)`` if it takes no ``cost_model``)."""
    if not isinstance(cls, type):
        return [f"it is not a class but a {type(cls).__name__} (a policy is a class with a place(request, view) "
                "method)"]
    problems = []
    raw = inspect.getattr_static(cls, "place", None)
    place = getattr(cls, "place", None)
    if raw is None:
        problems.append("it has no place(request, view) method")
    elif not callable(place):
        problems.append(f"its place is not a method but a {type(raw).__name__}")
    elif place is Policy.place:
        problems.append("it does not implement place(request, view) (it inherits Policy.place, which raises)")
    else:
        bound = isinstance(raw, (staticmethod, classmethod))
        try:
            sig = inspect.signature(place)
        except (TypeError, ValueError):  # a builtin: nothing to check
            sig = None
        if sig is not None:
            try:
                sig.bind(*(("request", "view") if bound else ("self", "request", "view")))
            except TypeError:
                problems.append(f"its place{sig} cannot be called as place(request, view)")
    if hasattr(cls, "name") and not (isinstance(cls.name, str) and cls.name):
        problems.append(f"its name = {cls.name!r} is not a non-empty str")
    if options is not None:
        try:
            sig = inspect.signature(cls)
        except (TypeError, ValueError):
            sig = None
        if sig is not None:
            kwargs = {**({"cost_model": None} if takes_cost_model(cls) else {}), **options}
            try:
                sig.bind(**kwargs)
            except TypeError as exc:
                call = ", ".join(["cost_model=..."] * ("cost_model" in kwargs) + [f"{k}=..." for k in options])
                problems.append(f"its constructor __init__{sig} cannot be called as {cls.__name__}({call}): {exc} "
                                "(every option needs a default, or a value given with the spec's policy_options)")
    return problems


def contract_message(name: str, problems: list[str]) -> str:
    """The `ConfigError` text for a policy whose class lacks ``problems`` (`contract_problems`)."""
    return (f"policy {name!r} does not meet the policy contract (repro.routing.policies.base): "
            f"{'; '.join(problems)}")


def takes_cost_model(cls: type) -> bool:
    """Whether ``cls``'s constructor takes ``cost_model`` (by name, or through ``**kwargs``)."""
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return False
    return "cost_model" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
