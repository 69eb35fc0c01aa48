# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: title,tags,-all
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.7
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 00 · Overview: every claim of the paper, its section, our verdict, its figure
#
# `repro paper` runs this notebook last: it reads the run's `summary.csv` (one row per headline
# number, each with its 95% interval and verdict), writes the conclusion from it (one paragraph per
# headline claim of the paper, `repro.paper.claims`), then shows claim -> section -> verdict ->
# figure, then every run found under `results/` side by side (sim, emulated, vllm; quick or full).
# Verdicts compare our interval with the paper's stated number or gap (docs/VERDICTS.md), asking as
# much of one answer as of the other: *reproduced* (the whole interval inside the margin), *not
# reproduced* (the whole interval beyond it), *contradicted* (a direction shown reversed), *within
# noise* (neither: the row says what would decide it), *input* (a number the model was given or aimed
# at) and *context* (the paper states none). Each verdict says where it holds: on `sim`, in simulation.

# %% tags=["parameters"]
backend: str = "sim"  # sim | emulated | vllm: which run to show
scale: str = "quick"  # quick | full
seeds: list = []  # (unused here: the overview reads what the sections ran)
cluster: str = ""  # (unused here; every notebook takes it)
results_dir: str = ""  # the run's results; empty means results/<backend>-<scale>
figures_dir: str = ""  # the run's figures; empty means figures/<backend>-<scale>

# %%
from IPython.display import Image, Markdown, display

from repro.paper.claims import conclusion_markdown
from repro.paper.overview import compare, markdown, overview_table, read_summary
from repro.paths import resolve_dir

res = resolve_dir(results_dir or f"results/{backend}-{scale}")
fig = resolve_dir(figures_dir or f"figures/{backend}-{scale}")
summary = read_summary(res, backend=backend, scale=scale)
display(Markdown(conclusion_markdown(summary)))

# %%
from repro.paper.figures import claims_forest  # noqa: E402

display(claims_forest(summary))

# %%
table = overview_table(summary, fig)
display(Markdown(markdown(table)))

# %% [markdown]
# The figures behind the orderings (first figure of each section that has a verdict other than
# *context*):

# %%
shown = 0
for section, rows in table.groupby("section", sort=True):
    if (rows.verdict == "context").all() or not rows.figure.iloc[0]:
        continue
    first = rows.figure.iloc[0].split(", ")[0]
    display(Markdown(f"**{section}**: " + ", ".join(f"{v} {n}" for v, n in rows.verdict.value_counts().items())))
    display(Image(filename=str(fig / first), width=640))
    shown += 1
print(f"{shown} section figures shown")

# %% [markdown]
# Every run under `results/`, side by side with the paper:

# %%
side = compare(res.parent)
display(Markdown(markdown(side)))
