"""The goodput definition itself (`repro.experiment.metrics.good_mask`) at its boundaries."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from repro.experiment.journal import frame
from repro.experiment.metrics import good_mask, summarize
from repro.journal_schema import empty_row
from repro.routing.cost_model import SLOTargets

SLO = SLOTargets(ttft_tight_s=0.5, tpot_tight_s=0.05, loose_factor=3.0)
EPS = 1e-9

# (case, slo_class, status, ttft_s, tpot_s, output tokens, good?)
CASES = [
    ("tight at both limits", "tight", "ok", 0.5, 0.05, 100, True),
    ("tight TTFT just over", "tight", "ok", 0.5 + EPS, 0.05, 100, False),
    ("tight TPOT just over", "tight", "ok", 0.1, 0.05 + EPS, 100, False),
    ("tight, loose-sized TTFT", "tight", "ok", 1.0, 0.01, 100, False),
    ("loose at both limits", "loose", "ok", 1.5, 0.15, 100, True),
    ("loose TTFT just over", "loose", "ok", 1.5 + EPS, 0.01, 100, False),
    ("loose TPOT just over", "loose", "ok", 0.1, 0.15 + 1e-6, 100, False),
    ("1-token request, no TPOT, fast", "tight", "ok", 0.4, None, 1, True),
    ("1-token request, no TPOT, slow", "tight", "ok", 0.6, None, 1, False),
    ("failed with good timings", "tight", "failed", 0.1, 0.01, 100, False),
    ("rejected", "tight", "rejected", None, None, 100, False),
    ("ok but no TTFT recorded", "loose", "ok", None, 0.01, 100, False),
]


def _journal() -> pd.DataFrame:
    rows = []
    for i, (_, cls, status, ttft, tpot, out, _) in enumerate(CASES):
        r = empty_row()
        r.update(request_id=f"r{i}", slo_class=cls, status=status, ttft_s=ttft, tpot_s=tpot, output_tokens=out,
                 prompt_tokens=10, arrival_s=float(i))
        rows.append(r)
    return frame(rows)


@pytest.mark.parametrize("k", range(len(CASES)), ids=[c[0] for c in CASES])
def test_good_mask_at_the_slo_boundaries(k):
    mask = good_mask(_journal(), SLO)
    assert bool(mask.iloc[k]) is CASES[k][-1]


def test_goodput_counts_every_request_sent_in_the_denominator():
    j = _journal()
    want = sum(c[-1] for c in CASES)
    s = summarize(j, SLO)
    assert want == 3
    assert s["goodput"] == pytest.approx(want / len(CASES))
    # a request that was sent but never journaled cannot be summarized: the books must balance
    with pytest.raises(Exception, match="accounting"):
        summarize(j, SLO, sent=len(CASES) + 1)
    assert np.array_equal(good_mask(j, SLO).index, j.index)
