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
seeds: list = []  # arrival traces (one seed each); [] means the scale default (sim [1, 2, 3]; live quick [1]; sim full ten [1..10]; live full [1, 2, 3])
n_requests: int = 0  # requests per run; 0 means the scale default (sim 2000 or 10000, live 200 or 1000)
cluster: str = ""  # cluster YAML for emulated/vllm (empty: an emulated 2p4d)
rate: float = 0.0  # arrival rate in req/s; 0 means a saturation search on mixed (live quick: the simulator's rate)
time_scale: float = 1.0  # emulated: physics K times faster than the wall clock; K > 1 biases TTFT (docs/VALIDITY.md)
runs_dir: str = "runs/paper"  # journals of live runs (resumable)
results_dir: str = ""  # tidy CSVs; empty means results/<backend>-<scale> (relative: to the repo root)
figures_dir: str = ""  # PNG + PDF figures; empty means figures/<backend>-<scale>

# %%
import pandas as pd

from repro.paper import figures as F
from repro.paper.section import Section
from repro.paper.sections import mixed_goodput as nb
from repro.routing.policies import PAPER_POLICIES

ctx = Section.setup(notebook="04_mixed_goodput", quick_seeds=(1, 2, 3),  # Table II lists every trace
                    backend=backend, scale=scale, seeds=seeds, cluster=cluster, rate=rate, n_requests=n_requests,
                    time_scale=time_scale, runs_dir=runs_dir, results_dir=results_dir, figures_dir=figures_dir)
runs = ctx.run(nb.table_two_specs(ctx, ctx.rate), save_as="04_table2_runs")
topo = "/".join(sorted(set(runs.topology)))  # 2p4d, or the cluster file's pools
print(ctx.describe_runs(runs, f"mixed, {topo}, {ctx.rate:.3g} req/s"))

# %%
tab = ctx.write_results(nb.table_two(runs), "04_table2")
tab.drop(columns=["mean_goodput", "spread", "worst", "paper_mean_goodput", "paper_worst"])  # those: printed below

# %% tags=["golden", "hide-input"]
# checked: the values printed here are compared with notebooks/expected/04_mixed_goodput-1.txt in the test run
with ctx.expected_output(1):
    print(tab[["policy", "mean_goodput", "spread", "worst", "paper_mean_goodput", "paper_worst"]].round(3)
          .to_string(index=False))

# %%
# error bars: ±1 sd over the traces, or with one trace the 95% interval over its requests
ours, err_label = F.with_interval(tab, "mean_goodput", "sd", len(ctx.seeds), n_requests=ctx.n_requests)
paper = pd.DataFrame({"policy": ["marginal_cost"],
                      "paper": [tab.set_index("policy").loc["marginal_cost", "paper_mean_goodput"]]})
shown = [p for p in PAPER_POLICIES if p in set(tab.policy)]
fig, ax = F.bar_with_paper(ours, "policy", "mean_goodput", paper=paper, err=("lo", "hi"), err_label=err_label,
                           order=shown, title=f"Table II (§V-A): mixed bursty traffic, {topo}, "
                                              f"{F.traces_label(ctx.seeds)} ({backend})",
                           xlabel="policy", ylabel="goodput (fraction of requests meeting SLO)", ylim=(0.0, 1.0),
                           legend=None)
if len(ctx.seeds) > 1:  # each trace's own goodput, beside the bar's interval
    for i, pol in enumerate(shown):
        g = runs[runs.policy == pol]
        ax.scatter([i + 0.2] * len(g), g.goodput, s=12, color="white", edgecolors="black", linewidths=0.6, zorder=6,
                   label="each trace" if i == 0 else None)
F.legend_outside(ax)
ctx.save(fig, "04_table2_goodput")

# %%
ctx.write_headline(nb.table_two_headline(tab, runs, ctx))

# %%
ctx.findings("Table II (§V-A)")
