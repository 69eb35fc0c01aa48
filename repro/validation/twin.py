"""The simulated twin of a live run: the same trace (capped to the engines' context as the live run's),
the same router (policy, cost model, predictor, poll period), and the engines' timing from the physics
the validation settled on (`validation_physics`). Nothing of the live run is read: the twin is a
prediction made before the cluster answered."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Required, TypedDict

import pandas as pd

from repro.cluster.topology import Topology, pools
from repro.engine.physics import Physics
from repro.errors import ConfigError
from repro.experiment.inputs import build_predictions, build_trace, make_router, truth_cost_model
from repro.experiment.metrics import summarize
from repro.experiment.spec import RunSpec
from repro.routing.cost_model import CostModel
from repro.sim.simulator import Simulator
from repro.validation.plan import ValidationConfig, engine_settings

if TYPE_CHECKING:
    from repro.live.calibration_bench import PrefillCurve


class InSituFit(TypedDict):
    """`fit_in_situ`'s record: the training run (id, trace seed, rate in req/s, policy, requests paired), the
    decode step's factor, the serving path's TTFT offset (s), and the median signed relative error per metric
    (``ttft_s``, ``tpot_s``, ``e2e_s``) before and after the fit."""

    training_run: str
    seed: int
    rate: float
    policy: str
    requests: int
    decode_factor: float
    ttft_offset_s: float
    median_err_before: dict[str, float]
    median_err_after: dict[str, float]


class PhysicsRecord(TypedDict, total=False):
    """Where the validation's engine timing came from (`validation_physics`; ``validation.json``'s ``physics``):
    ``source`` ``profile`` (with the hardware ``profile``'s name) or ``calibration`` (its name, the engines'
    scheduler settings, `repro.validation.plan.engine_settings`, the context share; the fitted
    ``prefill_curve`` and the API servers' ``serving_path_s`` in s when used); ``in_situ``: the in-situ fit
    (`fit_in_situ`), added by `repro.validation.run.validate` with ``--in-situ``; ``drift``: the machine's speed at
    each run of the training trace (`repro.validation.drift.fit_speed`), with ``--track-drift``."""

    source: Required[str]
    profile: str
    calibration: str
    engine_settings: dict[str, Any]
    context_share: float
    prefill_curve: PrefillCurve
    serving_path_s: dict[str, float]
    in_situ: InSituFit
    shared_host: dict[str, Any]
    drift: dict[str, Any]


def validation_physics(cfg: ValidationConfig, topo: Topology, calibration: CostModel | None,
                       samples: pd.DataFrame | None = None) -> tuple[Physics, PhysicsRecord]:
    """The simulator's engine timing for ``cfg`` and a record of where it came from: the calibration
    inverted (`CostModel.to_physics`, with the engines' scheduler settings, `engine_settings`), or
    the decode instances' hardware profile (``cfg.physics``; ``auto``: the calibration on real engines
    when there is one). Every instance gets the same physics (the clusters validated are homogeneous).

    With the calibration's ``samples`` and ``cfg.serving_path``, the time a P/D request spends in the
    engines' API servers (`repro.live.calibration_bench.serving_path_s`: measured by the calibration, never
    by the validation) is added to the KV transfer's latency, the hop between the prefill's answer and the
    decode's first step where a request spends it: the simulator's engines compute, real ones also parse,
    tokenize and answer over HTTP."""
    source = cfg.physics
    if source == "auto":
        source = "calibration" if calibration is not None and cfg.backend_used == "vllm" else "profile"
    if source == "profile":
        _, _, _, dec = pools(topo)
        return dec[0], {"source": "profile", "profile": topo.decode[0].profile}
    if calibration is None:
        raise ConfigError(f"validate: physics 'calibration' needs a calibration: the cluster file {cfg.cluster} names "
                          f"none (add 'calibration: FILE' to it, or pass --calibrate)")
    settings = engine_settings(topo)
    opts = topo.options.get("vllm") or {}
    model = str(opts.get("model") or ("tiny" if opts.get("device") == "cpu" else "unknown"))
    phys = calibration.to_physics(
        name=f"{topo.name}-calibrated", model=model,
        block_size=settings["block_size"], max_num_seqs=settings["max_num_seqs"],
        max_model_len=settings["max_model_len"], max_num_batched_tokens=settings["max_num_batched_tokens"],
        context_share=cfg.context_share, source=f"calibration {calibration.name}")
    record: PhysicsRecord = {"source": "calibration", "calibration": calibration.name,
                              "engine_settings": settings, "context_share": cfg.context_share}
    if cfg.prefill_curve and samples is not None:
        from repro.live.calibration_bench import prefill_curve

        curve = prefill_curve(samples, settings["max_num_batched_tokens"])
        phys = phys.with_overrides(prefill_base_s=curve["base_s"], prefill_per_token_s=curve["per_token_s"],
                                   prefill_per_token2_s=curve["per_token2_s"])
        record["prefill_curve"] = curve
    if cfg.serving_path and samples is not None:
        from repro.live.calibration_bench import serving_path_s

        path = serving_path_s(samples)
        if path["total"] == path["total"]:  # not NaN
            phys = phys.with_overrides(transfer_latency_s=phys.transfer_latency_s + path["total"])
            record["serving_path_s"] = path
    return phys, record


def twin_journal(spec: RunSpec, physics: Physics) -> pd.DataFrame:
    """The simulator's journal of ``spec``'s trace on engines with ``physics`` (every instance of the
    spec's topology), routed as the live run routes (`repro.experiment.inputs.make_router`)."""
    trace = build_trace(spec)
    pred = build_predictions(spec, trace)
    router = make_router(spec)
    topo = spec.topology_parsed()
    phys = physics if spec.kv_budget_tokens is None else physics.with_overrides(kv_budget_tokens=spec.kv_budget_tokens)
    return Simulator(trace.df, pred, router, [phys] * len(topo.prefill), [phys] * len(topo.decode),
                     spec.sim, spec.poll_interval_s()).run()


def twin_goodput(spec: RunSpec, physics: Physics) -> float:
    """The twin's goodput (the live run's SLO targets, `truth_cost_model`): the saturation search's probe."""
    return float(summarize(twin_journal(spec, physics), truth_cost_model(spec).slo)["goodput"])


def fit_in_situ(live: pd.DataFrame, spec: RunSpec, physics: Physics) -> tuple[Physics, InSituFit]:
    """Two constants of the deployment fitted on one training run (``live``: its journal; ``spec``: its spec,
    a trace no judged run replays, `repro.validation.plan.ValidationConfig.training_seed`), on top of
    ``physics``:

    - the decode step's factor ``f``: the training run's median TPOT over its twin's (every decode-step
      coefficient times ``f``: what the engine loses to the API servers, the proxy and the load generator
      that stream each token on the same cores, which a calibration of the engine alone does not see);
    - the serving path's TTFT: the median of measured minus simulated TTFT once ``f`` is in, added to the KV
      hop (at least 0 s in all).

    Returns the fitted physics and the record (training run, ``f``, the offset, the medians before and
    after). Everything the validation judges afterwards is a prediction of this physics."""
    from repro.validation.accuracy import pair

    slo = truth_cost_model(spec).slo
    before = pair(live, twin_journal(spec, physics), slo)
    if before.empty or before["live_tpot_s"].notna().sum() == 0:
        raise ConfigError(f"validate: the training run {spec.run_id} has no request with a TPOT to fit on")
    factor = float(before["live_tpot_s"].median() / before["sim_tpot_s"].median())
    scaled = physics.with_overrides(decode_base_s=physics.decode_base_s * factor,
                                    decode_per_seq_s=physics.decode_per_seq_s * factor,
                                    hbm_bandwidth_bytes_per_s=physics.hbm_bandwidth_bytes_per_s / factor)
    mid = pair(live, twin_journal(spec, scaled), slo)
    offset = float((mid["live_ttft_s"] - mid["sim_ttft_s"]).median())
    fitted = scaled.with_overrides(transfer_latency_s=max(0.0, scaled.transfer_latency_s + offset))
    after = pair(live, twin_journal(spec, fitted), slo)
    return fitted, {
        "training_run": spec.run_id, "seed": spec.seed, "rate": spec.rate, "policy": spec.policy,
        "requests": int(len(before)), "decode_factor": factor, "ttft_offset_s": offset,
        "median_err_before": {m: float(before[f"err_{m}"].median()) for m in ("ttft_s", "tpot_s", "e2e_s")},
        "median_err_after": {m: float(after[f"err_{m}"].median()) for m in ("ttft_s", "tpot_s", "e2e_s")},
    }
