"""What a validation writes from its runs and twins (`write_outputs`; the folder as a whole:
`repro.validation.run`): ``validation.json`` (`ValidationRecord`), the tables, the residual patterns
(`residual_patterns`), the figures and ``validation.md`` (`markdown`, `physics_text`)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

import pandas as pd

from repro.experiment.manifest import write_json_atomic
from repro.validation import accuracy, decomposition
from repro.validation.drift import drift_text, search_factor, speed_text
from repro.validation.host import admission_formula
from repro.validation.host import markdown as host_markdown
from repro.validation.twin import PhysicsRecord

if TYPE_CHECKING:
    from repro.validation.saturation import SaturationHow

PROMPT_BINS = (0, 64, 256, 1024, 2048, 4096, 1 << 30)
OUTPUT_BINS = (0, 64, 256, 512, 1024, 4096, 1 << 30)


class ValidationRecord(TypedDict):
    """``validation.json``: the configuration (`repro.validation.plan.ValidationConfig.to_dict`), cluster,
    backend, workload; the calibration used (its path, or ``none``) and the physics (`PhysicsRecord`); the
    saturation rate (req/s) and how it was found; the SLO targets (s) and the error budget (fractions); the
    primary physics ``variant`` and all; the load trusted up to (a fraction of saturation), per variant too;
    versions, commit, start (Unix s) and wall time (s); live runs and invalid ones; requests completed on
    one side only (``live_only``, ``sim_only``); the engines' ``length_cap`` when requests were cut; the
    residual patterns per variant (`residual_patterns`) when any request was paired; the mean time between two
    replays of one trace (minutes, `repro.validation.run.replay_spacing`; NaN with one replay) and, with a
    training run, how far the machine moved over the judged runs (`repro.validation.drift.drift`)."""

    config: dict[str, Any]
    cluster: str
    backend: str
    workload: str
    calibration: str
    physics: PhysicsRecord
    saturation_rate: float
    saturation: SaturationHow
    slo: dict[str, float]
    budget: dict[str, float]
    variant: str
    variants: list[str]
    trusted_up_to: float
    trusted_up_to_by_variant: dict[str, float]
    versions: dict[str, str]
    commit: str
    started_unix: float
    wall_s: float
    runs: int
    invalid_runs: int
    unpaired: dict[str, int]
    length_cap: dict[str, Any] | None
    residuals: NotRequired[dict[str, dict[str, Any]]]
    replays_minutes_apart: float
    drift: NotRequired[dict[str, Any]]


def length_cap(out: Path) -> dict[str, Any] | None:
    """The live runs' ``length_cap`` (requests cut to the engines' context), from one manifest."""
    for manifest in sorted((out / "live").glob("replay-*/*/manifest.json")):
        cap = json.loads(manifest.read_text()).get("length_cap")
        if cap:
            return {k: cap[k] for k in ("max_model_len", "rule") if k in cap}
    return None


def residual_patterns(pairs: pd.DataFrame) -> dict[str, Any]:
    """Where the errors come from: the median signed TTFT / TPOT / e2e error by prompt length, by output
    length and by load level."""
    out: dict[str, Any] = {}
    for metric in accuracy.METRICS:
        name = metric.removesuffix("_s")
        out[f"{name}_by_prompt"] = accuracy.error_by(pairs, "prompt_tokens", PROMPT_BINS, metric).astype(
            {"bin": str}).to_dict("records")
        out[f"{name}_by_output"] = accuracy.error_by(pairs, "output_tokens", OUTPUT_BINS, metric).astype(
            {"bin": str}).to_dict("records")
        by_load = pairs.groupby("fraction")[f"err_{metric}"].median()
        out[f"{name}_bias_by_load"] = {f"{k:g}": float(v) for k, v in by_load.items()}
    return out


def write_outputs(out: Path, record: ValidationRecord, table: pd.DataFrame, order: pd.DataFrame,
                  runs: pd.DataFrame, pairs: pd.DataFrame) -> None:
    """The validation's files (listed in `repro.validation.run`'s module docstring) and its figures (per request:
    the primary variant; error against load: every variant)."""
    write_json_atomic(out / "validation.json", record)
    table.to_csv(out / "validation.csv", index=False)
    order.to_csv(out / "ordering.csv", index=False)
    runs.to_csv(out / "runs.csv", index=False)
    if len(pairs):
        pairs.to_parquet(out / "requests.parquet", index=False)
        frames = []
        for name, mine in pairs.groupby("variant", sort=False):
            for metric in accuracy.METRICS:
                for col, bins in (("prompt_tokens", PROMPT_BINS), ("output_tokens", OUTPUT_BINS)):
                    frames.append(accuracy.error_by(mine, col, bins, metric).assign(metric=metric, by=col,
                                                                                   variant=name))
        pd.concat(frames, ignore_index=True).to_csv(out / "residuals.csv", index=False)
        from repro.validation.figures import error_vs_load, predicted_vs_measured

        fig = predicted_vs_measured(pairs[pairs["variant"] == record["variant"]])
        fig.savefig(out / "predicted_vs_measured.png", dpi=110, bbox_inches="tight")
        if len(table):
            fig = error_vs_load(table, record["budget"])
            fig.savefig(out / "error_vs_load.png", dpi=110, bbox_inches="tight")
    stages = decomposition.stage_table(pairs) if len(pairs) else pd.DataFrame()
    live_runs = runs[runs["variant"] == record["variant"]] if len(runs) else runs
    account = decomposition.account_table(out, live_runs) if len(live_runs) else pd.DataFrame()
    probes = decomposition.probe_account(out / "saturation")
    stages.to_csv(out / "stages.csv", index=False)
    account.to_csv(out / "account.csv", index=False)
    probes.to_csv(out / "saturation_account.csv", index=False)
    host_fit = record["physics"].get("shared_host")
    (out / "validation.md").write_text(markdown(record, table, order) + "\n".join(
        ["", *decomposition.markdown(stages, account, record["variant"]), *decomposition.probe_markdown(probes),
         *(["", "#### The shared host", "", *host_markdown(host_fit, host_fit.get("admission"), host_fit.get("steal"),
                                                            host_fit.get("hop"))] if host_fit else [])]))


def _pct(x: float) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:+.1f} %"


def _abs_pct(x: float) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f} %"


def _pct_interval(v: float, lo: float, hi: float, sign: str = "") -> str:
    """``12.3 % [4.5, 20.1]`` (percent of fractions; ``sign='+'``: signed; the value alone without an interval)."""
    if math.isnan(v):
        return "n/a"
    f = f"{sign}.1f"
    return f"{100 * v:{f}} %" + ("" if math.isnan(lo) or math.isnan(hi) else f" [{100 * lo:{f}}, {100 * hi:{f}}]")


def physics_text(physics: PhysicsRecord) -> str:
    """Where the simulator's engine timing came from, in words (``validation.json``'s ``physics``)."""
    parts = ([f"the hardware profile {physics['profile']}"] if physics["source"] == "profile" else
             [f"calibration {physics.get('calibration')}"])
    settings = physics.get("engine_settings") or {}
    if settings:
        parts.append(f"chunked-prefill budget {settings['max_num_batched_tokens']} tokens, block "
                     f"{settings['block_size']}, {settings['max_num_seqs']} sequences")
    curve = physics.get("prefill_curve")
    if curve:
        parts.append(f"prefill curve {1e3 * curve['base_s']:.2f} ms + {1e6 * curve['per_token_s']:.2f} us/token + "
                     f"{1e9 * curve['per_token2_s']:.2f} ns/token^2 (fit residual <= "
                     f"{100 * curve['max_rel_residual']:.1f} %)")
    path = physics.get("serving_path_s")
    if path:
        parts.append(f"API servers' time {1e3 * path['total']:.1f} ms per request on the KV hop")
    fit = physics.get("in_situ")
    if fit:
        parts.append(f"in situ (variant in-situ): fitted on a training trace (seed {fit['seed']}, {fit['rate']:.3g} "
                     f"req/s, not judged): decode step x {fit['decode_factor']:.3f}, serving path "
                     f"{1e3 * fit['ttft_offset_s']:+.1f} ms")
    host = physics.get("shared_host")
    if host:
        parts.append(f"shared host (variant shared-host, mechanism shared_host): {host['cores']} cores, the "
                     f"serving path's CPU measured at {host['base_cores']:.3f} cores + "
                     f"{1e3 * host['per_request_s']:.1f} ms per request + {1e6 * host['per_token_s']:.0f} us per "
                     f"token + {1e6 * host['per_step_s']:.0f} us per decode step, steal share "
                     f"{host['steal']['share']:.3g} (fitted on the TPOT of the training runs and the probes)"
                     + (f"; admission through the decode API server's event loop {admission_formula(adm)} "
                        f"(mechanism stream_admission, R^2 {adm['r2']:.2f})"
                        if (adm := host.get("admission") or {}).get("loop_s") else
                        f"; admission behind the streams {1e3 * adm['per_stream_s']:.3f} ms x "
                        f"streams^{adm['exponent']:.2f} (mechanism stream_admission)" if adm.get("per_stream_s")
                        else "")
                     + f"; its light-load TTFT {1e3 * host['serving_path']['ttft_offset_s']:+.1f} ms (training "
                       f"trace seed {host['serving_path']['seed']}, not judged)")
    speed = physics.get("drift")
    if speed:
        at = physics.get("drift_at_search")
        parts.append(speed_text(speed) + (f"; at the live saturation search x {search_factor(at):.3f} (its "
                                          f"{len(at['points'])} probes below the collapse)" if at else ""))
    return ", ".join(parts)


def _other_rates(record: ValidationRecord) -> str:
    by = record["saturation"].get("simulator_rate_by_variant") or {}
    others = [f"{name} {rate:.3g}" for name, rate in by.items() if name != record["variant"]]
    return f"; the other physics: {', '.join(others)}" if others else ""


def markdown(record: ValidationRecord, table: pd.DataFrame, order: pd.DataFrame) -> str:
    """The validation as Markdown: conditions, then per physics variant (the primary first) the level table,
    the load trusted up to and the ordering."""
    b = record["budget"]
    lines = [f"### Simulator validation on {record['cluster']} ({record['backend']})", "",
             f"Workload {record['workload']}; saturation {record['saturation_rate']:.3g} req/s "
             f"({record['saturation']['how']}; the simulator ({record['variant']}) puts it at "
             f"{record['saturation']['simulator_rate']:.3g} req/s{_other_rates(record)}); "
             f"physics: {physics_text(record['physics'])}; "
             f"{record['runs']} live runs ({record['invalid_runs']} invalid, left out); commit "
             f"{record.get('commit', '?')}.", "",
             f"Budget: median TTFT and TPOT error <= {b['ttft']:.0%} / {b['tpot']:.0%}, goodput within "
             f"+-{b['goodput']:g}. Errors: mean over traces of each trace's median |sim / live - 1| "
             f"[95 % t interval over traces]; bias: the same of the signed median (negative: the simulator is "
             f"faster; the machine's noise averages out of it); noise: the machine's own median per-request "
             f"spread between two live runs of one trace with the same placements (replays, or policies that "
             f"placed alike): per-request errors below it cannot be told from noise here; within noise: both "
             f"median errors at most the larger of their budget and that noise (no goodput; never the load "
             f"trusted up to).", ""]
    apart = record.get("replays_minutes_apart", float("nan"))
    said = []
    if apart == apart:  # not NaN
        said.append(f"Replays run in passes (replay r of every run in pass r): two replays of one trace lie "
                    f"{apart:.1f} min apart on average, so the noise floor holds what the machine moves in that time.")
    if "drift" in record:
        said.append(f"The machine's drift: {drift_text(record['drift'])}.")
    if said:
        lines += [" ".join(said), ""]
    if table.empty:
        return "\n".join(lines + ["No valid live run: nothing to compare."])
    names = [record["variant"]] + [v for v in record.get("variants", []) if v != record["variant"]]
    for name in names:
        t = table[table["variant"] == name] if "variant" in table.columns else table
        o = order[order["variant"] == name] if "variant" in order.columns else order
        lines += [f"#### Physics: {name}" + (" (the validation's verdict)" if name == record["variant"] else ""), "",
                  "| load | rate req/s | policy | traces | requests | TTFT err | TPOT err | e2e err | TTFT bias | "
                  "TPOT bias | noise TTFT/TPOT | goodput live | sim | sim - live | within budget | within noise |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in t.itertuples():
            lines.append(
                f"| {r.fraction:g} | {r.rate:.3g} | {r.policy} | {r.traces} | {r.requests} | "
                f"{_pct_interval(r.ttft_err, r.ttft_err_lo, r.ttft_err_hi)} | "
                f"{_pct_interval(r.tpot_err, r.tpot_err_lo, r.tpot_err_hi)} | "
                f"{_abs_pct(r.e2e_err)} | {_pct_interval(r.ttft_bias, r.ttft_bias_lo, r.ttft_bias_hi, '+')} | "
                f"{_pct_interval(r.tpot_bias, r.tpot_bias_lo, r.tpot_bias_hi, '+')} | "
                f"{_abs_pct(r.ttft_noise)} / {_abs_pct(r.tpot_noise)} | {r.live_goodput:.3f} | {r.sim_goodput:.3f} | "
                f"{accuracy.estimate_text(r.goodput_diff, r.goodput_diff_lo, r.goodput_diff_hi)} | "
                f"{'yes' if r.within_budget else 'no'} | "
                f"{'yes' if getattr(r, 'within_noise', False) else 'no'} |")
        trusted = record.get("trusted_up_to_by_variant", {}).get(name, record["trusted_up_to"])
        rate = trusted * record["saturation_rate"]
        lines += ["", (f"**Within budget up to {trusted:g} x saturation** ({rate:.3g} req/s)."
                       if trusted > 0 else "**Not within budget even at the lightest load.**")]
        if len(o):
            lines += ["", "Policies' ordering (goodput difference per trace, live [t interval] vs simulated):", ""]
            for r in o.itertuples():
                lines.append(f"- {r.fraction:g} x saturation: {r.policy} - {r.versus}: live "
                             f"{accuracy.estimate_text(r.live_diff, r.live_diff_lo, r.live_diff_hi)}, sim "
                             f"{r.sim_diff:+.3f}: {r.agreement}")
        lines.append("")
    return "\n".join(lines)
