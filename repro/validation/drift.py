"""The machine's drift over a validation, and the simulator that follows it (mechanism ``machine_drift``,
`repro.engine.mechanisms.MACHINE_DRIFT`).

A validation on a shared machine runs for an hour; the machine's speed moves under it (a CPU's clock, a
neighbour on the host): in the 1p1d-cpu validation of docs/validation-records/1p1d-cpu-epyc-avx2-6b0a5f5.md
(a 2-core AMD EPYC, commit 6b0a5f5) the training trace, replayed before the judged runs, between the passes
and after them, measured a median TPOT of 11.5, 15.7 and 15.5 ms (x 1.36 within 22 min), and the simulator
fitted on the runs at its start (the training run and the probes, all in its first minutes) was fast on the
judged runs that came after: TPOT bias -10 % to -26 % at every load and policy (negative: the simulator
faster; that record's shared-host table).

The training trace is the machine's speedometer: a trace no judged run replays, run at known moments. Its
each run's median TPOT over its twin's under the validation's fitted physics is the machine's speed then
(`fit_speed`); a judged run is simulated at the speed interpolated to the moment it started (`speed_at`,
constant beyond the first and last runs): the whole machine scaled by it (`at_speed`): its engines' compute,
prefill and decode alike, and the serving path's costs measured in CPU time by ``shared_host`` (its CPU per
request, token, step and idle second, the decode API server's admission and the prefill hop), the event loops of
the API servers and the proxy running on the same cores as the engines. Variant ``drift-engines`` scales the
engines alone, which misses the serving path, whose costs need not move with the engines' (the shipped
records, ``data/validation/*/validation.md``, give both variants' speeds and saturations beside the live one).
Nothing of a judged run goes into it. Units: seconds, Unix seconds for moments.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from repro.engine.physics import Physics
    from repro.experiment.runner import RunResult
    from repro.experiment.spec import RunSpec


class SpeedPoint(TypedDict):
    """One run of the training trace: its label, start (Unix s), median TPOT live and simulated at the physics
    as fitted (s), and the machine's speed then: ``engines_factor``, the live median over the simulated (the
    engines' compute alone scaled by it gives the live median: variant ``drift-engines``), and ``factor``, the
    whole machine's (`solve_speed`: the engines and the serving path scaled by it give the live median; above 1,
    the machine was slower than the physics)."""

    label: str
    started_unix: float
    live_tpot_s: float
    sim_tpot_s: float
    factor: float
    engines_factor: float


class SpeedFit(TypedDict):
    """`fit_speed`'s record: the variant whose physics it scales, the training trace's run id, its runs."""

    variant: str
    run_id: str
    points: list[SpeedPoint]


def started(res: RunResult | None) -> float:
    """When a live run started (Unix s, its manifest's ``started_unix``; NaN for none)."""
    import json

    if res is None or res.run_dir is None:
        return float("nan")
    return float(json.loads((res.run_dir / "manifest.json").read_text()).get("started_unix", float("nan")))


def drift(train: RunSpec, runs: Sequence[tuple[str, RunResult]]) -> dict[str, Any]:
    """How far the machine moved over the judged runs: each valid run of the training trace ``train`` (its
    ``runs``, labelled, in the order they ran: before the first pass, before each later one, after the last)
    with its start (Unix s), median TTFT and TPOT (s) and goodput; the ratio of the last to the first median
    and of the largest to the smallest."""
    rows = []
    for label, res in runs:
        j = res.journal()
        ok = j[j["status"] == "ok"]
        rows.append({"label": label, "started_unix": started(res), "ttft_s": float(ok["ttft_s"].median()),
                     "tpot_s": float(ok["tpot_s"].median()), "goodput": float(res.summary["goodput"])})
    rec: dict[str, Any] = {"run_id": train.run_id, "runs": rows}
    if len(rows) >= 2:
        rec["ratio"] = {m: rows[-1][m] / rows[0][m] for m in ("ttft_s", "tpot_s")}
        rec["spread"] = {m: max(r[m] for r in rows) / min(r[m] for r in rows) for m in ("ttft_s", "tpot_s")}
    return rec


def drift_text(rec: dict[str, Any]) -> str:
    """`drift`'s record in words."""
    runs = rec["runs"]
    if len(runs) < 2:
        return "one valid run of the training trace: the machine's drift is not measured"
    t0 = runs[0]["started_unix"]
    return (f"the training trace {len(runs)} times over {(runs[-1]['started_unix'] - t0) / 60:.0f} min (at "
            + ", ".join(f"+{(r['started_unix'] - t0) / 60:.0f}" for r in runs) + " min): median TTFT "
            + " / ".join(f"{1e3 * r['ttft_s']:.1f}" for r in runs) + " ms, TPOT "
            + " / ".join(f"{1e3 * r['tpot_s']:.2f}" for r in runs)
            + f" ms (last / first x {rec['ratio']['ttft_s']:.3f} and x {rec['ratio']['tpot_s']:.3f}; "
            f"largest / smallest x {rec['spread']['ttft_s']:.3f} and x {rec['spread']['tpot_s']:.3f})")


SERVING_PATH_CPU: tuple[str, ...] = (
    "host_base_cores", "host_cpu_per_request_s", "host_cpu_per_token_s", "host_cpu_per_step_s",
    "admission_per_stream_s", "admission_loop_s", "admission_busy_per_stream", "hop_loop_s", "hop_per_stream_s")
"""The serving path's costs in CPU time (mechanisms ``shared_host``, ``stream_admission``, ``prefill_hop``): what a
machine ``factor`` times slower spends ``factor`` times as much of (`at_speed`): seconds of CPU per request, token,
step, cores busy idle (CPU seconds per second), an event loop's time per request and its busy share per stream."""


def at_speed(physics: Physics, factor: float, serving_path: bool = True) -> Physics:
    """``physics`` on a machine ``factor`` times slower (``factor`` > 0): every prefill and decode coefficient of
    the engines' compute times ``factor`` (the memory bandwidth over it) and, with ``serving_path`` (the default),
    the serving path's CPU costs too (`SERVING_PATH_CPU`: the API servers, the proxy and the load generator run on
    the same cores); the KV hop's link and the scheduler's settings as they are."""
    if not factor > 0:
        raise ValueError(f"at_speed: factor must be > 0, got {factor}")
    if factor == 1.0:
        return physics
    path = {k: getattr(physics, k) * factor for k in SERVING_PATH_CPU} if serving_path else {}
    return physics.with_overrides(
        prefill_base_s=physics.prefill_base_s * factor, prefill_per_token_s=physics.prefill_per_token_s * factor,
        prefill_per_token2_s=physics.prefill_per_token2_s * factor, decode_base_s=physics.decode_base_s * factor,
        decode_per_seq_s=physics.decode_per_seq_s * factor,
        hbm_bandwidth_bytes_per_s=physics.hbm_bandwidth_bytes_per_s / factor, **path)


def solve_speed(spec: RunSpec, live: pd.DataFrame, physics: Physics, slo: Any, live_tpot_s: float,
                ratio: float) -> float:
    """The whole machine's speed factor at a live run of ``spec`` (journal ``live``): the ``f`` at which the twin
    under ``at_speed(physics, f)`` has the live run's median TPOT ``live_tpot_s`` (s) over the same requests
    (`pair`); ``ratio`` (the live median over the twin's at ``f = 1``) where ``physics`` has no serving-path cost
    to scale (then the two agree). A machine slower for the engines is slower for the serving path that shares
    their cores too, and the serving path's CPU takes cores from the engines (mechanism ``shared_host``): the TPOT
    grows faster than ``f`` (on the EPYC's fitted 1p1d physics, x 1.42 at ``f`` = 1.33), so the ratio alone would
    overshoot. Brent's method on ``log f`` to 0.1 %, bracketed around ``log ratio`` (widened 6 times by x 1.42);
    ``ratio`` when no bracket is found (the twin's TPOT flat in ``f``)."""
    import math

    from scipy.optimize import brentq

    from repro.validation.accuracy import pair
    from repro.validation.twin import twin_journal

    if not any(getattr(physics, k) for k in SERVING_PATH_CPU):
        return ratio
    target = math.log(live_tpot_s)

    def gap(x: float) -> float:
        p = pair(live, twin_journal(spec, at_speed(physics, math.exp(x))), slo).dropna(
            subset=["live_tpot_s", "sim_tpot_s"])
        return math.log(float(p["sim_tpot_s"].median())) - target

    lo, hi = math.log(ratio) - 0.25, math.log(ratio) + 0.05
    g_lo, g_hi = gap(lo), gap(hi)
    for _ in range(6):
        if g_lo <= 0.0 <= g_hi:
            return float(math.exp(brentq(gap, lo, hi, xtol=1e-3)))
        if g_lo > 0.0:
            lo, g_lo = lo - 0.35, gap(lo - 0.35)
        if g_hi < 0.0:
            hi, g_hi = hi + 0.35, gap(hi + 0.35)
    return ratio


def _point(label: str, spec: RunSpec, res: RunResult, physics: Physics, sim: pd.DataFrame) -> SpeedPoint | None:
    """One live run's `SpeedPoint` against its twin ``sim`` under ``physics``; None without a request's TPOT."""
    from repro.experiment.inputs import truth_cost_model
    from repro.validation.accuracy import pair

    slo = truth_cost_model(spec).slo
    live_j = res.journal()
    p = pair(live_j, sim, slo).dropna(subset=["live_tpot_s", "sim_tpot_s"])
    if p.empty:
        return None
    live, twin = float(p["live_tpot_s"].median()), float(p["sim_tpot_s"].median())
    return {"label": label, "started_unix": started(res), "live_tpot_s": live, "sim_tpot_s": twin,
            "factor": solve_speed(spec, live_j, physics, slo, live, live / twin), "engines_factor": live / twin}


def fit_speed(variant: str, train: RunSpec, runs: Sequence[tuple[str, RunResult]], physics: Physics) -> SpeedFit:
    """The machine's speed at each valid run of the training trace ``train`` (``runs``: labelled, in the order they
    ran): the median TPOT of its requests over the median of the same requests' in the twin under ``physics``
    (``variant``'s fitted physics; the twin is one journal, the trace and placements being the same each time),
    the engines' factor, and the whole machine's that gives the live median (`solve_speed`)."""
    from repro.validation.twin import twin_journal

    sim = twin_journal(train, physics)
    points = [pt for label, res in runs if (pt := _point(label, train, res, physics, sim)) is not None]
    if not points:
        raise ValueError(f"fit_speed: no run of the training trace {train.run_id} has a request with a TPOT")
    return {"variant": variant, "run_id": train.run_id, "points": points}


def search_speed(variant: str, probes: Sequence[tuple[RunSpec, RunResult]], physics: Physics,
                 below: float) -> SpeedFit:
    """The machine's speed during a live saturation search, read from the search's own probes: each valid probe
    at a rate below ``below`` (req/s: the lowest rate the search found collapsing, goodput at most its target
    plus band; the probes there queue, and their TPOT says the load, not the machine), as in `fit_speed`: its
    median TPOT over its twin's under ``physics``. The training trace runs only after the search (its rate is a
    fraction of the rate found), so on a machine that moves, its first run is not the machine the search saw
    (1p1d-cpu on a 2-core AMD EPYC, commit 8da6c0c: the training trace's three runs, 52, 70 and 88 min after
    the search, read x 0.94, 1.01 and 1.33).
    A ValueError when no probe below ``below`` has a TPOT."""
    from repro.validation.twin import twin_journal

    points = [pt for spec, res in sorted(probes, key=lambda p: p[0].rate) if spec.rate < below
              and (pt := _point(f"probe {spec.rate:.3g} req/s", spec, res, physics, twin_journal(spec, physics)))
              is not None]
    if not points:
        raise ValueError(f"search_speed: no saturation probe below {below:.3g} req/s has a request with a TPOT")
    return {"variant": variant, "run_id": "saturation search", "points": points}


def search_factor(fit: SpeedFit, key: str = "factor") -> float:
    """One speed for the whole search (`search_speed`): the median of its probes' factors (``key``: ``factor``, the
    whole machine's, or ``engines_factor``)."""
    return float(np.median([_factor(p, key) for p in fit["points"]]))


def _factor(point: SpeedPoint, key: str) -> float:
    """A point's ``key`` factor; a record that has ``factor`` alone (the engines' factor) gives that for every key."""
    return float(point.get(key, point["factor"]))  # type: ignore[call-overload]


def speed_at(fit: SpeedFit, t: float, key: str = "factor") -> float:
    """The machine's speed factor at ``t`` (Unix s): linear between the training trace's runs, the nearest run's
    beyond them (and for a NaN moment, the first run's: the moment the fits were taken); ``key``: ``factor`` (the
    whole machine's) or ``engines_factor`` (the engines' alone)."""
    pts = sorted(fit["points"], key=lambda p: p["started_unix"])
    if t != t:  # NaN
        return _factor(pts[0], key)
    return float(np.interp(t, [p["started_unix"] for p in pts], [_factor(p, key) for p in pts]))


def speed_text(fit: SpeedFit) -> str:
    """`fit_speed`'s record in words."""
    pts = fit["points"]
    t0 = pts[0]["started_unix"]
    return (f"the machine's speed (variant drift-tracked, mechanism machine_drift: {fit['variant']}'s physics, its "
            f"engines' compute and serving path scaled at each judged run's start to the training trace's median TPOT, "
            f"interpolated between its runs): x " + " / ".join(f"{p['factor']:.3f}" for p in pts)
            + (" (the engines alone: x " + " / ".join(f"{p['engines_factor']:.3f}" for p in pts) + ")"
               if all("engines_factor" in p for p in pts) else "") + " at "
            + ", ".join(f"+{(p['started_unix'] - t0) / 60:.0f}" for p in pts) + " min")
