"""Notebook 13 (beyond the paper): repro.paper.sections.beyond."""

from repro.paper.sections import beyond as nb


def test_frontier_and_goals(section):
    ctx = section(seeds=(1,), n_requests=200)
    items = nb.frontier_specs(ctx, 16.0, shapes=("1p2d", "2p4d"),
                              policies=("round_robin", "marginal_cost", "marginal_cost+guard", nb.OURS))
    guard = [s for lab, s in items if lab["variant"] == "marginal_cost+guard"]
    assert guard[0].policy == "marginal_cost" and guard[0].policy_options["admission_guard"] is True
    assert {lab["gpus"] for lab, _ in items} == {3, 6}
    frontier = nb.mean_by(ctx.run(items), "topology")
    wl_items = nb.workload_specs(ctx, {"mixed": 16.0},
                                 policies=("round_robin", "marginal_cost", "power_of_two", nb.OURS))
    workloads = nb.mean_by(ctx.run(wl_items), "workload")
    assert set(workloads.kind) == {"paper", "production", "ours"}
    goals = nb.beyond_goals(frontier, workloads)
    assert len(goals) == 3 and goals.met.dtype == bool
    keys = {r["key"] for r in nb.beyond_headline(frontier, workloads, goals)}
    assert {"fig4_mc_1p2d", "fig4_rr_1p2d", "beyond_plus_1p2d", "beyond_goal_worst_gap"} <= keys
    # a frontier without our router (e.g. -p 'policies=["round_robin"]') has no goals to check there
    without = nb.beyond_goals(frontier[frontier.variant != nb.OURS], workloads[workloads.variant != nb.OURS])
    assert without.empty
    assert not any(r["key"].startswith("beyond_plus") for r in nb.beyond_headline(
        frontier[frontier.variant != nb.OURS], workloads[workloads.variant != nb.OURS], without))


def test_vllm_router_skips_with_a_note_in_sim(section):
    runs, note = nb.vllm_router_runs(section(seeds=(1,), n_requests=10), {"mixed": 16.0})
    assert runs.empty and "emulated" in note
