"""The paper's router under each reading, at sim full scale (the measurements of docs/ROUTER_READING.md).

Per reading (`repro.routing.policies.READINGS`, or ``--readings``), over the traces of sim full
(`SIM_FULL_SEEDS`, 10,000 requests each), mixed at the operating point: its simulator saturation rate,
`repro.paper.plans.SIM_SATURATION_RATES["mixed"]` (the script prints it):

- Table II: mean goodput on 2p4d with its t interval over traces, and the first three traces alone;
- Fig. 6: P99 TTFT at the operating point (mean over traces, t interval);
- Fig. 9: mean goodput at each injected predictor error 0 - 150 %;
- Fig. 4: mean goodput on 1p2d, and round-robin minus it (paired by trace).

Simulated on the environment's executor (`$REPRO_JOBS` workers). Prints Markdown tables; no files.

    python benchmarks/reading_study.py [--requests 10000] [--seeds 1-10]
"""

from __future__ import annotations

import argparse

import numpy as np
from scipy import stats

from repro.experiment.runner import simulated_summaries
from repro.experiment.spec import RunSpec
from repro.paper.plans import SIM_FULL_SEEDS, SIM_SATURATION_RATES
from repro.paper.sections.predictor_noise import NOISE_LEVELS
from repro.routing.policies import READINGS


def t_interval(values: list[float]) -> str:
    """Mean [95 % t interval] over traces."""
    x = np.asarray(values, dtype=float)
    m = float(x.mean())
    if x.size < 2:
        return f"{m:.3f}"
    h = float(stats.t.ppf(0.975, x.size - 1) * x.std(ddof=1) / np.sqrt(x.size))
    return f"{m:.3f} [{m - h:.3f}, {m + h:.3f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--readings", default=",".join(READINGS))
    ap.add_argument("--requests", type=int, default=10000)
    ap.add_argument("--seeds", default=f"{SIM_FULL_SEEDS[0]}-{SIM_FULL_SEEDS[-1]}")
    a = ap.parse_args()
    lo, _, hi = a.seeds.partition("-")
    seeds = list(range(int(lo), int(hi or lo) + 1))
    readings = a.readings.split(",")
    rate = SIM_SATURATION_RATES["mixed"]

    def spec(policy: str, seed: int, topology: str = "2p4d", noise: float = 0.0) -> RunSpec:
        return RunSpec(backend="sim", workload="mixed", topology=topology, rate=rate, n_requests=a.requests,
                       seed=seed, policy=policy, predictor_noise=noise)

    cells = [(r, s, "2p4d", n) for r in readings for s in seeds for n in NOISE_LEVELS]
    cells += [(r, s, "1p2d", 0.0) for r in [*readings, "round_robin"] for s in seeds]
    done = simulated_summaries([spec(r, s, t, n) for r, s, t, n in cells])
    got = {c: summary for c, (summary, _) in zip(cells, done, strict=True)}

    print(f"sim, mixed at {rate:g} req/s, {len(seeds)} traces (seeds {seeds[0]}-{seeds[-1]}) x {a.requests} requests; "
          "mean [95 % t interval over traces]\n")
    print("| reading | Table II mean | traces 1 / 2 / 3 | Fig. 6 P99 TTFT (s) | Fig. 4 1p2d | RR minus it, 1p2d |")
    print("|---|---|---|---|---|---|")
    for r in readings:
        g = [got[(r, s, "2p4d", 0.0)]["goodput"] for s in seeds]
        p99 = [got[(r, s, "2p4d", 0.0)]["ttft_p99_s"] for s in seeds]
        small = [got[(r, s, "1p2d", 0.0)]["goodput"] for s in seeds]
        rr = [got[("round_robin", s, "1p2d", 0.0)]["goodput"] for s in seeds]
        first = " / ".join(f"{x:.3f}" for x in g[:3])
        print(f"| {r} | {t_interval(g)} | {first} | {t_interval(p99)} | {t_interval(small)} | "
              f"{t_interval([x - y for x, y in zip(rr, small, strict=True)])} |")
    print("\n| reading | " + " | ".join(f"noise {n:g}" for n in NOISE_LEVELS) + " |")
    print("|---|" + "---|" * len(NOISE_LEVELS))
    for r in readings:
        print(f"| {r} | " + " | ".join(t_interval([got[(r, s, "2p4d", n)]["goodput"] for s in seeds])
                                       for n in NOISE_LEVELS) + " |")


if __name__ == "__main__":
    main()
