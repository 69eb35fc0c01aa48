"""Which part of a request's time carries the simulator's error, and where the live cluster's CPU went.

A request's TTFT is the sum of four stages, each read the same way from a live journal and from its twin's
(`repro.journal_schema`): ``router`` (arrival -> the prefill request sent: the proxy's queue and its
decision), ``prefill`` (sent -> answered: the prefill engine's API server, queue and compute, and the HTTP
hop), ``handoff`` (answered -> the decode request sent: the proxy) and ``decode_first`` (-> the first token
at the client: the KV pull, the decode engine's queue, its first step and the streaming path back; the
journal's ``decode_started_s`` inside it means another moment live than simulated, so it is not a stage
boundary here). After the first token, ``decode`` (-> the last token). `stage_table` compares each stage's
mean, live and simulated, per load level: the stages' differences add up to the TTFT difference, so each
one's share of it says where the error is.

`account_table` reads each live run's ``account.json`` (`repro.live.run_account`): the CPU share of every
part of the run (each engine's frontend and engine core, the proxy, the load generator, the driver, the
processes outside the run, idle) and each engine's own account of its requests (vLLM's queue, prefill and
decode times, and the frontend's: e2e - queue - inference), averaged over the runs of a load level.

Times in milliseconds in the tables; shares as fractions of the machine's CPU (wall x cores).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from repro.statistics.intervals import t_interval

STAGES: tuple[tuple[str, str, str], ...] = (
    ("router", "arrival_s", "prefill_start_s"),
    ("prefill", "prefill_start_s", "prefill_end_s"),
    ("handoff", "prefill_end_s", "decode_start_s"),
    ("decode_first", "decode_start_s", "first_token_s"),
    ("decode", "first_token_s", "finish_s"),
)
"""(stage, from, to): journal columns in seconds; the first four add up to the TTFT."""
TTFT_STAGES: tuple[str, ...] = tuple(name for name, _, _ in STAGES[:4])
SHARE_FLOOR_S = 0.005
"""A TTFT gap smaller than this (5 ms) is not split into shares: a share of almost nothing says nothing."""


def stage_columns(journal: pd.DataFrame) -> pd.DataFrame:
    """Each `STAGES` duration (seconds, ``<stage>_s``) of every request of ``journal``, by its row order."""
    return pd.DataFrame({f"{name}_s": journal[b].to_numpy(float, na_value=np.nan)
                         - journal[a].to_numpy(float, na_value=np.nan) for name, a, b in STAGES},
                        index=journal.index)


def stage_table(pairs: pd.DataFrame) -> pd.DataFrame:
    """Per (variant, load level, policy, stage): the stage's mean over requests live and simulated (ms), their
    difference ``sim - live`` (ms) as a t interval over traces (each trace's mean difference), and its share
    of the TTFT difference (TTFT stages; `STAGES`; NaN where that difference is under `SHARE_FLOOR_S`).
    ``pairs``: `repro.validation.accuracy.pair` rows with
    ``live_<stage>_s`` / ``sim_<stage>_s`` columns and the run keys."""
    rows = []
    keys = [k for k in ("variant", "fraction", "policy") if k in pairs.columns]
    for key, g in pairs.groupby(keys, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        diffs = {name: g[f"sim_{name}_s"] - g[f"live_{name}_s"] for name, _, _ in STAGES}
        ttft_diff = float(np.nansum([diffs[n].mean() for n in TTFT_STAGES]))
        for name, _, _ in STAGES:
            per_trace = [float(d.mean()) * 1e3 for _, d in diffs[name].groupby(g["seed"]) if d.notna().any()]
            est = t_interval(per_trace, requests=int(diffs[name].notna().sum()))
            mean = float(diffs[name].mean()) * 1e3
            rows.append({**dict(zip(keys, key, strict=True)), "stage": name,
                         "live_ms": float(g[f"live_{name}_s"].mean()) * 1e3,
                         "sim_ms": float(g[f"sim_{name}_s"].mean()) * 1e3,
                         "diff_ms": mean, "diff_lo_ms": est.lo, "diff_hi_ms": est.hi, "traces": len(per_trace),
                         "share_of_ttft_diff": (mean / (ttft_diff * 1e3) if name in TTFT_STAGES
                                                and abs(ttft_diff) >= SHARE_FLOOR_S else math.nan)})
    return pd.DataFrame(rows)


def account_table(out: Path, runs: pd.DataFrame) -> pd.DataFrame:
    """Per load level (``fraction``) and part (``part``: a CPU part, or ``<engine>:<time>`` of an engine's own
    account), the mean over the level's valid live runs of ``value`` (CPU share, or ms per request) read from
    each run's ``account.json`` under ``out``; ``kind`` says which (``cpu_share`` or ``engine_ms``). Empty
    where no run wrote one."""
    rows = []
    valid = runs[runs["valid"].astype(bool) & (runs["run_dir"].astype(str) != "")]
    valid = valid.drop_duplicates(["fraction", "policy", "seed", "replay"])
    for (fraction, policy), g in valid.groupby(["fraction", "policy"], sort=True):
        values: dict[tuple[str, str], list[float]] = {}
        for run_dir in g["run_dir"]:
            path = out / str(run_dir) / "account.json"
            if not path.exists():
                continue
            acc = json.loads(path.read_text())
            for part, share in acc.get("cpu", {}).get("share", {}).items():
                values.setdefault(("cpu_share", part), []).append(float(share))
            for engine, times in acc.get("engines", {}).items():
                for k, v in times.items():
                    if k.endswith("_s"):
                        values.setdefault(("engine_ms", f"{engine}:{k.removesuffix('_s')}"), []).append(1e3 * v)
        for (kind, part), v in sorted(values.items()):
            rows.append({"fraction": float(fraction), "policy": policy, "kind": kind, "part": part,
                         "value": float(np.mean(v)), "runs": len(v)})
    return pd.DataFrame(rows)


def markdown(stages: pd.DataFrame, account: pd.DataFrame, variant: str) -> list[str]:
    """The two tables as Markdown lines (``variant``: the physics whose stages are shown)."""
    lines: list[str] = []
    s = stages[stages["variant"] == variant] if len(stages) and "variant" in stages.columns else stages
    if len(s):
        lines += [f"#### Where the TTFT error is (physics {variant}): each stage's mean, live and simulated", "",
                  "| load | policy | stage | live ms | sim ms | sim - live ms [t interval over traces] | "
                  "share of the TTFT gap |", "|---|---|---|---|---|---|---|"]
        for r in s.itertuples():
            share = ("" if r.stage not in TTFT_STAGES else "(TTFT gap < 5 ms)" if math.isnan(r.share_of_ttft_diff)
                     else f"{r.share_of_ttft_diff:.0%}")
            ci = "" if math.isnan(r.diff_lo_ms) else f" [{r.diff_lo_ms:+.1f}, {r.diff_hi_ms:+.1f}]"
            lines.append(f"| {r.fraction:g} | {r.policy} | {r.stage} | {r.live_ms:.1f} | {r.sim_ms:.1f} | "
                         f"{r.diff_ms:+.1f}{ci} | {share} |")
        lines.append("")
    if len(account):
        cpu = account[account["kind"] == "cpu_share"]
        if len(cpu):
            wide = cpu.pivot_table(index="part", columns=["fraction", "policy"], values="value")
            cols = list(wide.columns)
            lines += ["#### Where the capacity goes: each part's share of the machine's CPU (wall x cores), mean over "
                      "the level's live runs", "",
                      "| part | " + " | ".join(f"{f:g} x, {p}" for f, p in cols) + " |",
                      "|---|" + "---|" * len(cols)]
            for part, r in wide.iterrows():
                lines.append(f"| {part} | " + " | ".join("" if math.isnan(v) else f"{v:.0%}" for v in r) + " |")
            lines.append("")
        eng = account[account["kind"] == "engine_ms"]
        if len(eng):
            wide = eng.pivot_table(index="part", columns=["fraction", "policy"], values="value")
            cols = list(wide.columns)
            lines += ["#### The engines' own account (vLLM's request histograms), ms per request", "",
                      "| engine:time | " + " | ".join(f"{f:g} x, {p}" for f, p in cols) + " |",
                      "|---|" + "---|" * len(cols)]
            for part, r in wide.iterrows():
                lines.append(f"| {part} | " + " | ".join("" if math.isnan(v) else f"{v:.1f}" for v in r) + " |")
            lines.append("")
    return lines


def probe_account(folder: Path) -> pd.DataFrame:
    """The saturation probes' CPU, one row per probe run under ``folder`` (``out/saturation``) and part: its
    offered rate (req/s), requests, the part's CPU share of the machine and its CPU seconds per request. The
    sum over a probe's parts but ``idle`` and ``outside`` is what one request costs the machine; the machine's
    cores over it bound the rate it can carry."""
    rows = []
    for path in sorted(folder.glob("*/account.json")):
        acc = json.loads(path.read_text())
        cpu, n = acc.get("cpu", {}), acc.get("requests") or 0
        for part, share in cpu.get("share", {}).items():
            rows.append({"run": path.parent.name, "offered_rate": acc.get("offered_rate"), "requests": n,
                         "part": part, "share": float(share),
                         "cpu_s_per_request": (float(cpu.get("cpu_s", {}).get(part, math.nan)) / n if n
                                               else math.nan)})
    return pd.DataFrame(rows)


def probe_markdown(probes: pd.DataFrame) -> list[str]:
    """The probes' CPU as Markdown lines: per probe rate, each part's share of the machine, and the CPU seconds
    a request cost the run's parts."""
    if probes.empty:
        return []
    wide = probes.pivot_table(index="part", columns="offered_rate", values="share")
    per = probes[~probes["part"].isin(["idle", "outside"])].groupby("offered_rate")["cpu_s_per_request"].sum()
    lines = ["#### Where the capacity goes during the saturation probes: each part's share of the machine's CPU", "",
             "| part | " + " | ".join(f"{r:.3g} req/s" for r in wide.columns) + " |",
             "|---|" + "---|" * len(wide.columns)]
    for part, r in wide.iterrows():
        lines.append(f"| {part} | " + " | ".join("" if math.isnan(v) else f"{v:.0%}" for v in r) + " |")
    lines.append("| CPU s per request (the run's parts) | " + " | ".join(f"{per.get(r, math.nan):.3f}"
                                                                        for r in wide.columns) + " |")
    lines.append("")
    return lines
