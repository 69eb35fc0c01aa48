"""§V-D, notebook 07: decode widths 3, 4 and 6 (2 prefill each) at the 2p4d operating point.

The paper: at width 3 the learned router ties JSQ (0.816 vs 0.822), at width 4 it leads (0.864
vs 0.835), at width 6 the policies reconverge (0.858 vs 0.860 for round-robin). Goodput a fraction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from repro.errors import ConfigError
from repro.paper.grids import PAPER_POLICY_RANK, paper_value, policy_summary

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


def width_headline(tab: pd.DataFrame) -> list[dict[str, Any]]:
    """Headline rows: the stated (width, policy) goodputs and the learned router's margin per width."""
    t = tab.set_index(["decode_width", "policy"])
    out = [{"key": k, "ours": t.loc[wp, "goodput"]} for wp, k in WIDTH_KEYS.items() if wp in t.index]
    margins = tab.drop_duplicates("decode_width").set_index("decode_width")["mc_margin_over_best_baseline"]
    paper_margin = {3: paper_value("width3_mc") - paper_value("width3_ll"),
                    4: paper_value("width4_mc") - paper_value("width4_ll"),
                    6: paper_value("width6_mc") - paper_value("width6_rr")}
    for w, m in margins.items():
        out.append({"key": f"width{w}_mc_margin", "ours": m, "paper": paper_margin.get(int(w), np.nan),
                    "unit": "fraction"})
    return out
