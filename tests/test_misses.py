"""The miss decomposition (`repro.experiment.misses`): exact on a hand-made journal, its aggregation over
traces, and the bottleneck rule."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from repro.experiment.journal import frame
from repro.experiment.metrics import good_mask, summarize
from repro.experiment.misses import (
    ATTRIBUTION,
    MISS_CAUSES,
    NUMBERS,
    bottleneck,
    decompose,
    decomposition_table,
)
from repro.journal_schema import empty_row
from repro.routing.cost_model import CostModel

# unloaded prefill 0.1 s + 0.1 ms per prompt token (0.11 s at 100 tokens), transfer 10 ms; TTFT target 0.5 s tight,
# 1.5 s loose; TPOT 50 ms tight, 150 ms loose
CM = CostModel(name="test", tau_pre_base_s=0.1, tau_pre_per_token_s=1e-4, tau_dec_s=0.02, dec_concurrency_slope=0.0,
               kv_bytes_per_token=0.0, xfer_latency_s=0.01, xfer_bandwidth_bytes_per_s=1e9, ttft_tight_s=0.5,
               tpot_tight_s=0.05, loose_factor=3.0)

# (case, class, status, prompt, arrival, prefill start, prefill end, decode started, first token, tpot, preemptions)
REQUESTS = [
    ("ok", "tight", "ok", 100, 0.0, 0.0, 0.11, 0.13, 0.16, 0.02, 0),
    # held 0.3 s before the prefill was sent, 0.4 s beyond its unloaded prefill in all: a tight TTFT miss (0.56 s)
    ("tight TTFT miss waiting in prefill", "tight", "ok", 100, 1.0, 1.3, 1.51, 1.53, 1.56, 0.02, 0),
    ("loose TPOT miss", "loose", "ok", 100, 2.0, 2.0, 2.11, 2.13, 2.16, 0.2, 0),
    ("ok though preempted twice", "loose", "ok", 100, 3.0, 3.0, 3.11, 3.13, 3.16, 0.03, 2),
    # 1.6 s between its prefill's end and joining a decode batch: a loose TTFT miss (1.74 s) held by the decode pool
    ("loose TTFT miss waiting for decode", "loose", "ok", 100, 4.0, 4.0, 4.11, 5.71, 5.74, 0.02, 0),
    # a 5000-token prompt's unloaded prefill (0.6 s) alone is over the tight target: the service time's miss
    ("tight TTFT miss by its service time", "tight", "ok", 5000, 5.0, 5.0, 5.6, 5.62, 5.65, 0.02, 0),
    ("rejected", "tight", "rejected", 100, 6.0, None, None, None, None, None, 0),
]


def _journal(requests=REQUESTS) -> pd.DataFrame:
    rows = []
    for i, (_, cls, status, prompt, a, ps, pe, ds, ft, tpot, pre) in enumerate(requests):
        r = empty_row()
        r.update(request_id=f"r{i}", slo_class=cls, status=status, prompt_tokens=prompt, output_tokens=100,
                 arrival_s=a, prefill_start_s=ps, prefill_end_s=pe, decode_start_s=pe, decode_started_s=ds,
                 first_token_s=ft, ttft_s=None if ft is None else ft - a, tpot_s=tpot, preemptions=pre,
                 generated_tokens=100 if status == "ok" else 0)
        rows.append(r)
    return frame(rows)


def test_decompose_a_hand_made_journal_exactly():
    j = _journal()
    d = decompose(j, CM)
    n = 7
    assert d["requests"] == n
    assert d["goodput"] == pytest.approx(2 / n) == summarize(j, CM.slo)["goodput"]
    assert d["goodput"] == pytest.approx(good_mask(j, CM.slo).mean())
    assert [d[k] for k in MISS_CAUSES] == pytest.approx([2 / n, 1 / n, 1 / n, 0.0, 1 / n])
    assert d["goodput"] + sum(d[k] for k in MISS_CAUSES) == pytest.approx(1.0)
    # legs over the six requests with stamps (the rejected one has none)
    assert d["prefill_wait_mean_s"] == pytest.approx(0.3 / 6)
    assert d["prefill_wait_p90_s"] == pytest.approx(float(np.percentile([0, 0.3, 0, 0, 0, 0], 90)))
    assert d["prefill_time_mean_s"] == pytest.approx((4 * 0.11 + 0.21 + 0.6) / 6)
    assert d["prefill_delay_mean_s"] == pytest.approx(0.4 / 6)  # beyond the unloaded prefill, from arrival
    assert d["decode_wait_mean_s"] == pytest.approx((5 * 0.02 + 1.6) / 6)
    assert d["decode_wait_p90_s"] == pytest.approx(float(np.percentile([0.02] * 5 + [1.6], 90)))
    assert d["preempted"] == pytest.approx(1 / n)
    # one TTFT miss each: the prefill pool's, the decode pool's, the service time's; they sum to the TTFT misses
    assert [d[k] for k in ATTRIBUTION] == pytest.approx([1 / n, 1 / n, 1 / n])
    assert sum(d[k] for k in ATTRIBUTION) == pytest.approx(d["ttft_miss_tight"] + d["ttft_miss_loose"]
                                                           + d["both_miss"])
    assert d["bottleneck"] == "prefill"  # a three-way tie goes to prefill
    # without the service miss and the decode miss, the prefill pool holds every TTFT miss
    d2 = decompose(_journal([r for r in REQUESTS if "service" not in r[0] and "decode" not in r[0]]), CM)
    assert d2["ttft_miss_prefill"] == pytest.approx(1 / 5) and d2["bottleneck"] == "prefill"


def test_a_ttft_and_tpot_miss_counts_once_as_both_and_unknown_preemptions_are_nan():
    reqs = [("both over", "tight", "ok", 100, 0.0, 0.0, 0.61, 0.63, 0.66, 0.06, -1), REQUESTS[0]]
    d = decompose(_journal(reqs), CM)
    assert [d[k] for k in MISS_CAUSES] == pytest.approx([0.0, 0.0, 0.0, 0.5, 0.0])
    assert d["ttft_miss_prefill"] == pytest.approx(0.5)
    assert np.isnan(d["preempted"])  # a live engine's -1: the backend cannot tell


def test_a_miss_both_pools_delay_alike_goes_to_prefill():
    exact = CostModel(name="exact", tau_pre_base_s=0.125, tau_pre_per_token_s=0.0, tau_dec_s=0.02,
                      dec_concurrency_slope=0.0, kv_bytes_per_token=0.0, xfer_latency_s=0.0625,
                      xfer_bandwidth_bytes_per_s=1e9, ttft_tight_s=0.5, tpot_tight_s=0.05)
    # 0.25 s beyond the unloaded prefill, 0.25 s beyond the unloaded transfer (binary-exact times)
    d = decompose(_journal([("tie", "tight", "ok", 100, 0.0, 0.0, 0.375, 0.6875, 0.75, 0.02, 0)]), exact)
    assert (d["ttft_miss_prefill"], d["ttft_miss_decode"], d["bottleneck"]) == (1.0, 0.0, "prefill")


def test_decompose_with_targets_alone_counts_whole_legs_as_waits():
    d = decompose(_journal(), CM.slo)
    assert [d[k] for k in MISS_CAUSES] == pytest.approx([2 / 7, 1 / 7, 1 / 7, 0.0, 1 / 7])
    assert d["ttft_miss_service"] == 0.0 and d["ttft_miss_prefill"] == pytest.approx(2 / 7)  # 0.6 s prefill: a wait
    assert d["prefill_delay_mean_s"] == pytest.approx((4 * 0.11 + 0.51 + 0.6) / 6)


@pytest.mark.parametrize(("shares", "expected"), [
    ((0.10, 0.02, 0.03), "prefill"),
    ((0.01, 0.05, 0.03), "decode"),
    ((0.01, 0.02, 0.04), "neither: service time"),
    ((0.02, 0.02, 0.01), "prefill"),  # ties: prefill, then decode
    ((0.0, 0.03, 0.03), "decode"),
    ((0.0, 0.0, 0.0), "none"),
    ((np.nan, np.nan, np.nan), "none"),
])
def test_bottleneck_rule(shares, expected):
    assert bottleneck(*shares) == expected


def test_decomposition_table_means_over_traces():
    one, two = decompose(_journal(), CM), decompose(_journal(REQUESTS[:4]), CM)
    rows = pd.DataFrame([{"workload": "documents", "policy": "round_robin", "seed": 1, **one},
                         {"workload": "documents", "policy": "round_robin", "seed": 2, **two},
                         {"workload": "documents", "policy": "least_loaded", "seed": 1, **one}])
    tab = decomposition_table(rows)
    assert list(tab.policy) == ["round_robin", "least_loaded"] and list(tab.seeds) == [2, 1]
    rr = tab.iloc[0]
    for k in NUMBERS:
        assert rr[k] == pytest.approx((one[k] + two[k]) / 2), k
    assert tab.iloc[1][list(NUMBERS)].to_numpy(float) == pytest.approx([one[k] for k in NUMBERS])
    # the bottleneck of the means, not of any one trace: prefill on trace 1, decode on trace 2, prefill on average
    shares = pd.DataFrame([{"workload": "w", "policy": "p", "seed": seed, **one,
                            **dict(zip(ATTRIBUTION, attributed, strict=True))}
                           for seed, attributed in ((1, (0.10, 0, 0)), (2, (0.02, 0.05, 0)))])
    assert bottleneck(*shares.iloc[1][list(ATTRIBUTION)]) == "decode"
    assert decomposition_table(shares).bottleneck.item() == "prefill"
    # a trace without a number (NaN) is skipped in the mean
    shares.loc[1, "preempted"] = np.nan
    assert decomposition_table(shares).preempted.item() == pytest.approx(one["preempted"])
