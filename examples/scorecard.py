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
# # The scorecard of your routing policy
#
# Your policy beside the paper's four, on the same traces, in each of the paper's comparisons of
# policies (each made by its own section's code): the paper's claims about its router asked of
# yours, and per setting your policy minus the paper's router and minus the best baseline, paired
# trace by trace and request by request, with 95 % intervals. The policy here is the worked example
# `examples/slack_router` (`slack_router.policy:SlackRouter`); give yours by import path. The
# contract a policy follows: docs/POLICY.md. The defaults are CI-sized (two traces of 1,000
# requests, three claim groups); `claims = []` runs every group, `scale = "full"` the main job's
# ten traces of 10,000 requests (`repro paper --only 15 --policy ... --scale full` does the same
# headlessly).

# %% tags=["parameters"]
policy: str = "slack_router.policy:SlackRouter"  # your policy: an import path pkg.module:Class, or a registered name
backend: str = "sim"  # sim | emulated | vllm
scale: str = "quick"  # quick | full
seeds: list = [1, 2]  # arrival traces (one seed each); [] means the scale default
n_requests: int = 1000  # requests per run; 0 means the scale default (sim 2000 or 10000)
claims: list = ["Table II", "Fig. 4 scarcity (1p2d)", "Fig. 9 noise"]  # claim groups; [] means all of them
cluster: str = ""  # cluster YAML for emulated/vllm
results_dir: str = "results/example-scorecard"  # tidy CSVs (relative: to the repository root)
figures_dir: str = "figures/example-scorecard"  # PNG + PDF figures

# %%
# The example's package without an install: its src folder first on sys.path (this kernel) and on
# $PYTHONPATH (worker processes inherit the environment). Your own package: pip install -e it instead.
import os
import sys
from pathlib import Path

here = Path.cwd().resolve()
src = next((p / "examples" / "slack_router" / "src" for p in (here, *here.parents)
            if (p / "examples" / "slack_router" / "src").is_dir()), None)
if src is not None and str(src) not in sys.path:
    sys.path.insert(0, str(src))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(src), os.environ.get("PYTHONPATH", "")) if p)

# %%
from IPython.display import Markdown

from repro.paper.section import Section
from repro.paper.sections import scorecard
from repro.vocab import WORKLOADS

policies = scorecard.check_policies([policy])  # a bad import path or a broken contract stops here, saying why
ctx = Section.setup(notebook="scorecard", workloads=WORKLOADS, rate=0.0, shape_sweep=True, quick_seeds=(1, 2),
                    backend=backend, scale=scale, seeds=seeds, n_requests=n_requests, cluster=cluster,
                    results_dir=results_dir, figures_dir=figures_dir)
card = scorecard.score_section(ctx, policies, claims)
ctx.write_results(card.table, "scorecard")
print(f"{card.runs.run_id.nunique()} runs; {card.conditions}")

# %%
card.summary()

# %%
fig = card.figure()
ctx.save(fig, "scorecard")

# %%
Markdown(card.markdown())
