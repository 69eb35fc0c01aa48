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
# # 04 · Goodput under mixed bursty load: Table II (§V-A)
#
# The four policies of the paper (round-robin, least-loaded/JSQ, the length-threshold heuristic, the
# learned marginal-cost router) on the mixed workload, 2 prefill + 4 decode, three arrival traces
# (seeds), at the saturation rate. The paper: the learned router posts 0.860/0.877/0.855 (mean
# 0.864), the highest mean and smallest spread; least-loaded drops to 0.795 on its worst trace.

# %% tags=["parameters"]
backend: str = "sim"  # sim | emulated | vllm
scale: str = "quick"  # quick | full
seeds: list = []  # arrival traces (one seed each); [] means the scale default (sim [1, 2, 3]; live quick [1]; full [1, 2, 3])
cluster: str = ""  # cluster YAML for emulated/vllm (empty: an emulated 2p4d)
results_dir: str = "results"  # tidy CSVs (relative paths are relative to the repo root)
figures_dir: str = "figures"  # PNG + PDF figures (relative paths are relative to the repo root)
time_scale: float = 2.0  # emulated engines run physics this many times faster than the wall clock
rate: float = 0.0  # arrival rate in req/s; 0 means a saturation search on mixed (live quick: the simulator's rate)
n_requests: int = 0  # requests per run; 0 means the scale default (sim 2000 or 10000, live 200 or 1000)
runs_dir: str = "runs/paper"  # journals of live runs (resumable)

# %%

from repro.paper import figures as F
from repro.paper import legacy_analysis as A
from repro.paper import legacy_results as R
from repro.paper import section as S
from repro.paper.figures import resolve_dir

seeds, n = A.scale_plan(backend, scale, seeds, n_requests, quick_seeds=(1, 2, 3))
S.check_common(backend, scale, seeds)
cluster_file = S.check_cluster(backend, cluster)
F.set_style()
ts = time_scale if backend == "emulated" else 1.0
if rate <= 0:
    rate = R.operating_rates(["mixed"], backend=backend, scale=scale, n_requests=min(n, 1000), seed=seeds[0],
                             cluster=cluster_file, time_scale=ts, runs_dir=resolve_dir(runs_dir))["mixed"]
specs = S.table_two_specs(backend=backend, seeds=seeds, rate=rate, n_requests=n, cluster=cluster_file, time_scale=ts)
runs = S.run_grid(specs, resolve_dir(runs_dir))
F.write_results(runs, "04_table2_runs", results_dir)
print(f"{len(runs)} runs: mixed, 2p4d, {rate:.1f} req/s, {n} requests each, seeds {list(seeds)}")

# %%
tab = S.table_two(runs)
F.write_results(tab, "04_table2", results_dir)
tab

# %%
# checked: the values printed here are compared with notebooks/expected/04_mixed_goodput-1.txt in the test run
from repro.paper.runner import expected_output  # noqa: E402

with expected_output("04_mixed_goodput", 1):
    print(tab[["policy", "mean_goodput", "spread", "worst", "paper_mean_goodput", "paper_worst"]].round(3).to_string(index=False))

# %%
import pandas as pd  # noqa: E402

ours = tab.assign(err=tab.sd)
paper = pd.DataFrame({"policy": ["marginal_cost"], "paper": [tab.set_index("policy").loc["marginal_cost", "paper_mean_goodput"]]})
fig, ax = F.bar_with_paper(ours, "policy", "mean_goodput", paper=paper, err="err", order=S.PAPER_POLICIES,
                           title=f"Table II (§V-A): mixed bursty traffic, 2p4d, {F.traces_label(seeds)} ({backend})",
                           xlabel="policy", ylabel="goodput (fraction of requests meeting SLO)", ylim=(0.0, 1.0))
for i, pol in enumerate(S.PAPER_POLICIES):
    g = runs[runs.policy == pol]
    ax.scatter([i] * len(g), g.goodput, s=10, color="white", edgecolors="black", linewidths=0.6, zorder=6,
               label="per trace" if i == 0 else None)
ax.legend(loc="lower right")
F.save(fig, "04_table2_goodput", figures_dir)

# %%
F.write_headline(S.table_two_headline(tab), "04_mixed_goodput", results_dir)
