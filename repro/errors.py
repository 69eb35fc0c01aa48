"""Errors raised at the boundary (CLI, HTTP, config files) with a message naming the field."""


class ConfigError(ValueError):
    """Bad user input: the message names the field and the allowed values or range.

    The CLI prints the message on one line and exits with code 2.
    """


class RunInvalid(RuntimeError):
    """A live run that could not be measured: the machine did not keep up (send lag, loop lag, late
    engine steps, CPU steal) at any time scale tried. The message names the measures over their
    limits and what to do; the run directory keeps every attempt's ``validity.json``.

    The CLI prints the message and exits with code 3.
    """


class RunFailed(RuntimeError):
    """A run of a sweep raised (on a worker or here): the message names its run id, its spec's grid
    fields and the error. Runs of the sweep that finished before it are kept (a rerun resumes them).

    The CLI prints the message and exits with code 1.
    """


class PolicyError(RunFailed):
    """A routing policy broke its contract during a run (`repro.routing.policies.base`, "When a
    policy misbehaves"): its ``place`` raised (the original error is the ``__cause__``), it returned
    something other than a `Placement` or `Rejection`, its placement named no usable instance (an
    index out of range, negative, not an int, or an unhealthy instance), or the run's decisions were
    slower than the spec's ``decision_budget_us``. The message names the policy, the request and the
    candidates (or the measured decision times and the budget), on one line. The run is not marked
    finished (no complete manifest): a rerun redoes it.

    The CLI prints the message and exits with code 1 (a run failure, as `RunFailed`).
    """


def one_line(text: object, limit: int = 2000) -> str:
    """``text`` as one line (its lines joined with ``" | "``, cut to ``limit`` characters): an error
    message the command line prints on one line."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    out = " | ".join(lines)
    return out if len(out) <= limit else out[: limit - 3] + "..."


def check_decision_budget(policy: str, decision_time: "dict | None", budget_us: "float | None") -> None:
    """Raise `PolicyError` when a run's p99 decision time (``decision_time``: ``p50_us``, ``p99_us``,
    ``max_us``, ``n``, `repro.routing.router.DecisionTimes.summary`) exceeds ``budget_us``
    (microseconds; None: no budget)."""
    if budget_us is None or not decision_time or decision_time.get("p99_us") is None:
        return
    p99 = decision_time["p99_us"]
    if p99 > budget_us:
        raise PolicyError(
            f"policy {policy!r}: decisions too slow: p99 {p99:.1f} us over the budget of {budget_us:g} us "
            f"(decision_budget_us); measured over {decision_time.get('n')} decisions (wall time of place() on "
            f"this machine): p50 {decision_time['p50_us']:.1f} us, p99 {p99:.1f} us, "
            f"max {decision_time['max_us']:.1f} us")


def parse_assignments(pairs: "list[str] | tuple[str, ...]", what: str) -> dict:
    """``["k=v", ...]`` from the command line to a dict, each value read as YAML (numbers, bools,
    lists); a pair without ``=`` is a ConfigError naming ``what`` (the field or flag)."""
    import yaml

    out: dict = {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"{what}: entry {pair!r} must be KEY=VALUE")
        key, _, raw = pair.partition("=")
        try:
            out[key.strip()] = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{what}: value of {key.strip()!r} is not valid ({exc})") from None
    return out


def check_choice(where: str, name: str, value: object, allowed: tuple[str, ...]) -> None:
    """Raise `ConfigError` unless ``value`` is one of ``allowed`` (``where``: the object checked, e.g. ``spec``)."""
    if value not in allowed:
        raise ConfigError(f"{where}: field '{name}' = {value!r} not allowed; allowed: {', '.join(allowed)}")


def check_int(where: str, name: str, value: object, lo: int, hi: int) -> None:
    """Raise `ConfigError` unless ``value`` is an integer (not a bool) in ``[lo, hi]``."""
    import numbers

    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not lo <= value <= hi:
        raise ConfigError(f"{where}: field '{name}' = {value!r} must be an integer in [{lo}, {hi}]")


def check_number(where: str, name: str, value: object, lo: float, hi: float, lo_open: bool = False) -> None:
    """Raise `ConfigError` unless ``value`` is a finite real number in ``[lo, hi]`` (``(lo, hi]`` if ``lo_open``)."""
    import math
    import numbers

    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        ok = (value > lo if lo_open else value >= lo) and value <= hi
    if not ok:
        bracket = "(" if lo_open else "["
        raise ConfigError(f"{where}: field '{name}' = {value!r} out of range {bracket}{lo}, {hi}]")


def check_ranges(raw: object, allowed: "dict[str, tuple[float, float]]", where: str) -> "dict[str, float]":
    """``raw`` (a mapping of names in ``allowed`` to numbers) validated and normalised: keys sorted, values
    floats. An unknown name or a value outside its ``[lo, hi]`` is a `ConfigError` naming it and the allowed."""
    import math
    from collections.abc import Mapping

    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where} must be a mapping of {sorted(allowed)} to numbers, got {raw!r}")
    out: dict[str, float] = {}
    for key in sorted(raw):
        if key not in allowed:
            raise ConfigError(f"{where}: unknown parameter {key!r}; allowed: {sorted(allowed)}")
        value = raw[key]
        lo, hi = allowed[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or not lo <= value <= hi:
            raise ConfigError(f"{where}: parameter {key!r} = {value!r} must be a number in [{lo:g}, {hi:g}]")
        out[key] = float(value)
    return out
