"""Notebook 13 (beyond the paper): repro.paper.sections.beyond."""

import pandas as pd
import pytest

from repro.paper.sections import beyond as nb


def test_frontier_and_goals(section):
    ctx = section(seeds=(1,), n_requests=200)
    items = nb.frontier_specs(ctx, 16.0, shapes=("1p2d", "2p4d"),
                              policies=("round_robin", "marginal_cost", "marginal_cost+guard", nb.OURS))
    guard = [s for lab, s in items if lab["variant"] == "marginal_cost+guard"]
    assert guard[0].policy == "marginal_cost" and guard[0].policy_options["admission_guard"] is True
    assert {lab["gpus"] for lab, _ in items} == {3, 6}
    frontier_runs = ctx.run(items)
    frontier = nb.mean_by(frontier_runs, "topology")
    wl_items = nb.workload_specs(ctx, {"mixed": 16.0},
                                 policies=("round_robin", "marginal_cost", "power_of_two", nb.OURS))
    workload_runs = ctx.run(wl_items)
    workloads = nb.mean_by(workload_runs, "workload")
    assert set(workloads.kind) == {"paper", "production", "ours"}
    goals = nb.beyond_goals(frontier, workloads)
    assert len(goals) == 3
    f = frontier.set_index(["topology", "variant"]).goodput
    scarcity = goals.set_index("goal").loc["1p2d scarcity: ours - round_robin"]
    assert scarcity.value == pytest.approx(f["1p2d", nb.OURS] - f["1p2d", "round_robin"])
    head = {r["key"]: r for r in nb.beyond_headline(frontier, workloads, goals, frontier_runs, workload_runs, ctx)}
    assert {"beyond_plus_1p2d", "beyond_goal_worst_gap", "beyond_goal_mixed_lead"} <= set(head)
    assert not {"fig4_mc_1p2d", "fig4_rr_1p2d"} & set(head)  # notebook 08's quantities, not repeated here
    gap = head["beyond_goal_scarcity_gap"]["ours"]  # the goal's value, now with a paired interval
    assert gap.value == pytest.approx(scarcity.value) and gap.requests == 200
    worst = goals.set_index("goal").loc["never more than 0.03 below the best baseline"]
    wg = head["beyond_goal_worst_gap"]["ours"]
    assert wg.value == pytest.approx(worst.value) and wg.has_interval and wg.requests == 200
    assert worst["where"].split(" ", 1)[1] in head["beyond_goal_worst_gap"]["meaning"]
    # a frontier without our router (e.g. -p 'policies=["round_robin"]') has no goals to check there
    without = nb.beyond_goals(frontier[frontier.variant != nb.OURS], workloads[workloads.variant != nb.OURS])
    assert without.empty
    assert not any(r["key"].startswith("beyond_plus") for r in nb.beyond_headline(
        frontier[frontier.variant != nb.OURS], workloads[workloads.variant != nb.OURS], without,
        frontier_runs, workload_runs, ctx))


def test_vllm_router_skips_with_a_note_in_sim(section):
    runs, note = nb.vllm_router_runs(section(seeds=(1,), n_requests=10), {"mixed": 16.0})
    assert runs.empty and "emulated" in note


def _goodput(index, table):
    return pd.DataFrame([{index: k, "variant": v, "goodput": g} for k, row in table.items() for v, g in row.items()])


def test_goals_by_hand():
    """Hand-made means: ours is 0.01 below round robin at 1p2d (within the 0.02 allowed), 0.01 below
    power_of_two on mixed (the lead goal fails), and 0.06 below power_of_two at 1p2d (the worst gap)."""
    frontier = _goodput("topology", {"1p2d": {"round_robin": 0.70, nb.OURS: 0.69, "power_of_two": 0.75},
                                     "2p4d": {"round_robin": 0.80, nb.OURS: 0.85}})
    workloads = _goodput("workload", {"mixed": {"round_robin": 0.78, "marginal_cost": 0.80, "power_of_two": 0.83,
                                                nb.OURS: 0.82}})
    goals = nb.beyond_goals(frontier, workloads).set_index("goal")
    assert goals.value.to_dict() == {"1p2d scarcity: ours - round_robin": pytest.approx(-0.01),
                                     "mixed 2p4d: ours - best other policy": pytest.approx(-0.01),
                                     "never more than 0.03 below the best baseline": pytest.approx(-0.06)}
    assert goals.met.tolist() == [True, False, False]
    assert goals.loc["never more than 0.03 below the best baseline", "where"] == "topology 1p2d"
    # marginal_cost counts as "another policy" for the lead, not as a baseline for the worst gap
    workloads.loc[workloads.variant == "marginal_cost", "goodput"] = 0.95
    frontier.loc[frontier.variant == "power_of_two", "goodput"] = 0.70
    goals = nb.beyond_goals(frontier, workloads).set_index("goal")
    assert goals.loc["mixed 2p4d: ours - best other policy", "value"] == pytest.approx(0.82 - 0.95)
    assert goals.loc["never more than 0.03 below the best baseline", "value"] == pytest.approx(-0.01)
    assert goals.loc["never more than 0.03 below the best baseline", "met"]
