"""What a spec resolves to: its trace, the router's length predictions, the cost models (truth and
belief), and the router."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from repro.cluster.topology import pools
from repro.engine.physics import Physics
from repro.experiment.spec import RunSpec
from repro.routing.cost_model import CostModel, sim_derived
from repro.routing.router import Router

if TYPE_CHECKING:
    from repro.workload.traces import Trace


# ---- inputs ---------------------------------------------------------------------------------
def build_trace(spec: RunSpec) -> Trace:
    """The spec's arrival trace (deterministic in workload, seed, rate, n_requests, arrival and the
    workload parameters, `repro.experiment.spec.RunSpec.workload_params`), with
    request lengths capped to the engines' context where the cluster sets one (`length_cap`; the
    cap and how many requests it touched are in ``trace.meta["length_cap"]``)."""
    from repro.workload.traces import make_trace

    trace = make_trace(spec.workload, spec.seed, spec.rate, spec.n_requests, arrival=spec.arrival_spec(),
                       params=spec.workload_params())
    cap = length_cap(spec)
    return trace if cap is None else cap_lengths(trace, cap)


def length_cap(spec: RunSpec) -> int | None:
    """The context length (tokens) that bounds every request of this spec, or None.

    Only CPU vLLM engines (a cluster file with ``vllm: {device: cpu}``) serve a model whose context
    (``vllm.max_model_len``, default 4096) is shorter than the workloads' longest requests; GPU
    engines and the simulated and emulated ones take every request of Table I whole.
    """
    if spec.backend != "vllm" or not spec.cluster:
        return None
    opts = spec.topology_parsed().options.get("vllm") or {}
    if opts.get("device") != "cpu":
        return None
    return int(opts.get("max_model_len", 4096))


def cap_lengths(trace: Trace, cap: int) -> Trace:
    """``trace`` with each request fitted into ``cap`` tokens of context: the output is cut to at
    most ``cap // 2`` tokens, then the prompt to ``cap - output`` tokens (never silently: the
    returned trace's ``meta["length_cap"]`` says how many requests were cut and by how much)."""
    from repro.workload.traces import Trace

    df = trace.df.copy()
    out = np.minimum(df["output_tokens"].to_numpy(), cap // 2)
    prompt = np.minimum(df["prompt_tokens"].to_numpy(), cap - out)
    cut = (out < df["output_tokens"].to_numpy()) | (prompt < df["prompt_tokens"].to_numpy())
    report = {
        "max_model_len": int(cap),
        "rule": "output_tokens <= max_model_len // 2; prompt_tokens <= max_model_len - output_tokens",
        "requests_capped": int(cut.sum()),
        "requests": int(len(df)),
        "prompt_tokens_removed": int((df["prompt_tokens"].to_numpy() - prompt).sum()),
        "output_tokens_removed": int((df["output_tokens"].to_numpy() - out).sum()),
    }
    df["output_tokens"] = out.astype(df["output_tokens"].dtype)
    df["prompt_tokens"] = prompt.astype(df["prompt_tokens"].dtype)
    return Trace(df, {**trace.meta, "length_cap": report})


def build_predictions(spec: RunSpec, trace: Trace) -> np.ndarray:
    """The router's output-length estimate per request (tokens), as the proxy would compute it."""
    df = trace.df
    if spec.predictor == "oracle":
        return df["output_tokens"].to_numpy(dtype=float)
    from repro.routing.predictor import ConstantPredictor, NoisyPredictor, load_default
    from repro.workload.traces import predictor_frame

    if spec.predictor == "constant":
        base = ConstantPredictor(256.0)
    else:
        base = load_default()
    model = base
    if spec.predictor_noise > 0:
        model = NoisyPredictor(base, spec.predictor_noise, random_state=spec.predictor_seed)
    X = predictor_frame(trace)
    keys = df["request_id"].astype(str).tolist()
    if isinstance(model, NoisyPredictor):
        return np.asarray(model.predict(X, keys=keys), dtype=float)
    return np.asarray(model.predict(X), dtype=float)


def cluster_calibration(spec: RunSpec) -> str | None:
    """The ``calibration:`` of the spec's cluster file (a shipped name or a JSON path), if it has one."""
    return spec.topology_parsed().options.get("calibration") if spec.cluster else None


def engine_pools(spec: RunSpec) -> tuple[list[str], list[Physics], list[str], list[Physics]]:
    """The truth of the spec's engines: (prefill names, their Physics, decode names, their Physics), each
    instance's profile with the spec's ``physics`` overrides (`repro.cluster.topology.pools`)."""
    return pools(spec.topology_parsed(), spec.physics)


def truth_cost_model(spec: RunSpec) -> CostModel:
    """The deployment's own calibration (source of the SLO targets used for scoring): on real
    engines (``vllm``) the cluster file's ``calibration``, else the physics of the spec's engines
    (`engine_pools`). The SLO targets are those of the profile as shipped even when ``physics``
    overrides its estimated constants: the paper states its targets (175 ms, 39.7 ms), so a
    sensitivity sweep of our estimates moves the hardware, never the targets."""
    cal = cluster_calibration(spec) if spec.backend == "vllm" else None
    if cal:
        return CostModel.load(cal)
    cm = CostModel.from_physics(engine_pools(spec)[3][0], name="truth")
    if spec.physics:
        stated = CostModel.from_physics(pools(spec.topology_parsed())[3][0]).slo
        cm = cm.with_overrides(ttft_tight_s=stated.ttft_tight_s, tpot_tight_s=stated.tpot_tight_s)
    return cm


def router_cost_model(spec: RunSpec) -> CostModel:
    """What the router believes: ``spec.cost_model``, where ``calibrated`` means the cluster file's
    own ``calibration`` when it names one, otherwise a perfect calibration of the spec's hardware profile
    (`repro.routing.cost_model.CostModel.from_physics`; ``sim_derived``: the paper's simulator constants
    over it; for the default profile exactly the shipped ``data/calibration`` files). A ``calibrated``
    router knows the hardware: the spec's ``physics`` overrides apply to its constants too
    (`repro.routing.cost_model.CostModel.with_physics`); any other cost model is left as it is
    (``sim_derived`` is what a simulator believed, whatever the hardware)."""
    name = spec.cost_model
    if name == "calibrated":
        name = cluster_calibration(spec) or name
    if name in ("calibrated", "sim_derived"):  # of the spec's hardware profile (the shipped files: the default's)
        cm = CostModel.from_physics(spec.topology_parsed().decode[0].hardware.physics)
        cm = cm if name == "calibrated" else sim_derived(cm)
    else:
        cm = CostModel.load(name)
    if spec.physics and spec.cost_model == "calibrated":
        cm = cm.with_physics(spec.physics, base=pools(spec.topology_parsed())[3][0])
    if spec.kv_budget_tokens is not None:
        cm = cm.with_overrides(kv_capacity_tokens=spec.kv_budget_tokens)
    return cm


def make_router(spec: RunSpec) -> Router:
    """The router the spec describes: its policy (with options) over the topology's pools, priced by the
    router's cost model (`router_cost_model`)."""
    pnames, _, dnames, _ = pools(spec.topology_parsed())
    cm = router_cost_model(spec)
    policy = spec.policy_ref.build(cm, **spec.policy_options)
    return Router(policy, cm, pnames, dnames)


