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
# # 15 · Your policy against the paper's router: the scorecard
#
# `repro paper --policy pkg.module:YourRouter` (repeatable; a registered name works too) runs this
# notebook with your policies. Each of the paper's comparisons of policies is made again by its own
# section's code, on the same traces and rates, with your policy beside the paper's four: Table II
# (04), the miscalibration study (§V-B, 05), the workloads of Fig. 3 (06), the pool widths of §V-D
# (07), the 1p2d scarcity of Fig. 4 (08), the load sweep and tails of Figs. 5-6 (09) and the
# predictor error of Fig. 9 (11). Three kinds of row per policy: the paper's claims about its router
# asked of yours (your runs in its place, the same rule table), and per setting your policy minus
# the paper's router and minus the best baseline (picked after the fact, selection-aware), paired
# trace by trace and request by request. The policy contract: docs/POLICY.md.

# %% tags=["parameters"]
backend: str = "sim"  # sim | emulated | vllm
scale: str = "quick"  # quick | full
seeds: list = []  # arrival traces (one seed each); [] means the scale default (sim quick [1, 2]; live quick [1]; sim full ten [1..10]; live full [1, 2, 3])
n_requests: int = 0  # requests per run; 0 means the scale default (sim 2000 or 10000, live 200 or 1000)
cluster: str = ""  # cluster YAML for emulated/vllm; a {topology} template for the pool-width and 1p2d claims
policies: list = ["power_of_two"]  # the policies scored: registered names or import paths 'pkg.module:Class' (repro paper --policy)
claims: list = []  # claim groups; [] means the scale default (all; live quick: Table II and the 1p2d scarcity)
rate: float = 0.0  # one arrival rate (req/s) for mixed; 0 means the testbed's operating rates (else saturation searches)
time_scale: float = 1.0  # emulated: physics K times faster than the wall clock; K > 1 biases TTFT (docs/VALIDITY.md)
runs_dir: str = "runs/paper"  # journals of live runs (resumable)
results_dir: str = ""  # tidy CSVs; empty means results/<backend>-<scale> (relative: to the repo root)
figures_dir: str = ""  # PNG + PDF figures; empty means figures/<backend>-<scale>

# %%
from IPython.display import Markdown

from repro.paper.section import Section
from repro.paper.sections import scorecard as nb
from repro.vocab import WORKLOADS

policies = nb.check_policies(policies)
ctx = Section.setup(notebook="15_scorecard", workloads=WORKLOADS, shape_sweep=True, quick_seeds=(1, 2),
                    backend=backend, scale=scale, seeds=seeds, cluster=cluster, rate=rate, n_requests=n_requests,
                    time_scale=time_scale, runs_dir=runs_dir, results_dir=results_dir, figures_dir=figures_dir)
claims = ctx.pick("scorer_claims", claims, list(nb.GROUPS))
card = nb.score_section(ctx, policies, claims)
ctx.write_results(card.runs, "15_scorecard_runs")
print(f"{card.runs.run_id.nunique()} runs; {card.conditions}; claims: {', '.join(claims)}")

# %%
ctx.write_results(card.table, "scorecard")  # every row, read by report.html and repro compare
summary = ctx.write_results(card.summary(), "15_scorecard_summary")  # printed (and checked) below

# %% tags=["golden", "hide-input"]
# checked: the values printed here are compared with notebooks/expected/15_scorecard-1.txt in the test run
with ctx.expected_output(1):
    print(summary.to_string(index=False))
    shown = card.table[card.table.comparison != nb.NOT_RUN]
    shown = shown.assign(row=[k.split("@")[0] if c == nb.AS_ROUTER else s for k, c, s in
                              zip(shown.key, shown.comparison, shown.setting, strict=True)])
    print(shown[["claim", "comparison", "row", "metric", "ours", "ours_lo", "ours_hi", "verdict"]]
          .round(4).to_string(index=False))

# %%
fig = card.figure()
ctx.save(fig, "15_scorecard")

# %% [markdown]
# Each group's runs, per setting and policy (goodput and P99 TTFT over the traces):

# %%
for name in claims:
    tab = card.group_table(name)
    if len(tab):
        print(f"{name}:")
        print(tab.round(3).to_string(index=False))

# %%
Markdown(card.markdown())
