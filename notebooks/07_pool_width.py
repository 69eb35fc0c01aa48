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
# # 07 · Effect of pool width (§V-D)
#
# The headline experiment (mixed, the 2p4d operating point, the four policies, three traces) repeated with
# 2 prefill and 3, 4 or 6 decode instances. The paper: at width 3 the learned router ties JSQ (0.816 vs
# 0.822), at width 4 it leads outright (0.864 vs 0.835), at width 6 the policies reconverge (0.858 vs 0.860
# for round-robin): informed placement is worth more with more alternatives.

# %% tags=["parameters"]
backend: str = "sim"  # sim | emulated | vllm
scale: str = "quick"  # quick | full
seeds: list = []  # arrival traces (one seed each); [] means the scale default (sim [1, 2, 3]; live quick [1]; sim full ten [1..10]; live full [1, 2, 3])
n_requests: int = 0  # requests per run; 0 means the scale default (sim 2000 or 10000, live 200 or 1000)
cluster: str = ""  # cluster YAML for emulated/vllm (empty: emulated pools; for vllm a template with {topology}, e.g. "clusters/a40-{topology}.yaml")
widths: list = []  # decode widths (2 prefill instances each); [] means the scale default ([3, 4, 6]; live quick [3, 4])
policies: list = []  # policies to compare; [] means the scale default (the paper's four; live quick: least-loaded and marginal-cost)
rate: float = 0.0  # arrival rate in req/s; 0 means a saturation search on mixed (2p4d; live quick: the simulator's rate)
time_scale: float = 1.0  # emulated: physics K times faster than the wall clock; K > 1 biases TTFT (docs/VALIDITY.md)
runs_dir: str = "runs/paper"  # journals of live runs (resumable)
results_dir: str = ""  # tidy CSVs; empty means results/<backend>-<scale> (relative: to the repo root)
figures_dir: str = ""  # PNG + PDF figures; empty means figures/<backend>-<scale>

# %%
from repro.paper import figures as F
from repro.paper.grids import specs_grid
from repro.paper.section import Section
from repro.paper.sections import pool_width as nb
from repro.routing.policies import PAPER_POLICIES

ctx = Section.setup(notebook="07_pool_width", shape_sweep=True, quick_seeds=(1, 2, 3),  # a cluster file per width
                    backend=backend, scale=scale, seeds=seeds, cluster=cluster, rate=rate, n_requests=n_requests,
                    time_scale=time_scale, runs_dir=runs_dir, results_dir=results_dir, figures_dir=figures_dir)
widths = ctx.pick("widths", widths, nb.WIDTHS)
policies = ctx.pick("width_policies", policies, PAPER_POLICIES)
topologies = nb.width_topologies(widths)
runs = ctx.run(specs_grid(ctx, rates=ctx.rate, topologies=topologies, policies=policies), save_as="07_pool_width_runs")
print(ctx.describe_runs(runs, f"mixed, {', '.join(topologies)}, {ctx.rate:.1f} req/s"))

# %%
tab = ctx.write_results(nb.width_table(runs), "07_pool_width")  # printed (and checked) below

# %% tags=["golden", "hide-input"]
# checked: the values printed here are compared with notebooks/expected/07_pool_width-1.txt in the test run
with ctx.expected_output(1):
    print(tab[["decode_width", "policy", "goodput", "goodput_sd", "paper_goodput", "mc_margin_over_best_baseline"]]
          .round(3).to_string(index=False))

# %%
paper = tab[["decode_width", "policy", "paper_goodput"]].rename(columns={"paper_goodput": "paper"})
# error bars: ±1 sd over the traces, or with one trace the 95% interval over its requests
good, err_label = F.with_interval(tab, "goodput", "goodput_sd", len(ctx.seeds), n_requests=ctx.n_requests)
fig, ax = F.bar_with_paper(good, "decode_width", "goodput", hue="policy", paper=paper, err=("lo", "hi"),
                           err_label=err_label, order=sorted(set(tab.decode_width)), hue_order=policies,
                           title=f"§V-D: goodput vs decode width, mixed, 2 prefill, {ctx.rate:.1f} req/s, "
                                 f"{F.traces_label(ctx.seeds)} ({backend})",
                           xlabel="decode instances (2 prefill each)",
                           ylabel="goodput (fraction meeting SLO)", ylim=(0.0, 1.0))
ctx.save(fig, "07_pool_width")

# %%
ctx.write_headline(nb.width_headline(tab, runs, ctx))

# %%
ctx.findings("decode pool width (§V-D)")
