"""§V-D, notebook 07: decode widths 3, 4 and 6 (2 prefill each) at the 2p4d operating point.

The paper: at width 3 the learned router ties JSQ (0.816 vs 0.822), at width 4 it leads (0.864
vs 0.835), at width 6 the policies reconverge (0.858 vs 0.860 for round-robin). Goodput a fraction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from repro.errors import ConfigError
from repro.paper.grids import PAPER_POLICY_RANK, paper_value, policy_summary

if TYPE_CHECKING:
    from repro.paper.headline import HeadlineRow
    from repro.paper.section import Section

WIDTHS = (3, 4, 6)
WIDTH_KEYS = {(3, "marginal_cost"): "width3_mc", (3, "least_loaded"): "width3_ll",
              (4, "marginal_cost"): "width4_mc", (4, "least_loaded"): "width4_ll",
              (6, "marginal_cost"): "width6_mc", (6, "round_robin"): "width6_rr"}


def width_topologies(widths: Sequence[int] = WIDTHS, prefill: int = 2) -> list[str]:
    """Pool shapes of ``prefill`` prefill and each of ``widths`` decode instances (``2p3d`` ...);
    a width outside [1, 64] is a `ConfigError`."""
    bad = [w for w in widths if isinstance(w, bool) or not isinstance(w, int) or not 1 <= w <= 64]
    if bad or not widths:
        raise ConfigError(f"parameter 'widths' = {list(widths)!r} must be a non-empty list of integers in [1, 64]")
    return [f"{prefill}p{w}d" for w in widths]


def width_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per (decode width, policy): goodput over seeds, the paper's value where stated, and the learned
    router's margin over the best baseline at that width."""
    runs = runs.assign(decode_width=[int(t.split("p")[1].rstrip("d")) for t in runs.topology])
    tab = policy_summary(runs, ("decode_width", "policy"))
    tab["paper_goodput"] = [paper_value(WIDTH_KEYS[(w, p)]) if (w, p) in WIDTH_KEYS else np.nan
                            for w, p in zip(tab.decode_width, tab.policy, strict=True)]
    margins = {}
    for w, g in tab.groupby("decode_width"):
        mc = g[g.policy == "marginal_cost"].goodput
        base = g[g.policy != "marginal_cost"].goodput
        margins[w] = float(mc.iloc[0] - base.max()) if len(mc) and len(base) else np.nan
    tab["mc_margin_over_best_baseline"] = tab.decode_width.map(margins)
    return tab.sort_values(["decode_width", "policy"],
                           key=lambda s: s.map(PAPER_POLICY_RANK) if s.name == "policy" else s).reset_index(drop=True)


WIDTH_CLAIMS = {3: (0, "width3_mc", "width3_ll", "ties JSQ"), 4: (1, "width4_mc", "width4_ll", "leads outright"),
                6: (0, "width6_mc", "width6_rr", "policies reconverge")}
"""Decode width -> (the paper's side of the learned router's margin: +1 leads, 0 a tie; its two
reference keys; the paper's words)."""


def width_headline(tab: pd.DataFrame, runs: pd.DataFrame, ctx: Section) -> list[HeadlineRow]:
    """Headline rows, each with its 95 % interval: the stated (width, policy) goodputs, and per width the
    learned router's margin over the best baseline there, paired by trace (an ordering: a lead or a tie)."""
    runs = runs.assign(decode_width=[int(t.split("p")[1].rstrip("d")) for t in runs.topology])

    def of(width: int, policy: str) -> pd.DataFrame:
        return runs[(runs.decode_width == width) & (runs.policy == policy)]

    t = tab.set_index(["decode_width", "policy"])
    out: list[HeadlineRow] = [{"key": k, "ours": ctx.goodput(of(*wp)), "runs": ctx.run_ids(of(*wp))}
                                 for wp, k in WIDTH_KEYS.items() if wp in t.index]
    for w, g in tab.groupby("decode_width"):
        others = [p for p in g.policy if p != "marginal_cost"]
        if "marginal_cost" not in set(g.policy) or not others:
            continue
        claim, k_mc, k_other, words = WIDTH_CLAIMS.get(int(w), (None, "", "", ""))
        mc = of(int(w), "marginal_cost")
        rivals = {p: of(int(w), p) for p in others}
        est, best = ctx.least_difference(mc, rivals)
        out.append({"key": f"width{w}_mc_margin", "ours": est, "kind": "ordering",
                    "claim": claim, "paper": paper_value(k_mc) - paper_value(k_other) if k_mc else np.nan,
                    "unit": "fraction", "runs": ctx.run_ids(mc, *rivals.values()),
                    "meaning": f"learned router minus the best baseline (now {best}) at decode width {w}, paired by "
                               f"trace, selection-aware" + (f"; the paper: {words}" if words else "")})
    return out
