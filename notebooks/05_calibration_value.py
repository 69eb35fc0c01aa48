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
# # 05 · What calibration is worth (§V-B)
#
# The identical learned (marginal-cost) router run with the simulator-derived cost constants instead of
# the calibrated ones, on the same three mixed traces at the 2p4d operating point; least-loaded (JSQ) and
# round-robin alongside for reference. The paper: 0.819 mean goodput and 0.42-0.52 s P99 TTFT
# simulator-derived vs 0.864 and 0.25-0.30 s calibrated (+4.5 points; ~40% of the tail advantage). The
# mechanism, from per-request journals: mispriced, the router balances request counts almost perfectly
# while token load skews worse than JSQ. Token skew = max/mean of the tokens each decode instance served;
# request skew likewise on request counts (1.0 = perfectly even). §VI warns that the effect is small in
# simulation; the sim backend here estimates backlog from the router's own constants (ledger), as the proxy does.

# %% tags=["parameters"]
backend: str = "sim"  # sim | emulated | vllm
scale: str = "quick"  # quick | full
seeds: list = []  # arrival traces (one seed each); [] means the scale default (sim [1, 2, 3]; live quick [1]; sim full ten [1..10]; live full [1, 2, 3])
n_requests: int = 0  # requests per run; 0 means the scale default (sim 2000 or 10000, live 200 or 1000)
cluster: str = ""  # cluster YAML for emulated/vllm (empty: an emulated 2p4d)
rate: float = 0.0  # arrival rate in req/s; 0 means a saturation search on mixed (2p4d; live quick: the simulator's rate)
time_scale: float = 1.0  # emulated: physics K times faster than the wall clock; K > 1 biases TTFT (docs/VALIDITY.md)
runs_dir: str = "runs/paper"  # journals of live runs (resumable)
results_dir: str = ""  # tidy CSVs; empty means results/<backend>-<scale> (relative: to the repo root)
figures_dir: str = ""  # PNG + PDF figures; empty means figures/<backend>-<scale>

# %%
import textwrap

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.patches import Patch

from repro.paper import figures as F
from repro.paper.section import Section
from repro.paper.sections import calibration_value as nb

ctx = Section.setup(notebook="05_calibration_value", quick_seeds=(1, 2, 3),  # Table II's traces, two cost models
                    backend=backend, scale=scale, seeds=seeds, cluster=cluster, rate=rate, n_requests=n_requests,
                    time_scale=time_scale, runs_dir=runs_dir, results_dir=results_dir, figures_dir=figures_dir)
runs = ctx.run(nb.calibration_specs(ctx, ctx.rate), save_as="05_calibration_runs")
print(ctx.describe_runs(runs, f"mixed, 2p4d, {ctx.rate:.1f} req/s"))

# %%
tab = nb.calibration_table(runs)
load = nb.calibration_load(runs)
ctx.write_results(load, "05_calibration_load_skew")
tab = ctx.write_results(tab, "05_calibration")  # printed (and checked) below

# %% tags=["golden", "hide-input"]
# checked: the values printed here are compared with notebooks/expected/05_calibration_value-1.txt in the test run
with ctx.expected_output(1):
    print(tab[["condition", "goodput", "ttft_p99_min_s", "ttft_p99_max_s", "token_skew", "request_skew",
               "paper_goodput", "paper_ttft_p99_lo_s", "paper_ttft_p99_hi_s"]].round(3).to_string(index=False))

# %%
order, n_traces = list(tab.condition), len(ctx.seeds)
sim_derived = (tab.cost_model == "sim_derived").to_list()  # hatched: the learned router with the simulator's constants
fig, axes = plt.subplots(1, 3, figsize=(13.5, 3.8))
paper = tab[["condition", "paper_goodput"]].rename(columns={"paper_goodput": "paper"})
good, err_label = F.with_interval(tab, "goodput", "goodput_sd", n_traces, n_requests=ctx.n_requests)
F.bar_with_paper(good, "condition", "goodput", paper=paper, err=("lo", "hi"), err_label=err_label, order=order,
                 color_by="policy", ax=axes[0], title=f"goodput (mean over {F.traces_label(ctx.seeds)})", xlabel="",
                 ylabel="goodput (fraction meeting SLO)", ylim=(0.0, 1.0), legend=None)
ax = axes[1]
xs = np.arange(len(order), dtype=float)
ax.bar(xs, tab.ttft_p99_s, 0.6, color=[F.policy_color(p) for p in tab.policy], edgecolor="white")
if n_traces > 1:
    F.draw_interval(ax, xs, tab.ttft_p99_s, tab.ttft_p99_min_s, tab.ttft_p99_max_s,
                    label=f"range over {n_traces} traces")
for i, r in enumerate(tab.itertuples()):
    if pd.notna(r.paper_ttft_p99_lo_s):  # the paper gives a range over its traces: both ends, joined
        ax.plot([i + 0.38] * 2, [r.paper_ttft_p99_lo_s, r.paper_ttft_p99_hi_s], color="black", lw=1.0, zorder=4)
        F.mark_paper(ax, [i + 0.38] * 2, [r.paper_ttft_p99_lo_s, r.paper_ttft_p99_hi_s],
                     label="paper (its range over traces)" if i == 0 else None)
wrapped = [textwrap.fill(c, 14) for c in order]  # as the goodput panel's
ax.set_xticks(xs)
ax.set_xticklabels(wrapped)
ax.set_ylabel(f"P99 TTFT (s, mean over {F.traces_label(ctx.seeds)})")
ax.set_title("P99 TTFT")
for a in axes[:2]:
    for patch, hatched in zip(a.patches, sim_derived, strict=True):
        patch.set_hatch("///" if hatched else None)
sns.barplot(data=load, x="condition", y="skew", hue="kind", order=order, hue_order=["request count", "token load"],
            errorbar=("pi", 100) if n_traces > 1 else None, capsize=0.1, palette=["#BBBBBB", "#555555"],
            ax=axes[2], legend=False)
axes[2].axhline(1.0, color="grey", lw=0.8, ls=":")
axes[2].set_ylim(0.95, max(1.2, float(load["skew"].max()) + 0.02))
axes[2].set_xticks(xs)
axes[2].set_xticklabels(wrapped)
axes[2].set_xlabel("")
axes[2].set_ylabel("skew across decode instances (max / mean)")
axes[2].set_title("the mechanism: request-count vs token-load skew")
for a in axes:
    a.tick_params(axis="x", labelrotation=20)
    for lab in a.get_xticklabels():
        lab.set_horizontalalignment("right")
fig.suptitle("§V-B: calibrated vs simulator-derived cost constants, mixed, 2p4d, "
             f"{F.traces_label(ctx.seeds)} ({backend}); hatched: simulator-derived", y=1.02)
fig.tight_layout()
F.legend_outside(axes[0], "below")
F.legend_outside(axes[1], "below")
skew_handles = [Patch(color=c, label=k) for c, k in zip(["#BBBBBB", "#555555"], ["request count", "token load"],
                                                         strict=True)]
F.legend_outside(axes[2], "below", handles=skew_handles, labels=[h.get_label() for h in skew_handles], ncol=2,
                 title=f"skew of (whisker: range over {n_traces} traces)" if n_traces > 1 else "skew of")
ctx.save(fig, "05_calibration_value")

# %%
ctx.write_headline(nb.calibration_headline(runs, ctx))

# %%
ctx.findings("what calibration is worth (§V-B)")
