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
results_dir: str = "results"  # tidy CSVs (relative paths are relative to the repo root)
figures_dir: str = "figures"  # PNG + PDF figures (relative paths are relative to the repo root)

# %%
import matplotlib.pyplot as plt
import numpy as np

from repro.paper import figures as F
from repro.paper import section as S

S.check_common(backend, scale, seeds)
F.set_style()
table, points = S.predictor_accuracy()
F.write_results(table, "02_predictor_accuracy", results_dir)
table

# %%
# checked: the values printed here are compared with notebooks/expected/02_length_predictor-1.txt in the test run
from repro.paper.runner import expected_output  # noqa: E402

with expected_output("02_length_predictor", 1):
    pooled = table[table.group == "families_pooled"].set_index("model")
    for model, r in pooled.iterrows():
        print(f"{model:>24}: MAE {r.mae_tokens:.1f} tokens, median |rel err| {r.median_abs_rel_error:.3f}, Spearman {r.spearman:.3f}")

# %%
groups = ["sharegpt", "chat", "reasoning", "documents"]
per_group = 1500 if scale == "quick" else None
rng = np.random.default_rng(seeds[0])
shown = []
for g in groups:
    sub = points[points.group == g]
    if per_group is not None and len(sub) > per_group:
        sub = sub.iloc[np.sort(rng.choice(len(sub), per_group, replace=False))]
    shown.append(sub)
import pandas as pd  # noqa: E402

shown = pd.concat(shown, ignore_index=True)
F.write_results(shown, "02_predicted_vs_true", results_dir)
fig, axes = plt.subplots(1, 4, figsize=(12.0, 3.3), sharex=True, sharey=True)
for ax, g in zip(axes, groups):
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
F.save(fig, "02_predicted_vs_true", figures_dir)

# %%
learned = pooled.loc["learned"]
const = pooled.loc["constant (train median)"]
F.write_headline([
    {"key": "predictor_spearman_pooled", "ours": learned.spearman, "unit": "rho"},
    {"key": "predictor_mae_pooled", "ours": learned.mae_tokens, "unit": "tokens"},
    {"key": "predictor_mae_constant_pooled", "ours": const.mae_tokens, "unit": "tokens"},
], "02_length_predictor", results_dir)
