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
# # 14 · The paper's scorer beside its other readings and ours, claim by claim
#
# `marginal_cost` is the paper's router as §III describes it: every (prefill, decode) pair scored by
# the completion time the request would see there, in seconds: the prefill backlog, the request's
# own priced work, the decode backlog read off the router's ledger *at full weight*, cache pressure
# and an SLO hinge; read as a deployed proxy runs it: the ledger counts a request's decode work down
# from when its decode starts, and the TPOT hinge reads the per-token time of the batch it joins.
# Where §III-A's formula is lost, this harness read the router differently before:
# `marginal_cost_prefill_anchor` (the countdown restarts when the prefill answers: a request queued
# for a full decode engine drains from its backlog unstarted), `marginal_cost_backlog_tpot` (TPOT
# predicted from the decode backlog, which counts it twice) and `marginal_cost_prior` (both): how
# much each verdict depends on the reading. `marginal_cost_batching` is our variant for continuously
# batching decode engines (beyond the paper): the decode backlog enters only as the slowdown a
# newcomer shares with the sequences already there. Here every claim the paper makes about its
# learned router is measured for each, with the claim's own section (its runs, its headline rule and so its verdict): Table II's
# lead, the worth of calibration and its mechanism (§V-B), the per-workload orderings (Fig. 3), the
# pool-width claims (§V-D), greedy concentration at 1p2d (Fig. 4), predicted length as the
# load-bearing feature (Fig. 8) and robustness to predictor noise (Fig. 9).

# %% tags=["parameters"]
backend: str = "sim"  # sim | emulated | vllm
scale: str = "quick"  # quick | full
seeds: list = []  # arrival traces (one seed each); [] means the scale default (sim quick [1, 2]; live quick [1]; full [1, 2, 3], the paper's three)
n_requests: int = 0  # requests per run; 0 means the scale default (sim 2000 or 10000, live 200 or 1000)
cluster: str = ""  # cluster YAML for emulated/vllm; a {topology} template for the pool-width and 1p2d claims
formulas: list = []  # learned-router formulas to compare; [] means all five (the paper's scorer, its three prior readings, marginal_cost_batching)
claims: list = []  # claim groups; [] means the scale default (all; live quick: Table II and the 1p2d scarcity)
rate: float = 0.0  # one arrival rate (req/s) for every workload; 0 means each workload's saturation rate
time_scale: float = 1.0  # emulated: physics K times faster than the wall clock; K > 1 biases TTFT (docs/VALIDITY.md)
runs_dir: str = "runs/paper"  # journals of live runs (resumable)
results_dir: str = ""  # tidy CSVs; empty means results/<backend>-<scale> (relative: to the repo root)
figures_dir: str = ""  # PNG + PDF figures; empty means figures/<backend>-<scale>

# %%
from repro.paper.plans import FULL_SEEDS
from repro.paper.section import Section
from repro.paper.sections import scorers as nb
from repro.vocab import WORKLOADS

ctx = Section.setup(notebook="14_scorers", full_seeds=FULL_SEEDS,  # beyond the claims: the paper's 3 traces
                    workloads=WORKLOADS, shape_sweep=True, quick_seeds=(1, 2),
                    backend=backend, scale=scale, seeds=seeds, cluster=cluster, rate=rate, n_requests=n_requests,
                    time_scale=time_scale, runs_dir=runs_dir, results_dir=results_dir, figures_dir=figures_dir)
formulas = ctx.pick("scorer_formulas", formulas, nb.FORMULAS)
claims = ctx.pick("scorer_claims", claims, list(nb.CLAIMS))
rows, runs = nb.scorer_rows(ctx, formulas, claims)
ctx.write_results(runs, "14_scorer_runs")
print(f"{runs.run_id.nunique()} runs ({ctx.n_requests} requests each, seeds {list(ctx.seeds)}), mixed at "
      f"{ctx.rate:.1f} req/s; claims: {', '.join(claims)}")

# %%
table = ctx.write_results(nb.scorer_table(rows), "14_scorers")  # printed (and checked) below

# %% tags=["golden", "hide-input"]
# checked: the values printed here are compared with notebooks/expected/14_scorers-1.txt in the test run
with ctx.expected_output(1):
    with_cols = ["section_key"] + [f"{f} {w}" for f in formulas for w in ("estimate", "verdict")]
    print(table[[c for c in with_cols if c in table.columns]].to_string(index=False))

# %%
mech = ctx.write_results(nb.mechanisms(table, formulas), "14_mechanisms")
print(mech.to_string(index=False))

# %%
fig = nb.scorer_figure(rows, title=f"The paper's scorer beside ours ({backend}, {len(ctx.seeds)} traces x "
                                   f"{ctx.n_requests} requests; 95% intervals)")
ctx.save(fig, "14_scorers")

# %%
ctx.write_headline(rows)

# %%
ctx.findings("the paper's scorer beside ours")
