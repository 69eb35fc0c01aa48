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

# %%

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
seeds: list = []  # arrival traces (one seed each); [] means the scale default (sim [1, 2, 3]; live quick [1]; full [1, 2, 3])
cluster: str = ""  # cluster YAML for emulated/vllm (empty: emulated pools; for vllm a template with {topology}, e.g. "clusters/a40-{topology}.yaml")
results_dir: str = "results"  # tidy CSVs (relative paths are relative to the repo root)
figures_dir: str = "figures"  # PNG + PDF figures (relative paths are relative to the repo root)
time_scale: float = 2.0  # emulated engines run physics this many times faster than the wall clock
rate: float = 0.0  # arrival rate in req/s; 0 means a saturation search on mixed (2p4d; live quick: the simulator's rate)
n_requests: int = 0  # requests per run; 0 means the scale default (sim 2000 or 10000, live 200 or 1000)
runs_dir: str = "runs/paper"  # journals of live runs (resumable)
widths: list = []  # decode widths (2 prefill instances each); [] means the scale default ([3, 4, 6]; live quick [3, 4])
policies: list = []  # policies to compare; [] means the scale default (the paper's four; live quick: least-loaded and marginal-cost)

# %%

from repro.paper import figures as F
from repro.paper import legacy_analysis as A
from repro.paper import legacy_results as R
from repro.paper import section as S
from repro.paper.figures import resolve_dir
from repro.paper.plans import pick

seeds, n = A.scale_plan(backend, scale, seeds, n_requests, quick_seeds=(1, 2, 3))
S.check_common(backend, scale, seeds)
cluster_file = None if "{topology}" in cluster else S.check_cluster(backend, cluster)
F.set_style()
ts = time_scale if backend == "emulated" else 1.0
if rate <= 0:
    rate = R.operating_rates(["mixed"], backend=backend, scale=scale, n_requests=min(n, 1000), seed=seeds[0], cluster=R.shape_cluster(cluster or None, "2p4d", False),
                             time_scale=ts, runs_dir=resolve_dir(runs_dir))["mixed"]
widths = pick("widths", widths, backend, scale, R.WIDTHS)
policies = pick("width_policies", policies, backend, scale, S.PAPER_POLICIES)
topologies = R.width_topologies(widths)
specs = R.specs_grid(rates=rate, topologies=topologies, policies=policies, seeds=seeds, backend=backend, n_requests=n,
                     cluster=cluster or None, time_scale=ts)
runs = S.run_grid(specs, resolve_dir(runs_dir))
F.write_results(runs, "07_pool_width_runs", results_dir)
print(f"{len(runs)} runs: mixed, {', '.join(topologies)}, {rate:.1f} req/s, {n} requests each, seeds {list(seeds)}")

# %%
tab = R.width_table(runs)
F.write_results(tab, "07_pool_width", results_dir)
tab

# %%
# checked: the values printed here are compared with notebooks/expected/07_pool_width-1.txt in the test run
from repro.paper.runner import expected_output  # noqa: E402

with expected_output("07_pool_width", 1):
    print(tab[["decode_width", "policy", "goodput", "goodput_sd", "paper_goodput", "mc_margin_over_best_baseline"]]
          .round(3).to_string(index=False))

# %%
paper = tab[["decode_width", "policy", "paper_goodput"]].rename(columns={"paper_goodput": "paper"})
fig, ax = F.bar_with_paper(tab.assign(err=tab.goodput_sd), "decode_width", "goodput", hue="policy", paper=paper,
                           err="err", order=sorted(set(tab.decode_width)), hue_order=policies,
                           title=f"§V-D: goodput vs decode width, mixed, 2 prefill, {rate:.1f} req/s, "
                                 f"{F.traces_label(seeds)} ({backend})",
                           xlabel="decode instances (2 prefill each)",
                           ylabel="goodput (fraction meeting SLO, ±1 sd)", ylim=(0.0, 1.0))
ax.legend(loc="lower right", ncol=2)
F.save(fig, "07_pool_width", figures_dir)

# %%
F.write_headline(R.width_headline(tab), "07_pool_width", results_dir)
