"""One look for every figure: the headless backend, the house style, and each policy's label, colour and
marker (a policy looks the same in every figure of `repro.paper` and `repro.validation`).

A floor under both: `repro.paper.figures` (the paper's figures and result tables) re-exports these names.
"""

from __future__ import annotations

import zlib

import matplotlib

from repro.routing.policies import PAPER_POLICIES

matplotlib.use("Agg")  # before pyplot; headless and deterministic

import matplotlib.pyplot as plt  # noqa: E402  (pyplot only after the backend is set)

__all__ = ["DPI", "FALLBACK_COLORS", "POLICY_COLORS", "POLICY_LABELS", "POLICY_MARKERS", "POLICY_ORDER", "plt",
           "policy_color", "policy_label", "policy_marker", "set_style"]

DPI = 150
POLICY_LABELS = {
    "round_robin": "round-robin",
    "least_loaded": "least-loaded (JSQ)",
    "length_threshold": "length threshold",
    "marginal_cost": "learned (marginal cost)",
    "marginal_cost+sampling": "learned + power-of-2 sampling",
    "marginal_cost+guard": "learned + admission guard",
    "marginal_cost_plus": "ours: learned + sampling + guard",
    "marginal_cost_prefill_anchor": "learned, ledger from the prefill's answer (prior reading)",
    "marginal_cost_backlog_tpot": "learned, TPOT from the backlog (prior reading)",
    "marginal_cost_prior": "learned, both prior readings",
    "power_of_two": "power of two (vllm-router, SGLang)",
    "dynamo_kv": "Dynamo KV router",
    "llmd_weighted": "llm-d weighted scorer",
    "sglang_least_load": "SGLang least-load",
    "vllm-router:round_robin": "vllm-router round-robin",
    "vllm-router:power_of_two": "vllm-router power of two",
    "vllm-router:cache_aware": "vllm-router cache-aware",
}
POLICY_ORDER = list(PAPER_POLICIES)
POLICY_COLORS: dict[str, str] = {
    # the paper's four: seaborn's colour-blind palette in the paper's order
    "round_robin": "#0173B2",  # blue
    "least_loaded": "#DE8F05",  # orange
    "length_threshold": "#029E73",  # green
    "marginal_cost": "#D55E00",  # vermilion
    # the learned router's switches and ours (notebook 13): its warm relatives
    "marginal_cost+sampling": "#CC78BC",  # lilac
    "marginal_cost+guard": "#CA9161",  # tan
    "marginal_cost_plus": "#882255",  # wine
    "marginal_cost_batching": "#6A3D9A",  # purple: our batching variant of the scorer (notebook 14)
    # the paper's scorer under its prior readings (notebook 14): lighter and darker vermilions
    "marginal_cost_prefill_anchor": "#F4A582",
    "marginal_cost_backlog_tpot": "#B2182B",
    "marginal_cost_prior": "#67001F",
    # production routers restated (notebook 13): cool hues
    "power_of_two": "#56B4E9",  # sky blue
    "dynamo_kv": "#332288",  # indigo
    "llmd_weighted": "#44AA99",  # teal
    "sglang_least_load": "#999933",  # olive
    # vllm-router itself in front of a live cluster (notebook 13): greys and sand
    "vllm-router:round_robin": "#949494",
    "vllm-router:power_of_two": "#5C5C5C",
    "vllm-router:cache_aware": "#DDCC77",
}
"""Policy (or variant) name -> its colour in every figure."""
FALLBACK_COLORS = ("#CC6677", "#117733", "#AA4499", "#6699CC", "#661100", "#E7B800", "#88CCEE", "#4B0092")
"""Colours of names `POLICY_COLORS` does not know (a user's policy), picked by a stable hash of the name."""
POLICY_MARKERS: dict[str, str] = {
    "round_robin": "o", "least_loaded": "v", "length_threshold": "^", "marginal_cost": "s",
    "marginal_cost+sampling": "<", "marginal_cost+guard": ">", "marginal_cost_plus": "P",
    "power_of_two": "X", "dynamo_kv": "h", "llmd_weighted": "p", "sglang_least_load": "*",
}
"""Policy name -> its marker in line plots (never ``D``: that is the paper's; others: ``o``)."""
def set_style() -> None:
    """The house style: seaborn whitegrid, colour-blind palette, fixed sizes and fonts."""
    import seaborn as sns

    sns.set_theme(context="paper", style="whitegrid", palette="colorblind", font="DejaVu Sans")
    matplotlib.rcParams.update({
        "figure.dpi": DPI,
        "savefig.dpi": DPI,
        "figure.figsize": (6.4, 3.8),
        "axes.titlesize": 10,
        "axes.labelsize": 9,
        "legend.fontsize": 8,
        "svg.hashsalt": "repro",
        "pdf.compression": 6,
        "path.simplify": True,
    })


def policy_label(name: str) -> str:
    """The display name of a policy (or variant) in figures; unknown names as they are."""
    return POLICY_LABELS.get(name, name)


def policy_color(name: str) -> str:
    """The colour of a policy (or variant) in every figure: `POLICY_COLORS`, else one of
    `FALLBACK_COLORS` chosen by a stable hash of the name (the same in every run and figure)."""
    if name in POLICY_COLORS:
        return POLICY_COLORS[name]
    return FALLBACK_COLORS[zlib.crc32(str(name).encode("utf-8")) % len(FALLBACK_COLORS)]


def policy_marker(name: str) -> str:
    """The marker of a policy in line plots (`POLICY_MARKERS`; ``o`` for others)."""
    return POLICY_MARKERS.get(name, "o")
