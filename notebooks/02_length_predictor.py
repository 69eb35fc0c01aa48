# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: tags,title,-all
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
# # 02 · Output-length predictor (§III-C)
#
# The predictor supplies the request's estimated output length and is deliberately simple (hashed
# prompt-head features + prompt length, ridge regression, trained on ShareGPT). Held-out accuracy
# against a constant (training median) baseline. The paper states no accuracy: its point (§V-H) is
# that a magnitude estimate suffices.

# %% tags=["parameters"]
backend: str = "sim"  # sim | emulated | vllm (the predictor is backend-independent)
scale: str = "quick"  # quick | full (full plots every held-out point)
seeds: list = [1, 2, 3]  # plotting subsample seed (the first is used)
cluster: str = ""  # unused here (the predictor needs no cluster)
results_dir: str = ""  # tidy CSVs; empty means results/<backend>-<scale> (relative: to the repo root)
figures_dir: str = ""  # PNG + PDF figures; empty means figures/<backend>-<scale>

# %%
import matplotlib.pyplot as plt

from repro.paper.section import Section
from repro.paper.sections import length_predictor as nb

ctx = Section.setup(notebook="02_length_predictor", uses_cluster=False,  # the predictor needs no cluster
                    backend=backend, scale=scale, seeds=seeds, results_dir=results_dir, figures_dir=figures_dir)
table, points = nb.predictor_accuracy()
ctx.write_results(table, "02_predictor_accuracy")
table

# %% tags=["golden", "hide-input"]
# checked: the values printed here are compared with notebooks/expected/02_length_predictor-1.txt in the test run
with ctx.expected_output(1):
    pooled = table[table.group == "families_pooled"].set_index("model")
    for model, r in pooled.iterrows():
        print(f"{model:>24}: MAE {r.mae_tokens:.1f} tokens, median |rel err| {r.median_abs_rel_error:.3f}, "
              f"Spearman {r.spearman:.3f}")

# %%
shown = ctx.write_results(nb.plotted_points(points, ctx.scale, ctx.seeds[0]), "02_predicted_vs_true")
fig, axes = plt.subplots(1, 4, figsize=(12.0, 3.3), sharex=True, sharey=True)
for ax, g in zip(axes, nb.PLOT_GROUPS, strict=True):
    sub = shown[shown.group == g]
    ax.scatter(sub.true_tokens.clip(lower=1), sub.predicted_tokens.clip(lower=1), s=3, alpha=0.3, rasterized=True)
    ax.plot([1, 1e4], [1, 1e4], color="black", lw=0.8, ls="--", label="perfect")
    ax.set_xscale("log")
    ax.set_yscale("log")
    sp = table[(table.group == g) & (table.model == "learned")].spearman.iloc[0]
    ax.set_title(f"{g} (Spearman {sp:.2f})")
    ax.set_xlabel("true output (tokens)")
axes[0].set_ylabel("predicted output (tokens)")
axes[0].legend(loc="upper left")
fig.suptitle("§III-C: output-length predictor on held-out requests (no figure in the paper)", y=1.02)
fig.tight_layout()
ctx.save(fig, "02_predicted_vs_true")

# %%
ctx.write_headline(nb.predictor_headline(table, points))

# %%
ctx.findings("the length predictor (§IV-A)")
