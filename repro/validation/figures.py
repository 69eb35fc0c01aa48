"""The validation's two figures: each request's simulated latency against its measured one, and the
errors against load with the budget drawn in."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from repro.figure_style import plt, policy_label, set_style

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def predicted_vs_measured(pairs: pd.DataFrame) -> Figure:
    """Per request, simulated (y) against measured (x) TTFT, TPOT and end-to-end latency (ms, log axes),
    coloured by load level, with the diagonal (a perfect twin) and +-10 % around it."""
    set_style()
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2))
    levels = sorted(pairs["fraction"].unique())
    cmap = plt.get_cmap("viridis")
    for ax, (metric, title) in zip(axes, (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "end to end")),
                                   strict=True):
        x = pairs[f"live_{metric}"].to_numpy(float) * 1e3
        y = pairs[f"sim_{metric}"].to_numpy(float) * 1e3
        ok = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
        for k, level in enumerate(levels):
            sel = ok & (pairs["fraction"].to_numpy() == level)
            ax.scatter(x[sel], y[sel], s=5, alpha=0.5, color=cmap(k / max(len(levels) - 1, 1)),
                       label=f"{level:g} x sat.")
        if ok.any():
            lo, hi = float(min(x[ok].min(), y[ok].min())), float(max(x[ok].max(), y[ok].max()))
            line = np.array([lo, hi])
            ax.plot(line, line, color="black", lw=1)
            ax.fill_between(line, line * 0.9, line * 1.1, color="grey", alpha=0.2, lw=0)
            ax.set_xscale("log")
            ax.set_yscale("log")
        ax.set_xlabel(f"measured {title} (ms)")
        ax.set_ylabel(f"simulated {title} (ms)")
        ax.set_title(title)
    axes[0].legend(fontsize=8, markerscale=3)
    fig.suptitle("Each request: the calibrated simulator vs the cluster (grey: +-10 %)")
    fig.tight_layout()
    return fig


def error_vs_load(table: pd.DataFrame, budget: dict[str, Any]) -> Figure:
    """Per policy, the median per-request error of TTFT and TPOT (%, with 95 % t intervals over traces) and
    the goodput difference (sim - live, with its interval) against the load level, budgets dashed."""
    set_style()
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    groups = table.groupby(["variant", "policy"], sort=False) if "variant" in table.columns else \
        ((("", p), g) for p, g in table.groupby("policy", sort=False))
    for (variant, policy), g in groups:
        g = g.sort_values("fraction")
        label = policy_label(str(policy)) + (f" ({variant})" if variant else "")
        x = g["fraction"].to_numpy(float)
        for ax, name in zip(axes[:2], ("ttft", "tpot"), strict=True):
            v = 100 * g[f"{name}_err"].to_numpy(float)
            lo = 100 * g[f"{name}_err_lo"].to_numpy(float)
            hi = 100 * g[f"{name}_err_hi"].to_numpy(float)
            yerr = np.vstack([np.nan_to_num(v - lo), np.nan_to_num(hi - v)])
            ax.errorbar(x, v, yerr=yerr, marker="o", capsize=3, label=label)
        v = g["goodput_diff"].to_numpy(float)
        yerr = np.vstack([np.nan_to_num(v - g["goodput_diff_lo"].to_numpy(float)),
                          np.nan_to_num(g["goodput_diff_hi"].to_numpy(float) - v)])
        axes[2].errorbar(x, v, yerr=yerr, marker="o", capsize=3, label=label)
    for ax, name, limit in ((axes[0], "TTFT", 100 * budget["ttft"]), (axes[1], "TPOT", 100 * budget["tpot"])):
        ax.axhline(limit, ls="--", color="grey")
        ax.set_ylabel(f"median |{name} error| (%)")
        ax.set_ylim(bottom=0)
    axes[2].axhline(budget["goodput"], ls="--", color="grey")
    axes[2].axhline(-budget["goodput"], ls="--", color="grey")
    axes[2].axhline(0, color="black", lw=0.8)
    axes[2].set_ylabel("goodput, sim - live")
    for ax in axes:
        ax.set_xlabel("load (x saturation)")
    axes[0].legend(fontsize=8)
    fig.suptitle("Simulator error against load (dashed: the budget)")
    fig.tight_layout()
    return fig
