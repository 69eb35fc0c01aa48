"""Where the paper's router puts its requests, per decode instance, under each reading (docs/ROUTER_READING.md).

For each policy (or reading of the paper's router, a registered name) on one sim spec: goodput, P99 TTFT,
and per decode instance its share of the requests, the requests it preempted, and its KV peak
(tokens; the budget is the profile's ``kv_budget_tokens``). Prints one table; no files written.

    python benchmarks/router_reading.py --requests 3000 --noise 1.25 \\
        --policies marginal_cost,marginal_cost_prefill_anchor
"""

from __future__ import annotations

import argparse

import numpy as np

from repro.experiment.inputs import build_predictions, build_trace, engine_pools, make_router, truth_cost_model
from repro.experiment.metrics import summarize
from repro.experiment.spec import RunSpec
from repro.sim.simulator import Simulator


def measure(spec: RunSpec) -> dict:
    """One simulation: its summary and, per decode instance, share / preemptions / KV peak."""
    _, pre, _, dec = engine_pools(spec)
    trace = build_trace(spec)
    sim = Simulator(trace.df, build_predictions(spec, trace), make_router(spec), pre, dec, spec.sim,
                    spec.poll_interval_s())
    journal = sim.run()
    s = summarize(journal, truth_cost_model(spec).slo, sent=spec.n_requests)
    names = [d.name for d in sim.dec]
    share = journal.decode_instance.value_counts()
    pre_by = journal.groupby("decode_instance").preemptions.sum()
    return {"goodput": s["goodput"], "p99_ttft_s": s["ttft_p99_s"],
            "per_decode": [(n, int(share.get(n, 0)), int(pre_by.get(n, 0)), int(k))
                           for n, k in zip(names, sim.kv_peak, strict=True)],
            "budget": dec[0].kv_budget_tokens}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policies", default="round_robin,least_loaded,length_threshold,marginal_cost")
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--noise", default="0,1.25", help="comma-listed predictor noise levels")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rate", type=float, default=16.0)
    ap.add_argument("--workload", default="mixed")
    ap.add_argument("--topology", default="2p4d")
    a = ap.parse_args()
    for noise in (float(x) for x in a.noise.split(",")):
        for pol in a.policies.split(","):
            spec = RunSpec(backend="sim", workload=a.workload, topology=a.topology, rate=a.rate,
                           n_requests=a.requests, seed=a.seed, policy=pol, predictor_noise=noise)
            m = measure(spec)
            cells = "  ".join(f"{n}: {c} req / {p} preempt / KV {k}" for n, c, p, k in m["per_decode"])
            full = sum(k >= m["budget"] for *_, k in m["per_decode"])
            print(f"noise {noise:<4g} {pol:<32} goodput {m['goodput']:.3f}  P99 TTFT {m['p99_ttft_s']:7.2f} s  "
                  f"KV full on {full}/{len(m['per_decode'])}  |  {cells}")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
