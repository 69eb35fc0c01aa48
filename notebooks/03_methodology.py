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
n_requests: int = 0  # requests per saturation probe; 0 means the scale default (sim 1000 or 4000, live 200 or 1000)
cluster: str = ""  # cluster YAML for emulated/vllm (empty: an emulated cluster)
time_scale: float = 1.0  # emulated: physics K times faster than the wall clock; K > 1 biases TTFT (docs/VALIDITY.md)
runs_dir: str = "runs/paper"  # journals of live runs (resumable; relative paths are relative to the repo root)
results_dir: str = ""  # tidy CSVs; empty means results/<backend>-<scale> (relative: to the repo root)
figures_dir: str = ""  # PNG + PDF figures; empty means figures/<backend>-<scale>

# %%
import pandas as pd

from repro.paper import figures as F
from repro.paper.plans import fixed_rates
from repro.paper.section import Section
from repro.paper.sections import methodology as nb
from repro.vocab import WORKLOADS
from repro.workload.traces import table_one

ctx = Section.setup(notebook="03_methodology", sim_requests=nb.PROBE_REQUESTS,  # probes: 1000 requests (full: 4000)
                    backend=backend, scale=scale, seeds=seeds, cluster=cluster, n_requests=n_requests,
                    time_scale=time_scale, runs_dir=runs_dir, results_dir=results_dir, figures_dir=figures_dir)
t1 = table_one()
ctx.write_results(t1, "03_table1_workloads")
t1[["workload", "stresses", "arrivals", "mix", "tight_share"]]  # its token lengths are printed (and checked) below

# %% tags=["golden", "hide-input"]
# checked: the values printed here are compared with notebooks/expected/03_methodology-1.txt in the test run
with ctx.expected_output(1):
    print(t1[["workload", "prompt_p50", "prompt_p99", "output_p50", "output_p99"]].to_string(index=False))

# %%
report, gates = nb.check_gates(ctx)
print(report)
if gates is not None:
    ctx.write_results(gates, "03_gates")
    if not gates.ok.all():
        raise RuntimeError("a correctness gate failed: fix the cluster before measuring (see the report above)")

# %%
# emulated live quick checks the simulator's operating point of mixed with one round-robin probe instead of
# searching; vllm searches the cluster at hand (its engines are not the paper's A40s)
workloads = ctx.pick("saturation_workloads", [], WORKLOADS)
fixed = None if ctx.searches_rates else fixed_rates(workloads)
rates, probes = ctx.saturation(workloads, n_requests=ctx.probe_requests if ctx.backend == "vllm" else ctx.n_requests,
                               fixed=fixed)
ctx.write_results(probes, "03_saturation_probes")
rates = ctx.write_results(rates, "03_saturation_rates")  # printed (and checked) below

# %% tags=["golden", "hide-input"]
# checked: the values printed here are compared with notebooks/expected/03_methodology-2.txt in the test run
with ctx.expected_output(2):
    for r in rates.itertuples():
        if pd.isna(r.light_goodput):  # a given rate, checked with one probe: no light-load value, no target
            g = probes[probes.workload == r.workload].round_robin_goodput
            print(f"{r.workload:>10}: {r.saturation_rate:.1f} req/s (given, not searched; round-robin goodput "
                  f"{F.num(g.iloc[0] if len(g) else None)} there)")
        else:
            print(f"{r.workload:>10}: {r.saturation_rate:.1f} req/s (round-robin goodput {r.light_goodput:.3f} light "
                  f"-> target {r.target_goodput:.3f})")

# %%
# a given rate is one probe: drawn against the simulator's own search (cheap), which it was taken from
reference = None if fixed is None else ctx.simulator().saturation(workloads, n_requests=nb.PROBE_REQUESTS[0])
fig = nb.saturation_figure(rates, probes, reference=reference,
                           title=f"§IV-B: saturation search per workload ({backend}, 2p4d)" if fixed is None else
                           f"§IV-B: the simulator's operating point checked with one round-robin probe ({backend}, 2p4d)")
ctx.save(fig, "03_saturation_search")

# %%
ctx.write_headline(nb.saturation_headline(rates, searched=fixed is None))

# %%
ctx.findings("operating points (§IV-B)")
