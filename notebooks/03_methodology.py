# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: title,tags,-all
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 03 · Measurement methodology (§IV)
#
# Table I (the four workload families and what each stresses), the correctness gates that precede
# every live measurement, and the per-workload saturation search: each family is driven at the
# rate where round-robin is mid-collapse (goodput ~ 0.733/0.880 of its light-load value, Fig. 5).

# %% tags=["parameters"]
backend: str = "sim"  # sim | emulated | vllm
scale: str = "quick"  # quick | full
seeds: list = [1, 2, 3]  # arrival traces (the saturation search uses the first)
cluster: str = ""  # cluster YAML for emulated/vllm (empty: an emulated cluster)
results_dir: str = "results"  # tidy CSVs (relative paths are relative to the repo root)
figures_dir: str = "figures"  # PNG + PDF figures (relative paths are relative to the repo root)
time_scale: float = 2.0  # emulated engines run physics this many times faster than the wall clock
runs_dir: str = "runs/paper"  # journals of live runs (resumable; relative paths are relative to the repo root)
n_requests: int = 0  # requests per saturation probe; 0 means the scale default (sim 1000 or 4000, live 200 or 1000)

# %%
import matplotlib.pyplot as plt

from repro.paper import figures as F
from repro.paper import section as S
from repro.paper.plans import fixed_rates, pick, searches_rates
from repro.workload.traces import table_one

S.check_common(backend, scale, seeds)
cluster_file = S.check_cluster(backend, cluster)
F.set_style()
t1 = table_one()
F.write_results(t1, "03_table1_workloads", results_dir)
t1

# %%
# checked: the values printed here are compared with notebooks/expected/03_methodology-1.txt in the test run
from repro.paper.runner import expected_output  # noqa: E402

with expected_output("03_methodology", 1):
    print(t1[["workload", "prompt_p50", "prompt_p99", "output_p50", "output_p99"]].to_string(index=False))

# %%
if backend == "sim":
    print("Gates (token-count contract, greedy equivalence across decode GPUs, warm-up of every pair, "
          "prefix-cache reset) apply to live backends; rerun with backend='emulated' or 'vllm' to see them.")
    gates = None
else:
    from repro.live.gates import render_text, run_gates

    with S.live_cluster(backend, cluster_file, "1p2d", time_scale) as instances:
        report = run_gates(instances)
    print(render_text(report))
    gates = S.gates_table(report)
    F.write_results(gates, "03_gates", results_dir)
    if not gates.ok.all():
        raise RuntimeError("a correctness gate failed: fix the cluster before measuring (see the report above)")

# %%
n = n_requests or {("sim", "quick"): 1000, ("sim", "full"): 4000}.get((backend, scale), 200 if scale == "quick" else 1000)
# live quick checks the simulator's operating point of mixed with one round-robin probe instead of searching
workloads = pick("saturation_workloads", [], backend, scale, S.WORKLOADS)
fixed = None if searches_rates(backend, scale) else fixed_rates(workloads)
rates, probes = S.saturation_table(workloads, backend=backend, n_requests=n, seed=seeds[0], cluster=cluster_file,
                                   time_scale=time_scale if backend == "emulated" else 1.0, fixed=fixed, runs_dir=runs_dir)
F.write_results(rates, "03_saturation_rates", results_dir)
F.write_results(probes, "03_saturation_probes", results_dir)
rates

# %%
# checked: the values printed here are compared with notebooks/expected/03_methodology-2.txt in the test run
from repro.paper.runner import expected_output  # noqa: E402

with expected_output("03_methodology", 2):
    for r in rates.itertuples():
        print(f"{r.workload:>10}: {r.saturation_rate:.1f} req/s (round-robin goodput {r.light_goodput:.3f} light -> target {r.target_goodput:.3f})")

# %%
fig, axes = plt.subplots(1, len(rates), figsize=(3.0 * len(rates) + 0.5, 3.2), squeeze=False)
axes = axes[0]
for ax, r in zip(axes, rates.itertuples()):
    p = probes[probes.workload == r.workload].sort_values("rate")
    ax.plot(p.rate, p.round_robin_goodput, "o-", ms=3, label="round-robin probes")
    if fixed is None:
        ax.axhline(r.target_goodput, color="grey", ls=":", lw=0.8, label="mid-collapse target")
    ax.axvline(r.saturation_rate, color="black", ls="--", lw=0.8, label="chosen rate")
    ax.set_xscale("log")
    ax.set_title(f"{r.workload}: {r.saturation_rate:.1f} req/s")
    ax.set_xlabel("arrival rate (req/s)")
axes[0].set_ylabel("goodput (fraction)")
axes[0].legend(loc="lower left", fontsize=7)
fig.suptitle(f"§IV-B: saturation search per workload ({backend}, 2p4d)" if fixed is None else
             f"§IV-B: the simulator's operating point checked with one round-robin probe ({backend}, 2p4d)", y=1.02)
fig.tight_layout()
F.save(fig, "03_saturation_search", figures_dir)

# %%
F.write_headline([{"key": f"saturation_rate_{r.workload}", "ours": r.saturation_rate, "unit": "req/s"}
                   for r in rates.itertuples()], "03_methodology", results_dir)
