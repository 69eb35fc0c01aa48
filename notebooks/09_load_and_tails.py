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
# # 09 · Load and tails: Figs. 5, 6, 7 (§V-F)
#
# Fig. 5: goodput and P99 TTFT of the four policies under a rising arrival rate, from a quarter of the
# operating point up to it (mixed, 2p4d). The paper: round-robin degrades from 0.880 to 0.733 with P99
# TTFT stretching from 0.22 s to 0.56 s; the policies separate with pressure. Fig. 6: P99 TTFT at the
# operating point (learned 0.321 s, round-robin 0.337 s, JSQ 0.346 s). Fig. 7: a sustained burst train
# (`repro.workload.arrivals` burst process, carried by `RunSpec.arrival`, mean rate = the operating point): rolling
# P95 TTFT and goodput over arrival-time windows; the paper's learned router keeps rolling P95 TTFT
# ~20% lower (0.28 s vs 0.30-0.37 s) and goodput above round-robin throughout.

# %% tags=["parameters"]
backend: str = "sim"  # sim | emulated | vllm
scale: str = "quick"  # quick | full
seeds: list = []  # arrival traces (one seed each); [] means the scale default (sim [1, 2, 3]; live quick [1]; sim full ten [1..10]; live full [1, 2, 3])
n_requests: int = 0  # requests per run; 0 means the scale default (sim 2000 or 10000, live 200 or 1000)
cluster: str = ""  # cluster YAML for emulated/vllm (empty: an emulated 2p4d)
rate_fractions: list = []  # Fig. 5 rates as fractions of the operating point; [] means the scale default ([0.25, 0.4, 0.55, 0.7, 0.85, 1.0]; live quick [0.5, 1.0])
policies: list = []  # policies of Figs. 5-7; [] means the scale default (the paper's four; live quick: round-robin and marginal-cost)
burst_factor: float = 3.0  # Fig. 7: rate inside a burst / mean rate
burst_period_s: float = 0.0  # Fig. 7: one burst every this many seconds of physics time; 0 means the scale default (30; live quick 10)
burst_duty: float = 0.2  # Fig. 7: fraction of each period spent in the burst
window_s: float = 0.0  # Fig. 7: rolling window (s of arrival time); 0 means a third of the burst period
rate: float = 0.0  # the operating point in req/s (top of the sweep, mean of the burst train); 0 means a saturation search (live quick: the simulator's rate)
time_scale: float = 1.0  # emulated: physics K times faster than the wall clock; K > 1 biases TTFT (docs/VALIDITY.md)
runs_dir: str = "runs/paper"  # journals of live runs (resumable)
results_dir: str = ""  # tidy CSVs; empty means results/<backend>-<scale> (relative: to the repo root)
figures_dir: str = ""  # PNG + PDF figures; empty means figures/<backend>-<scale>

# %%
import matplotlib.pyplot as plt
import numpy as np

from repro.paper import figures as F
from repro.paper.grids import paper_value
from repro.paper.section import Section
from repro.paper.sections import load_and_tails as nb
from repro.routing.policies import PAPER_POLICIES

ctx = Section.setup(notebook="09_load_and_tails", quick_seeds=(1, 2, 3),  # three traces per rate
                    backend=backend, scale=scale, seeds=seeds, cluster=cluster, rate=rate, n_requests=n_requests,
                    time_scale=time_scale, runs_dir=runs_dir, results_dir=results_dir, figures_dir=figures_dir)
rate_fractions = ctx.pick("rate_fractions", rate_fractions, nb.RATE_FRACTIONS)
policies = ctx.pick("sweep_policies", policies, PAPER_POLICIES)
runs = ctx.run(nb.load_sweep_specs(ctx, ctx.rate, rate_fractions, policies), save_as="09_load_sweep_runs")
sweep = nb.load_sweep_table(runs, ctx.rate)
op = nb.operating_point_table(runs[runs.rate == runs.rate.max()])
ctx.write_results(sweep, "09_fig5_load_sweep")
ctx.write_results(op, "09_fig6_operating_point")
swept = ", ".join(f"{ctx.rate * f:.1f}" for f in sorted(rate_fractions))
print(ctx.describe_runs(runs, f"mixed, 2p4d, rates {swept} req/s"))

# %%
burst_period_s = ctx.value("burst_period_s", burst_period_s, nb.BURST["period_s"])
window_s = window_s or burst_period_s / 3
burst = {"process": "burst", "burst_factor": burst_factor, "period_s": burst_period_s, "duty": burst_duty}
burst_n = nb.burst_requests(ctx.rate, burst_period_s, ctx.n_requests)  # at least three periods
bspecs = nb.burst_specs(ctx, ctx.rate, n_requests=burst_n, policies=policies, burst=burst)
timeline = nb.burst_timeline(ctx, bspecs, window_s=window_s)
btab = nb.burst_table(timeline)
ctx.write_results(timeline, "09_fig7_burst_timeline")
btab = ctx.write_results(btab, "09_fig7_burst")  # printed (and checked) below

# %% tags=["golden", "hide-input"]
# checked: the values printed here are compared with notebooks/expected/09_load_and_tails-1.txt in the test run
with ctx.expected_output(1):
    print(sweep.pivot(index="load", columns="policy", values="goodput")[policies].round(3).to_string())
    print(op[["policy", "ttft_p99_s", "paper_ttft_p99_s"]].round(3).to_string(index=False))
    print(btab[["policy", "rolling_ttft_p95_s_mean", "rolling_goodput_mean", "windows_at_or_above_rr"]].round(3)
          .to_string(index=False))

# %%
fig, axes = plt.subplots(1, 2, figsize=(11.0, 3.6))
# error bars: ±1 sd over the traces, or with one trace the 95% interval over its requests
sw, err_label = F.with_interval(sweep, "goodput", "goodput_sd", len(ctx.seeds), n_requests=ctx.n_requests)
step = float(np.diff(nb.RATE_FRACTIONS).max())  # a line joins neighbouring loads of the sweep's grid only
for pol in policies:
    g = sw[sw.policy == pol].sort_values("rate")
    groups = F.contiguous_groups(g.load, step=step)
    F.policy_line(axes[0], g.rate, g.goodput, pol, lo=g.lo, hi=g.hi, groups=groups)
    F.policy_line(axes[1], g.rate, g.ttft_p99_s, pol, groups=groups)
for ax, col in ((axes[0], "paper_goodput"), (axes[1], "paper_ttft_p99_s")):
    pp = sweep.dropna(subset=[col])
    F.mark_paper(ax, pp.rate, pp[col], label="paper (round-robin)")
    ax.set_xlabel("arrival rate (req/s)")
axes[0].set_ylabel(f"goodput (fraction meeting SLO)\nbars: {err_label}")
axes[0].set_ylim(0.0, 1.0)
axes[1].set_ylabel(f"P99 TTFT (s, mean over {F.traces_label(ctx.seeds)})")
fig.suptitle(f"Fig. 5 (§V-F): rising request rate, mixed, 2p4d, {F.traces_label(ctx.seeds)} ({backend})", y=1.02)
fig.tight_layout()
handles, labels = F.merged_handles(axes)
F.legend_outside(axes[1], handles=handles, labels=labels)
ctx.save(fig, "09_fig5_load_sweep")

# %%
paper = op[["policy", "paper_ttft_p99_s"]].rename(columns={"paper_ttft_p99_s": "paper"})
n_traces = len(ctx.seeds)  # whiskers: from the lowest to the highest trace (none with one trace)
fig, ax = F.bar_with_paper(op, "policy", "ttft_p99_s", paper=paper,
                           err=("ttft_p99_min_s", "ttft_p99_max_s") if n_traces > 1 else None,
                           err_label=f"range over {n_traces} traces", order=policies,
                           title=f"Fig. 6 (§V-F): P99 TTFT at the operating point ({ctx.rate:.1f} req/s), mixed, "
                                 f"2p4d, {F.traces_label(ctx.seeds)} ({backend})",
                           xlabel="policy", ylabel=f"P99 TTFT (s, mean over {F.traces_label(ctx.seeds)})")
ctx.save(fig, "09_fig6_operating_point")

# %%
mean_t = timeline.groupby(["policy", "window_s"], sort=False)[["goodput", "ttft_p95_s"]].mean().reset_index()
fig, axes = plt.subplots(2, 1, figsize=(10.0, 5.6), sharex=True)
for pol in policies:
    g = mean_t[mean_t.policy == pol]  # every window of the run: a line joins neighbouring windows
    for ax, col in ((axes[0], "ttft_p95_s"), (axes[1], "goodput")):
        ax.plot(g.window_s + window_s / 2, g[col], lw=1.2, color=F.policy_color(pol), label=F.policy_label(pol))
horizon = float(mean_t.window_s.max() + window_s)
for k in range(int(np.ceil(horizon / burst_period_s))):  # the bursts within the windows shown
    for ax in axes:
        ax.axvspan(k * burst_period_s, min(horizon, k * burst_period_s + burst_duty * burst_period_s), color="grey",
                   alpha=0.12, lw=0, label="burst" if (k == 0 and ax is axes[0]) else None)
axes[1].set_xlim(0.0, horizon)
ref = btab.set_index("policy")
axes[0].axhline(ref.loc["marginal_cost", "paper_rolling_ttft_p95_s"], color="black", ls="--", lw=0.9,
                label="paper: learned 0.28 s")
axes[0].axhspan(paper_value("fig7_other_ttft_p95_rolling_lo"), paper_value("fig7_other_ttft_p95_rolling_hi"),
                color="black", alpha=0.08, label="paper: baselines 0.30-0.37 s")
axes[0].set_yscale("log")
F.plain_log_axis(axes[0])
axes[0].set_ylabel(f"rolling P95 TTFT (s, {window_s:.3g} s windows)")
axes[1].set_ylabel("rolling goodput (fraction)")
axes[1].set_ylim(0.0, 1.0)
axes[1].set_xlabel("arrival time (s)")
axes[0].set_title(f"Fig. 7 (§V-F): burst train (x{burst_factor:g} for {burst_duty:.0%} of every {burst_period_s:g} s, "
                  f"mean {ctx.rate:.1f} req/s), mixed, 2p4d, mean of {F.traces_label(ctx.seeds)} ({backend})")
fig.tight_layout()
F.legend_outside(axes[0])
ctx.save(fig, "09_fig7_burst_train")

# %%
ctx.write_headline(nb.load_and_tails_headline(sweep, op, btab, runs, ctx, timeline))

# %%
ctx.findings("Figs. 5-7, load and tails (§V-F)")
