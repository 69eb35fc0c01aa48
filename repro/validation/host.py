"""The machine a cluster shares with its serving path, measured: mechanism ``shared_host`` (`repro.engine.mechanisms.
SHARED_HOST`, `repro.engine.physics.Physics.host_stretch`).

On a CPU cluster every engine, its API server, the proxy and the load generator run on the same cores. What the
serving path takes of them is measured on the cluster, with the engines' own processes booked apart
(`repro.live.run_account.CpuAccount`): every live run's ``account.json`` holds each part's CPU seconds sampled
once a second (``series``) and the replay's clock origin (``replay_started_unix``), so a window of the run can be
booked alone, after the processes' start-up. Three measurements (`probe_specs`), none of a judged trace:

- an idle window (`IDLE_S` s, no request): the serving path's base (pollers, the proxy's metric scrapes);
- two differential probes through the whole serving path, of the training seed's trace: ``chat`` (short outputs,
  many requests) and ``reasoning`` (long outputs, few requests) at the same token rate (half the mixed
  workload's at the cluster's saturation), so that the cost of a request and the cost of a streamed token
  are told apart.

`fit_host` cuts each probe's steady part (from `WARMUP_S` after its first arrival to its last answer) into bins
of `BIN_S` seconds and fits, by non-negative least squares over every bin and the idle window, the serving
path's CPU seconds = ``base_cores`` x seconds + ``per_request_s`` x requests arrived + ``per_token_s`` x
tokens streamed (each answer's tokens spread evenly between its first and its last) + ``per_step_s`` x decode
steps (`steps_between`: the serving path handles each step's outputs at once: a token costs less in a big
batch). The serving path is every part
but the engines' cores and workers (those are the engines' steps, which the mechanism shares the rest among)
and what ran outside the run.

Seconds, tokens; CPU in CPU seconds; cores in cores.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np
import pandas as pd

from repro.engine.physics import ADMISSION_MAX_UTILISATION
from repro.errors import ConfigError

if TYPE_CHECKING:
    from repro.engine.physics import Physics
    from repro.experiment.spec import RunSpec

IDLE_S = 6.0
"""Seconds of the idle window (`idle_usage`)."""
WARMUP_S = 2.0
"""Seconds after a probe's first arrival that are left out (the client's and the proxy's first requests)."""
BIN_S = 2.0
"""Seconds per bin of a probe's steady part (`probe_bins`)."""
PROBES: tuple[tuple[str, float], ...] = (("chat", 0.5), ("reasoning", 0.5), ("reasoning", 0.9), ("mixed", 1.0))
"""The differential probes: a workload (short outputs: chat, mean 253 tokens; long: reasoning, 845; the judged
mix) and the share of the mixed workload's token rate at the cluster's saturation it streams. The first two
stream the same tokens with three times as many requests apart (the cost of a request against a token's); the
third runs more streams at once, the fourth as many as the judged runs at 1.0 x (the admission delay's growth
with them, `fit_admission`: fitted on the first three alone, on 7-32 streams, it was extrapolated to the 40-52
streams a 1p1d-cpu decode engine runs at saturation). A probe at `SATURATION_SHARE` may be left out when the
machine cannot keep up with it; the others may not."""
SATURATION_SHARE = 1.0
"""The probes' share (`PROBES`) at the cluster's saturation: the one a validation may go without."""
PROBE_WORKLOADS: tuple[str, ...] = tuple(dict.fromkeys(w for w, _ in PROBES))
REGRESSORS = ("seconds", "requests", "tokens", "steps")
"""What the serving path's CPU is fitted on (`fit_host`): its base, the requests, the tokens and the decode steps."""
ENGINE_PARTS = (":core", ":worker")
"""Suffixes of the parts that are the engines' own steps (`repro.live.run_account.CpuAccount`)."""


class HostProbe(TypedDict):
    """One measurement of the serving path: the run (``idle`` for the idle window), its workload and rate
    (req/s), the seconds, requests and tokens of its steady part, the serving path's CPU seconds there, and
    what the fit predicts for it."""

    run: str
    workload: str
    rate: float
    seconds: float
    requests: float
    tokens: float
    steps: float
    serving_cpu_s: float
    engines_cpu_s: float
    parts_cpu_s: dict[str, float]
    predicted_cpu_s: float


class HostFit(TypedDict):
    """`fit_host`'s record: the host's cores, the fitted base (cores), CPU per request and per token (s), the
    bins fitted on, the fit's R^2 over them, and every probe with its prediction."""

    cores: int
    base_cores: float
    per_request_s: float
    per_token_s: float
    per_step_s: float
    bins: int
    r2: float
    probes: list[HostProbe]


def serving_part(part: str) -> bool:
    """Whether a `CpuAccount` part is the serving path's: not an engine's core or worker, not ``outside``, not
    ``idle``."""
    return not part.endswith(ENGINE_PARTS) and part not in ("outside", "idle")


def probe_rates(saturation_rate: float, mean_output: Mapping[str, float]) -> list[tuple[str, float]]:
    """Each probe's workload and rate (req/s): its share (`PROBES`) of the mixed workload's token rate at
    ``saturation_rate``, over the workload's mean output (tokens; ``mean_output`` holds ``mixed`` and every
    `PROBE_WORKLOADS`)."""
    tokens = saturation_rate * mean_output["mixed"]
    return [(w, round(share * tokens / max(mean_output[w], 1.0), 6)) for w, share in PROBES]


def _cpu_at(series: Mapping[str, Any], started_unix: float, t: float, parts: Sequence[str]) -> dict[str, float]:
    times = np.asarray(series["t_unix"], dtype=float) - started_unix
    return {p: float(np.interp(t, times, np.asarray(series["cpu_s"][p], dtype=float))) for p in parts}


def tokens_between(journal: pd.DataFrame, a: float, b: float) -> float:
    """Tokens the answers of ``journal`` (a live run's, times in s from the replay's origin) streamed in
    ``[a, b)``: each ok answer's first token at its ``first_token_s``, the others evenly over
    ``(first_token_s, finish_s]``."""
    ok = journal[journal["status"] == "ok"]
    f = ok["first_token_s"].to_numpy(dtype=float)
    e = ok["finish_s"].to_numpy(dtype=float)
    n = ok["generated_tokens"].to_numpy(dtype=float)
    first = ((f >= a) & (f < b)).astype(float)
    span = np.maximum(e - f, 1e-9)
    overlap = np.clip(np.minimum(e, b) - np.maximum(f, a), 0.0, None) / span
    rest = np.where(n > 1, (n - 1) * overlap, 0.0)
    return float(first.sum() + rest.sum())


STEP_GRID_S = 0.01
"""Resolution (s) of `steps_between`'s integral."""


def steps_between(journal: pd.DataFrame, edges: np.ndarray) -> np.ndarray:
    """Decode steps the engines of ``journal`` ran in each bin between ``edges`` (s from the replay's origin),
    from the answers alone: while an engine streams, every running answer gains a token per step, so the
    engine's steps per second are its answers' tokens per second (each ``1 / tpot_s`` between its first and
    last token) over how many run; integrated on a grid of `STEP_GRID_S`, per decode engine, summed."""
    ok = journal[(journal["status"] == "ok") & (journal["generated_tokens"] > 1)]
    grid = np.arange(edges[0], edges[-1], STEP_GRID_S)
    out = np.zeros(len(edges) - 1)
    if ok.empty or len(grid) == 0:
        return out
    which = np.clip(np.searchsorted(edges, grid, side="right") - 1, 0, len(out) - 1)
    for _, mine in ok.groupby("decode_instance"):
        f = mine["first_token_s"].to_numpy(dtype=float)
        e = mine["finish_s"].to_numpy(dtype=float)
        rate = 1.0 / np.maximum(mine["tpot_s"].to_numpy(dtype=float), 1e-6)
        i0 = np.searchsorted(grid, f)
        i1 = np.searchsorted(grid, e)
        running = np.zeros(len(grid) + 1)
        tokens = np.zeros(len(grid) + 1)
        np.add.at(running, i0, 1.0)
        np.add.at(running, i1, -1.0)
        np.add.at(tokens, i0, rate)
        np.add.at(tokens, i1, -rate)
        n = np.cumsum(running)[:-1]
        tok = np.cumsum(tokens)[:-1]
        steps = np.where(n > 0.5, tok / np.maximum(n, 1.0), 0.0) * STEP_GRID_S
        out += np.bincount(which, weights=steps, minlength=len(out))
    return out


def probe_bins(run_dir: str | Path) -> tuple[pd.DataFrame, HostProbe]:
    """A live run's steady part (from `WARMUP_S` after its first arrival to its last answer) in bins of
    `BIN_S` s: per bin its ``seconds``, ``requests`` arrived, ``tokens`` streamed and the serving path's
    ``cpu_s``; and the whole steady part as a `HostProbe` (its prediction not yet filled in). A
    `ConfigError` when the run's ``account.json`` has no CPU series (a run older than this measurement)."""
    from repro.experiment.journal import read

    run_dir = Path(run_dir)
    account = json.loads((run_dir / "account.json").read_text())
    series, started = account.get("series"), account.get("replay_started_unix")
    if not series or not series.get("t_unix") or started is None or not math.isfinite(float(started)):
        raise ConfigError(f"validate: {run_dir / 'account.json'} has no CPU series with the replay's clock origin "
                          f"(a run made before the shared-host measurement): run it again")
    journal = read(run_dir / "journal.jsonl")
    spec = json.loads((run_dir / "manifest.json").read_text())["spec"]
    a0 = float(journal["arrival_s"].min()) + WARMUP_S
    b0 = float(np.nanmax(journal["finish_s"].to_numpy(dtype=float)))
    if not b0 > a0 + BIN_S:
        raise ConfigError(f"validate: the probe {run_dir.name} is too short to measure "
                          f"({b0 - a0:.1f} s of steady part)")
    parts = sorted(series["cpu_s"])
    serving = [p for p in parts if serving_part(p)]
    engines = [p for p in parts if p.endswith(ENGINE_PARTS)]
    edges = np.arange(a0, b0 + 1e-9, BIN_S)
    if edges[-1] < b0:
        edges = np.append(edges, b0)
    cpu = [_cpu_at(series, float(started), float(t), parts) for t in edges]
    arrivals = journal["arrival_s"].to_numpy(dtype=float)
    steps = steps_between(journal, edges)
    rows = []
    for i in range(len(edges) - 1):
        a, b = float(edges[i]), float(edges[i + 1])
        rows.append({"seconds": b - a, "requests": float(((arrivals >= a) & (arrivals < b)).sum()),
                     "tokens": tokens_between(journal, a, b), "steps": float(steps[i]),
                     "cpu_s": sum(cpu[i + 1][p] - cpu[i][p] for p in serving)})
    bins = pd.DataFrame(rows)
    probe: HostProbe = {
        "run": run_dir.name, "workload": str(spec.get("workload")), "rate": float(spec.get("rate") or 0.0),
        "seconds": b0 - a0, "requests": float(bins["requests"].sum()), "tokens": float(bins["tokens"].sum()),
        "steps": float(bins["steps"].sum()), "serving_cpu_s": float(bins["cpu_s"].sum()),
        "engines_cpu_s": sum(cpu[-1][p] - cpu[0][p] for p in engines),
        "parts_cpu_s": {p: round(cpu[-1][p] - cpu[0][p], 3) for p in parts},
        "predicted_cpu_s": math.nan}
    return bins, probe


def idle_usage(cpu_s: Mapping[str, float], seconds: float) -> HostProbe:
    """The idle window as a `HostProbe`: ``cpu_s`` per part (`CpuAccount.cpu_s`) over ``seconds`` without a
    request."""
    serving = sum(v for p, v in cpu_s.items() if serving_part(p))
    engines = sum(v for p, v in cpu_s.items() if p.endswith(ENGINE_PARTS))
    return {"run": "idle", "workload": "", "rate": 0.0, "seconds": float(seconds), "requests": 0.0, "tokens": 0.0,
            "steps": 0.0, "serving_cpu_s": float(serving), "engines_cpu_s": float(engines),
            "parts_cpu_s": {p: round(v, 3) for p, v in cpu_s.items()}, "predicted_cpu_s": math.nan}


def fit_host(cores: int, idle: HostProbe | None, probes: Sequence[tuple[pd.DataFrame, HostProbe]]) -> HostFit:
    """The serving path's base (cores), CPU per request and per token (s), fitted by non-negative least squares
    over every bin of the ``probes`` (`probe_bins`) and the ``idle`` window (one row); each probe's
    ``predicted_cpu_s`` filled in. A `ConfigError` when the bins cannot tell the three apart (fewer than 3)."""
    from scipy.optimize import nnls

    frames = [b for b, _ in probes]
    if idle is not None:
        frames.append(pd.DataFrame([{"seconds": idle["seconds"], "requests": 0.0, "tokens": 0.0, "steps": 0.0,
                                     "cpu_s": idle["serving_cpu_s"]}]))
    rows = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if len(rows) < len(REGRESSORS):
        raise ConfigError(f"validate: the shared-host fit needs at least {len(REGRESSORS)} bins of measurement, "
                          f"got {len(rows)}")
    X = rows[list(REGRESSORS)].to_numpy(dtype=float)
    y = rows["cpu_s"].to_numpy(dtype=float)
    scale = np.maximum(X.max(axis=0), 1e-12)  # columns of comparable size for the solver
    coef, _ = nnls(X / scale, y)
    coef = coef / scale
    resid = y - X @ coef
    total = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float((resid ** 2).sum()) / total if total > 0 else math.nan
    base, per_request, per_token, per_step = (float(c) for c in coef)
    out: list[HostProbe] = []
    for p in [*(p for _, p in probes), *([idle] if idle is not None else [])]:
        predicted = base * p["seconds"] + per_request * p["requests"] + per_token * p["tokens"] + per_step * p["steps"]
        out.append({**p, "predicted_cpu_s": predicted})
    return {"cores": int(cores), "base_cores": base, "per_request_s": per_request, "per_token_s": per_token,
            "per_step_s": per_step, "bins": int(len(rows)), "r2": r2, "probes": out}


class AdmissionPoint(TypedDict):
    """One decode engine in one run: its requests, the streams it ran at their arrivals (mean), the rate at which
    they arrived (req/s, over their span), and its API server's time per request outside the engine core (s, the
    engines' own account)."""

    run: str
    engine: str
    requests: int
    streams: float
    arrivals: float
    frontend_s: float


class AdmissionFit(TypedDict):
    """`fit_admission`'s record: ``frontend_s = loop_s + per_stream_s * streams ** exponent`` over the points, the
    fit's R^2 (NaN: off), the parameter at the edge of its range if one is (``edge``: "" when none), and the
    points. ``busy_per_stream`` is the event loop's form (``loop_s / (1 - busy_per_stream * streams)``) that
    validations shipped before the power law state; a new fit leaves it 0 (`admission_delay`)."""

    loop_s: float
    per_stream_s: float
    busy_per_stream: float
    exponent: float
    r2: float
    edge: str
    points: list[AdmissionPoint]


def admission_points(run_dir: str | Path) -> list[AdmissionPoint]:
    """Each decode engine of a live run: its requests, the mean number of sequences it streamed when each of them
    reached it (answers between their first and last token at the request's ``decode_start_s``), the rate they
    reached it at (requests / the span of their ``decode_start_s``), and its API server's mean time per request
    outside the engine core (``account.json``'s ``engines``: e2e - queue - inference,
    `repro.live.run_account.request_time_delta`)."""
    from repro.experiment.journal import read

    run_dir = Path(run_dir)
    account = json.loads((run_dir / "account.json").read_text()).get("engines") or {}
    journal = read(run_dir / "journal.jsonl")
    ok = journal[journal["status"] == "ok"]
    out: list[AdmissionPoint] = []
    for name, mine in ok.groupby("decode_instance"):
        frontend = (account.get(str(name)) or {}).get("frontend_s")
        if frontend is None or not math.isfinite(float(frontend)) or mine.empty:
            continue
        f = mine["first_token_s"].to_numpy(dtype=float)
        e = mine["finish_s"].to_numpy(dtype=float)
        at = mine["decode_start_s"].to_numpy(dtype=float)
        streams = ((f[None, :] <= at[:, None]) & (e[None, :] > at[:, None])).sum(axis=1)
        span = float(at.max() - at.min())
        out.append({"run": run_dir.name, "engine": str(name), "requests": int(len(mine)),
                    "streams": float(streams.mean()), "arrivals": float(len(mine) - 1) / span if span > 0 else 0.0,
                    "frontend_s": float(frontend)})
    return out


ADMISSION_EXPONENT_RANGE = (0.5, 3.0)
"""`fit_admission`'s bounds on the exponent (the prior of mechanism ``stream_admission``: sublinear to cubic)."""


def admission_delay(fit: Mapping[str, Any], streams: float) -> float:
    """The admission delay (s) a `fit_admission` record (or a shipped validation's, in the event loop's form)
    states at ``streams``: `repro.engine.physics.Physics.admission_delay_s` of its parameters."""
    delay = float(fit.get("per_stream_s") or 0.0) * float(streams) ** float(fit.get("exponent") or 1.0)
    rho = min(float(fit.get("busy_per_stream") or 0.0) * float(streams), ADMISSION_MAX_UTILISATION)
    return delay + float(fit.get("loop_s") or 0.0) / (1.0 - rho)


def admission_formula(fit: Mapping[str, Any]) -> str:
    """A `fit_admission` record's delay as a formula in ms (either form)."""
    if fit.get("busy_per_stream"):
        return f"{1e3 * fit['loop_s']:.1f} ms / (1 - {fit['busy_per_stream']:.4f} x streams)"
    return f"{1e3 * fit['loop_s']:.1f} ms + {1e3 * fit['per_stream_s']:.4g} ms x streams^{fit['exponent']:.2f}"


def fit_power_law(streams: Sequence[float], y: Sequence[float], weights: Sequence[float]
                  ) -> tuple[float, float, float, float, str] | None:
    """``y = loop + per_stream * streams ** exponent`` by weighted least squares (``loop``, ``per_stream`` >= 0,
    the exponent in `ADMISSION_EXPONENT_RANGE`): ``(loop, per_stream, exponent, r2, edge)``, ``edge`` naming the
    exponent when it stops at a bound of its range ("" when not). None with fewer than 4 points, points that do
    not spread over the streams (less than one stream apart), or a fit that does not converge."""
    from scipy.optimize import curve_fit

    b = np.asarray(streams, dtype=float)
    yy = np.asarray(y, dtype=float)
    w = np.asarray(weights, dtype=float)
    if len(b) < 4 or float(np.ptp(b)) < 1.0:
        return None
    lo, hi = ADMISSION_EXPONENT_RANGE

    def model(x: np.ndarray, loop: float, per_stream: float, exponent: float) -> np.ndarray:
        return loop + per_stream * np.power(x, exponent)

    slope = max(float(np.polyfit(b, yy, 1, w=np.sqrt(w))[0]), 1e-6)
    try:
        (loop, per_stream, exponent), _ = curve_fit(
            model, b, yy, p0=(max(float(yy.min()) * 0.5, 1e-4), slope, 1.0), sigma=1.0 / np.sqrt(w),
            bounds=([0.0, 0.0, lo], [1.0, 1.0, hi]), maxfev=20000)
    except (RuntimeError, ValueError):
        return None
    resid = yy - model(b, loop, per_stream, exponent)
    total = float((w * (yy - np.average(yy, weights=w)) ** 2).sum())
    r2 = 1.0 - float((w * resid ** 2).sum()) / total if total > 0 else math.nan
    edge = "exponent" if min(exponent - lo, hi - exponent) < 0.01 * (hi - lo) else ""
    return float(loop), float(per_stream), float(exponent), r2, edge


def fit_admission(points: Sequence[AdmissionPoint]) -> AdmissionFit:
    """``frontend_s = loop_s + per_stream_s * streams ** exponent`` by least squares over the ``points`` (each
    weighted by its requests; ``loop_s`` and ``per_stream_s`` >= 0, the exponent in `ADMISSION_EXPONENT_RANGE`):
    the API server's one event loop serves the new request in turn with every stream's per-step outputs, so its
    time grows with the streams; the exponent says how fast, from the points (the probe at saturation,
    `PROBES`, puts some where the judged runs' heaviest load is, so the delay is interpolated, not extrapolated).
    The form has no pole: an event loop with one, ``loop_s / (1 - busy x streams)`` (`Physics.admission_delay_s`
    for profiles that set ``admission_busy_per_stream``), fitted below saturation, can reach its utilisation cap
    (`repro.engine.physics.ADMISSION_MAX_UTILISATION`) short of the streams a decode engine runs at saturation.
    The streams, not the arrivals, load the loop: `fit_host`'s costs on the same runs put a streamed token at
    559 us of the serving path's CPU and a request at 7.9 ms in the 1p1d record, 382 us and 25.0 ms in the 1p2d
    record (``data/validation/{1p1d,1p2d}-cpu/validation.md``, "The shared host"). With fewer than 4 points, or
    points that do not spread over the streams, the mechanism stays off (``loop_s`` 0) and the record says so by
    its NaN R^2; a fitted exponent at a bound of its range is named in ``edge``: the form then misses what the
    points show."""
    off: AdmissionFit = {"loop_s": 0.0, "per_stream_s": 0.0, "busy_per_stream": 0.0, "exponent": 1.0,
                         "r2": math.nan, "edge": "", "points": list(points)}
    got = fit_power_law([p["streams"] for p in points], [p["frontend_s"] for p in points],
                        [p["requests"] for p in points])
    if got is None:
        return off
    loop, per_stream, exponent, r2, edge = got
    return {"loop_s": loop, "per_stream_s": per_stream, "busy_per_stream": 0.0, "exponent": exponent, "r2": r2,
            "edge": edge, "points": list(points)}


class HopPoint(TypedDict):
    """One prefill engine in one run: its requests, the sequences the cluster's decode engines streamed when each
    reached it (mean), and the mean time of their prefill legs outside its core (s): the proxy's leg (prefill
    request sent -> answered, its journal) less the engine's own queue and inference time (its account)."""

    run: str
    engine: str
    requests: int
    streams: float
    leg_s: float
    engine_s: float
    hop_s: float


class HopFit(TypedDict):
    """`fit_hop`'s record: ``hop_s = loop_s + per_stream_s * streams ** exponent`` over the points, the fit's R^2
    (NaN: off), the exponent's ``edge`` ("" when inside its range), and the points."""

    loop_s: float
    per_stream_s: float
    exponent: float
    r2: float
    edge: str
    points: list[HopPoint]


def hop_points(run_dir: str | Path) -> list[HopPoint]:
    """Each prefill engine of a live run: its requests, the mean number of sequences the whole cluster streamed
    (answers between their first and last token, every decode engine's) when each of them was sent to it
    (``prefill_start_s``), the mean prefill leg (``prefill_end_s - prefill_start_s``) and the engine's own mean
    queue + inference time (``account.json``'s ``engines``), and their difference, the leg's time outside the
    engine's core. An engine without its own account is left out."""
    from repro.experiment.journal import read

    run_dir = Path(run_dir)
    account = json.loads((run_dir / "account.json").read_text()).get("engines") or {}
    journal = read(run_dir / "journal.jsonl")
    ok = journal[journal["status"] == "ok"]
    f = ok["first_token_s"].to_numpy(dtype=float)
    e = ok["finish_s"].to_numpy(dtype=float)
    out: list[HopPoint] = []
    for name, mine in ok.groupby("prefill_instance"):
        own = account.get(str(name)) or {}
        queue, inference = own.get("queue_s"), own.get("inference_s")
        if queue is None or inference is None or mine.empty:
            continue
        at = mine["prefill_start_s"].to_numpy(dtype=float)
        leg = (mine["prefill_end_s"] - mine["prefill_start_s"]).to_numpy(dtype=float)
        if not np.isfinite(leg).any():
            continue
        streams = ((f[None, :] <= at[:, None]) & (e[None, :] > at[:, None])).sum(axis=1)
        engine_s = float(queue) + float(inference)
        out.append({"run": run_dir.name, "engine": str(name), "requests": int(len(mine)),
                    "streams": float(streams.mean()), "leg_s": float(np.nanmean(leg)), "engine_s": engine_s,
                    "hop_s": float(np.nanmean(leg)) - engine_s})
    return out


def fit_hop(points: Sequence[HopPoint]) -> HopFit:
    """Mechanism ``prefill_hop``: ``hop_s = loop_s + per_stream_s * streams ** exponent`` (`fit_power_law`,
    each point weighted by its requests) over the ``points`` (`hop_points` of the training seed's runs, the probe
    at saturation among them): the proxy's and the prefill API server's event loops share the cores with every
    stream's tokens, so the prefill leg's time outside its engine grows with the cluster's streams. The fit takes
    the streams alone; the 1p1d record's hop points (``data/validation/1p1d-cpu/validation.md``, "The shared
    host") also follow the prefill engine's arrivals, which it does not model (docs/VALIDATION.md, "1p1d, the
    prefill leg"). Off (``loop_s`` 0, NaN R^2) with fewer than 4 points or points that do not spread over the
    streams."""
    got = fit_power_law([p["streams"] for p in points], [max(p["hop_s"], 0.0) for p in points],
                        [p["requests"] for p in points])
    if got is None:
        return {"loop_s": 0.0, "per_stream_s": 0.0, "exponent": 1.0, "r2": math.nan, "edge": "",
                "points": list(points)}
    loop, per_stream, exponent, r2, edge = got
    return {"loop_s": loop, "per_stream_s": per_stream, "exponent": exponent, "r2": r2, "edge": edge,
            "points": list(points)}


def hop_formula(fit: Mapping[str, Any]) -> str:
    """A `fit_hop` record's hop as a formula in ms."""
    return f"{1e3 * fit['loop_s']:.1f} ms + {1e3 * fit['per_stream_s']:.4g} ms x streams^{fit['exponent']:.2f}"


def with_host(physics: Physics, fit: HostFit, admission: AdmissionFit | None = None,
              hop: HopFit | None = None) -> Physics:
    """``physics`` with mechanism ``shared_host`` switched on at ``fit``'s measurements (its steal share as
    ``physics`` has it: `fit_steal_share` fits it afterwards), ``stream_admission`` at ``admission``'s and
    ``prefill_hop`` at ``hop``'s when given (and on)."""
    out = physics.with_overrides(host_cores=fit["cores"], host_base_cores=fit["base_cores"],
                                 host_cpu_per_request_s=fit["per_request_s"], host_cpu_per_token_s=fit["per_token_s"],
                                 host_cpu_per_step_s=fit["per_step_s"])
    if admission is not None and admission["loop_s"] > 0:
        out = out.with_overrides(admission_per_stream_s=admission["per_stream_s"],
                                 admission_exponent=admission["exponent"], admission_loop_s=admission["loop_s"],
                                 admission_busy_per_stream=admission["busy_per_stream"])
    if hop is not None and (hop["loop_s"] > 0 or hop["per_stream_s"] > 0):
        out = out.with_overrides(hop_loop_s=hop["loop_s"], hop_per_stream_s=hop["per_stream_s"],
                                 hop_exponent=hop["exponent"])
    return out


STEAL_SHARES: tuple[float, ...] = tuple(round(0.1 * i, 1) for i in range(11))
"""The grid `fit_steal_share` searches first (then halves its step twice around the best)."""


class StealFit(TypedDict):
    """`fit_steal_share`'s record: the share, and per share tried the score (mean |log(sim / live)| of the runs'
    median TPOTs) and each run's median TPOT error at the share chosen."""

    share: float
    score: float
    tried: dict[str, float]
    tpot_err: dict[str, float]


def fit_steal_share(physics: Physics, runs: Sequence[tuple[RunSpec, pd.DataFrame]]) -> StealFit:
    """`Physics.host_steal_share` (how much of the serving path's CPU preempts a computing engine) that makes the
    simulated median TPOT of ``runs`` (specs and live journals: the training run and the probes, none judged)
    closest to the measured: the mean over runs of ``|log(sim / live)|``, on a grid of `STEAL_SHARES` refined
    twice around the best. The costs themselves (``physics``'s ``host_*``) are measured, not fitted here."""
    from repro.validation.twin import twin_journal

    live = [float(j.loc[j["status"] == "ok", "tpot_s"].median()) for _, j in runs]
    tried: dict[float, float] = {}
    errs: dict[float, dict[str, float]] = {}

    def score(share: float) -> float:
        share = round(min(max(share, 0.0), 1.0), 4)
        if share not in tried:
            ph = physics.with_overrides(host_steal_share=share)
            sims = [float(twin_journal(spec, ph)["tpot_s"].median()) for spec, _ in runs]
            ratios = [s / m for s, m in zip(sims, live, strict=True) if s > 0 and m > 0]
            tried[share] = float(np.mean([abs(math.log(r)) for r in ratios])) if ratios else math.inf
            errs[share] = {}
            for (spec, _), s, m in zip(runs, sims, live, strict=True):  # a trace run again: run_id#2, #3, ...
                key, n = spec.run_id, 1
                while key in errs[share]:
                    n += 1
                    key = f"{spec.run_id}#{n}"
                errs[share][key] = s / m - 1.0
        return tried[share]

    best = min(STEAL_SHARES, key=score)
    step = 0.1
    for _ in range(2):
        step /= 2
        best = min((best - step, best, best + step), key=score)
    best = round(min(max(best, 0.0), 1.0), 4)
    return {"share": best, "score": tried[best], "tried": {f"{k:g}": v for k, v in sorted(tried.items())},
            "tpot_err": errs[best]}


def fit_serving_path(runs: Sequence[tuple[RunSpec, pd.DataFrame]], physics: Physics) -> tuple[Physics, dict[str, Any]]:
    """The serving path's light-load TTFT on top of ``physics`` (a shared host's included): the median of measured
    minus simulated TTFT over the requests of ``runs`` (specs and live journals of the training seed, which no
    judged run replays: `repro.validation.run.validate` gives the training trace's runs before, between and
    after the passes of judged runs, so a machine that moves while they run is met where they were, and the
    probes), added to the KV hop (at least 0 s in all). Returns the physics and a record (runs, offset, the
    median signed relative error per metric before and after; the TPOT's is a prediction: nothing of it is
    fitted)."""
    from repro.experiment.inputs import truth_cost_model
    from repro.validation.accuracy import pair
    from repro.validation.twin import twin_journal

    if not runs:
        raise ConfigError("validate: no training run to fit the serving path on")
    spec = runs[0][0]
    slo = truth_cost_model(spec).slo
    before = pd.concat([pair(live, twin_journal(s, physics), slo) for s, live in runs], ignore_index=True)
    if before.empty:
        raise ConfigError(f"validate: the training run {spec.run_id} has no request to fit on")
    offset = float((before["live_ttft_s"] - before["sim_ttft_s"]).median())
    fitted = physics.with_overrides(transfer_latency_s=max(0.0, physics.transfer_latency_s + offset))
    after = pd.concat([pair(live, twin_journal(s, fitted), slo) for s, live in runs], ignore_index=True)
    return fitted, {
        "training_run": spec.run_id, "seed": spec.seed, "rate": spec.rate, "policy": spec.policy, "runs": len(runs),
        "requests": int(len(before)), "ttft_offset_s": offset,
        "median_err_before": {m: float(before[f"err_{m}"].median()) for m in ("ttft_s", "tpot_s", "e2e_s")},
        "median_err_after": {m: float(after[f"err_{m}"].median()) for m in ("ttft_s", "tpot_s", "e2e_s")},
    }


def _how_fitted(fit: Mapping[str, Any]) -> str:
    """A `fit_power_law` record's provenance in words: its points, R^2, and its exponent at an edge if it is."""
    return (f"(least squares over {len(fit['points'])} points of the training seed, R^2 {fit['r2']:.2f}"
            + (f"; the {fit['edge']} at the edge of its range: the form misses what the points show"
               if fit.get("edge") else "") + ").")


def markdown(fit: HostFit, admission: AdmissionFit | None = None, steal: StealFit | None = None,
             hop: HopFit | None = None) -> list[str]:
    """The measurement as Markdown lines: the fitted costs, then each probe measured against predicted; the steal
    share, the admission delay's fit and the prefill hop's, with their points, when given."""
    lines = [f"Shared host (mechanism `shared_host`): {fit['cores']} cores; the serving path takes "
             f"{fit['base_cores']:.3f} cores at rest, {1e3 * fit['per_request_s']:.1f} ms of CPU per request and "
             f"{1e6 * fit['per_token_s']:.0f} us per streamed token and {1e6 * fit['per_step_s']:.0f} us per decode "
             f"step (non-negative least squares over {fit['bins']} "
             f"bins of {BIN_S:g} s, R^2 {fit['r2']:.2f}).", "",
             "| probe | workload | rate (req/s) | seconds | requests | tokens | decode steps | serving CPU (s) | "
             "predicted (s) | engines' CPU (s) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for p in fit["probes"]:
        lines.append(f"| {p['run']} | {p['workload'] or '-'} | {p['rate']:.3g} | {p['seconds']:.1f} | "
                     f"{p['requests']:.0f} | {p['tokens']:.0f} | {p['steps']:.0f} | {p['serving_cpu_s']:.2f} | "
                     f"{p['predicted_cpu_s']:.2f} | {p['engines_cpu_s']:.2f} |")
    if steal is not None:
        lines += ["", f"Steal share {steal['share']:.3g} (how much of the serving path's CPU preempts a computing "
                      f"engine; fitted on the median TPOT of the training run and the probes, none judged: mean "
                      f"|log(sim / live)| {steal['score']:.3f}; each run's TPOT error there: "
                      + ", ".join(f"{k} {100 * v:+.0f} %" for k, v in steal["tpot_err"].items()) + ")."]
    if admission is not None:
        lines += ["", (f"Admission (mechanism `stream_admission`): a decode engine's API server, one event loop, "
                       f"holds a request {admission_formula(admission)} before its engine core has it "
                       + _how_fitted(admission) if admission["loop_s"] > 0 else
                       "Admission: off (the points did not spread over the streams)."), "",
                  "| run | engine | requests | arrivals (req/s) | streams at arrival (mean) | API server's time (ms) "
                  "| fitted (ms) |", "|---|---|---|---|---|---|---|"]
        for p in admission["points"]:
            fitted = admission_delay(admission, p["streams"])
            lines.append(f"| {p['run']} | {p['engine']} | {p['requests']} | {p['arrivals']:.2f} | "
                         f"{p['streams']:.1f} | {1e3 * p['frontend_s']:.1f} | {1e3 * fitted:.1f} |")
    if hop is not None:
        lines += ["", (f"Prefill hop (mechanism `prefill_hop`): a request's prefill leg spends {hop_formula(hop)} "
                       f"outside its prefill engine's core, `streams` the sequences the cluster's decode engines "
                       f"stream " + _how_fitted(hop) if hop["loop_s"] > 0 or hop["per_stream_s"] > 0 else
                       "Prefill hop: off (the points did not spread over the streams)."), "",
                  "| run | engine | requests | streams at its sending (mean) | prefill leg (ms) | engine's queue + "
                  "inference (ms) | outside the engine (ms) | fitted (ms) |", "|---|---|---|---|---|---|---|---|"]
        for q in hop["points"]:
            fitted = hop["loop_s"] + hop["per_stream_s"] * q["streams"] ** hop["exponent"]
            lines.append(f"| {q['run']} | {q['engine']} | {q['requests']} | {q['streams']:.1f} | "
                         f"{1e3 * q['leg_s']:.1f} | {1e3 * q['engine_s']:.1f} | {1e3 * q['hop_s']:.1f} | "
                         f"{1e3 * fitted:.1f} |")
    return lines
