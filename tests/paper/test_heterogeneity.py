"""Notebook 06 (§V-C, Fig. 3): repro.paper.sections.heterogeneity."""

import pandas as pd
import pytest

from repro.experiment.misses import BOTTLENECKS, MISS_CAUSES, NUMBERS
from repro.paper.sections import heterogeneity as nb
from repro.routing.policies import PAPER_POLICIES


def test_heterogeneity_table_and_claims(fake_runs, section):
    runs = fake_runs(workload=["chat", "reasoning", "documents", "mixed"], policy=list(PAPER_POLICIES), seed=[1, 2])
    runs.loc[(runs.workload == "documents") & (runs.policy == "round_robin"), "goodput"] = 0.1
    tab = nb.heterogeneity_table(runs)
    assert len(tab) == 16 and tab.groupby("workload")["rank"].min().eq(1).all()
    t = tab.set_index(["policy", "workload"])
    assert t.loc[("length_threshold", "chat"), "paper_goodput"] == pytest.approx(0.855)
    assert t.loc[("round_robin", "documents"), "paper_ttft_p99_s"] == pytest.approx(1.1)
    ctx = section(seeds=(1, 2))
    head = {r["key"]: r for r in nb.heterogeneity_headline(tab, runs, ctx)}
    # documents: round-robin at 0.1 on both traces, the weakest load-aware policy far above: reproduced side
    docs = head["fig3_worst_loadaware_minus_rr_documents"]
    low = runs[(runs.workload == "documents") & (runs.policy != "round_robin")].groupby("policy").goodput.mean().min()
    assert docs["ours"].value == pytest.approx(low - 0.1) and "min over 3 rivals" in docs["ours"].method
    assert docs["ours"].lo < docs["ours"].value < docs["ours"].hi
    assert head["fig3_rr_documents"]["ours"].value == pytest.approx(0.1)
    chat = head["fig3_lt_minus_mc_chat"]
    assert chat["paper"] == pytest.approx(0.855 - 0.760) and chat["kind"] == "ordering"
    # live quick runs two policies per workload: no ordering is claimed from a partial grid
    two = runs[runs.policy.isin(["round_robin", "marginal_cost"])]
    head = {r["key"]: r for r in nb.heterogeneity_headline(nb.heterogeneity_table(two), two, ctx)}
    assert "fig3_rr_documents" in head
    assert not any(r.get("kind") == "ordering" for r in head.values())


def test_misses_table_decomposes_the_grids_journals(section):
    """Each run's journal decomposed against the SLO targets its goodput uses: the misses by cause and goodput sum
    to 1 and the goodput is the grid's own (`Section.run`)."""
    from repro.paper.grids import specs_grid

    ctx = section(seeds=(1,), n_requests=300)
    specs = specs_grid(ctx, workloads=["documents"], rates=11.3, policies=["round_robin", "least_loaded"])
    tab = nb.misses_table(ctx, specs)
    runs = ctx.run(specs)
    assert list(tab.policy) == ["round_robin", "least_loaded"] and (tab.seeds == 1).all()
    assert tab.goodput.to_list() == pytest.approx(runs.goodput.to_list())
    assert (tab.goodput + tab[list(MISS_CAUSES)].sum(axis=1)).to_list() == pytest.approx([1.0, 1.0])
    assert set(tab.bottleneck) <= set(BOTTLENECKS) and set(nb.MISSES_SHOWN) <= set(tab.columns)
    assert nb.misses_reading(tab).startswith("documents: ")


def test_misses_reading_says_what_the_table_shows():
    base = {k: 0.0 for k in NUMBERS} | {"requests": 2000.0, "seeds": 3}
    rows = [{**base, "workload": "documents", "policy": p, "goodput": 0.8, "ttft_miss_tight": 0.2,
             "ttft_miss_prefill": 0.2, "bottleneck": "prefill"} for p in ("least_loaded", "length_threshold")]
    rows.append({**base, "workload": "documents", "policy": "round_robin", "goodput": 0.7, "ttft_miss_tight": 0.3,
                 "ttft_miss_prefill": 0.3, "prefill_time_p90_s": 0.4, "bottleneck": "prefill"})
    rows += [{**base, "workload": "chat", "policy": "round_robin", "goodput": 0.9, "ttft_miss_tight": 0.06,
              "tpot_miss": 0.04, "ttft_miss_decode": 0.06, "preempted": 0.01, "bottleneck": "decode"},
             {**base, "workload": "chat", "policy": "marginal_cost", "goodput": 1.0, "bottleneck": "none"},
             {**base, "workload": "chat", "policy": "least_loaded", "goodput": 0.95, "ttft_miss_tight": 0.05,
              "ttft_miss_prefill": 0.05, "bottleneck": "prefill"}]
    lines = nb.misses_reading(pd.DataFrame(rows)).splitlines()
    assert lines[0] == ("documents: 20.0-30.0 % of requests missed, all tight-class TTFT misses; bottleneck "
                        "prefill under every policy; nothing preempted; least_loaded and length_threshold give "
                        "identical numbers")
    assert lines[1] == ("chat: 0.0-10.0 % of requests missed: 73 % tight-class TTFT misses, 27 % TPOT misses; "
                        "bottleneck decode (round_robin), none (marginal_cost), prefill (least_loaded); up to 1.0 % "
                        "preempted (round_robin); round_robin, marginal_cost and least_loaded place prefill alike "
                        "(identical prefill legs) but not decode")
