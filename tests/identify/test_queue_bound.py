"""The independent queue bound on the documents gap (`repro.identify.queue_bound`): its servers' timing against
exact cases and queueing formulas, the policies' order, the feasibility rule, the box against the project's
priors, determinism, and its independence of the simulator."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from repro.identify import queue_bound as qb


def _x(values: dict[str, float]) -> np.ndarray:
    return np.array([math.log10(values[d.name]) if d.log else values[d.name] for d in qb.BOX])


def _batch_means_se(w: np.ndarray, batches: int = 40) -> float:
    m = np.array([b.mean() for b in np.array_split(w, batches)])
    return float(m.std(ddof=1) / math.sqrt(batches))


# ---- exact timing --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("service", qb.SERVICES)
@pytest.mark.parametrize(("length", "budget_switch", "steps"), [(1000, 0.0, 1), (5000, 0.0, 3), (5000, 1.0, 1)])
def test_a_lone_requests_ttft_is_its_steps_tokens_path_and_decode_delay(service, length, budget_switch, steps):
    v = {**qb.DEFAULTS, "prefill_step_share": 0.4, "budget_8192": budget_switch, "d0_s": 0.03}
    base = qb.profile_numbers()["prefill_base_s"]
    kv = qb.profile_numbers()["kv_bytes_per_token"]
    alone, after, path = qb.request_times(v, np.array([float(length)]))
    arrival = np.array([1.5])
    if service == "serial":
        end, where = qb.serve(arrival, alone, "jsq_count", hold=path)
    else:
        end, where = qb.serve_batched(arrival, np.array([length]), "jsq_count", 0.4 * base, v["prefill_per_token_s"],
                                      qb.budget_of(v), hold=path)
    ttft = float(end[0] + after[0] - arrival[0])
    want = (steps * 0.4 * base + v["prefill_per_token_s"] * length + 0.6 * base + 0.03
            + length * kv / v["transfer_bandwidth_bytes_per_s"])
    assert ttft == pytest.approx(want, rel=1e-12)
    assert base == 0.0667 and kv == 36864  # the profile's stated numbers


def test_two_requests_wait_on_one_server_and_not_on_two():
    arrival, service = np.array([0.0, 0.1]), np.array([0.5, 0.5])
    for pol in qb.POLICIES:
        end, _ = qb.serve(arrival, service, pol, servers=1)
        assert end.tolist() == pytest.approx([0.5, 1.0])
        end, where = qb.serve(arrival, service, pol, servers=2)
        assert end.tolist() == pytest.approx([0.5, 0.6]) and sorted(where.tolist()) == [0, 1]


def test_batched_steps_take_the_queue_in_order_up_to_the_budget():
    arrival, length = np.array([0.0, 0.01, 0.02]), np.array([100, 100, 100])
    end, _ = qb.serve_batched(arrival, length, "jsq_count", 0.05, 1e-4, budget=1000, servers=1)
    assert end.tolist() == pytest.approx([0.06, 0.13, 0.13])  # the two that queued share one step
    end, _ = qb.serve_batched(arrival, length, "jsq_count", 0.05, 1e-4, budget=150, servers=1)
    assert end.tolist() == pytest.approx([0.06, 0.125, 0.18])  # the third chunked over two steps


# ---- queueing formulas ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("policy", qb.POLICIES)
def test_one_server_mean_wait_matches_pollaczek_khinchine(policy):
    rng = np.random.default_rng(7)
    n, lam = 200_000, 0.6
    arrival = np.cumsum(rng.exponential(1 / lam, n))
    for service, es2 in ((np.ones(n), 1.0), (rng.exponential(1.0, n), 2.0)):  # M/D/1, M/M/1
        end, _ = qb.serve(arrival, service, policy, servers=1)
        wait = end - service - arrival
        pk = lam * es2 / (2 * (1 - lam))
        assert abs(wait.mean() - pk) < 4 * _batch_means_se(wait), (wait.mean(), pk)


def test_join_the_least_work_on_two_servers_is_erlang_c():
    rng = np.random.default_rng(3)
    n, lam = 200_000, 1.5  # M/M/2, mu = 1: the least-work server is the central FCFS queue's
    arrival = np.cumsum(rng.exponential(1 / lam, n))
    service = rng.exponential(1.0, n)
    end, _ = qb.serve(arrival, service, "jsq_work", servers=2)
    wait = end - service - arrival
    rho = lam / 2
    erlang_c = 2 * rho * rho / (1 + rho)
    assert abs(wait.mean() - erlang_c / (2 - lam)) < 4 * _batch_means_se(wait)
    assert abs(np.mean(wait > 0) - erlang_c) < 0.01


def test_load_aware_beats_round_robin_on_skewed_sizes():
    n = 2000
    arrival = np.arange(n, dtype=float)
    service = np.where(np.arange(n) % 2 == 0, 3.0, 0.1)  # round-robin sends every long one to server 0
    waits = {}
    for pol in qb.POLICIES:
        end, _ = qb.serve(arrival, service, pol)
        waits[pol] = float((end - service - arrival).mean())
    assert waits["round_robin"] > 100 * max(waits["jsq_count"], waits["jsq_work"])
    assert waits["jsq_count"] < 1.0 and waits["jsq_work"] < 1.0


def test_load_aware_beats_round_robin_on_skewed_sizes_in_steps():
    n = 1000
    arrival = np.arange(n, dtype=float)
    length = np.where(np.arange(n) % 2 == 0, 30_000, 1000)  # 3.15 s and 0.11 s alone
    waits = {}
    for pol in qb.POLICIES:
        end, where = qb.serve_batched(arrival, length, pol, 0.01, 1e-4, budget=2048)
        waits[pol] = float((end - arrival).mean())  # the time in the system
        if pol == "round_robin":
            assert (where == np.arange(n) % 2).all()
    assert waits["round_robin"] > 30 * max(waits["jsq_count"], waits["jsq_work"])
    assert waits["jsq_count"] < 3.0 and waits["jsq_work"] < 3.0


def test_on_heavy_tailed_documents_the_load_aware_policies_win():
    v = {**qb.DEFAULTS, "documents_sigma": 1.3, "rate_documents": 8.0}
    out = qb.evaluate(_x(v), n_requests=2000, reps=3)
    assert out["jsq_work"] > out["jsq_count"] > out["round_robin"] + 0.02
    assert out["gap"] == pytest.approx(out["jsq_count"] - out["round_robin"])


def test_lengths_follow_the_documents_generator():
    from repro.workload.traces import DOCUMENTS_MAX, DOCUMENTS_MEDIAN, DOCUMENTS_MIN, DOCUMENTS_SIGMA, make_trace

    assert (qb.DOC_MIN, qb.DOC_MAX) == (DOCUMENTS_MIN, DOCUMENTS_MAX)
    ours = qb.lengths(np.random.default_rng(0).standard_normal(4000), DOCUMENTS_MEDIAN, DOCUMENTS_SIGMA)
    theirs = make_trace("documents", 0, 10.0, 4000).df["prompt_tokens"].to_numpy()
    for q in (0.1, 0.5, 0.9):
        assert np.quantile(ours, q) == pytest.approx(np.quantile(theirs, q), rel=0.06)


# ---- the box, the constants and the rule ---------------------------------------------------------------------
def test_box_and_constants_are_the_projects():
    from repro.engine.mechanisms import BY_NAME
    from repro.identify import separation
    from repro.identify.space import PAPER_SPACE
    from repro.routing.cost_model import SLOTargets
    from repro.workload.traces import SLO_TIGHT_SHARE

    space = {p.name: p for p in PAPER_SPACE}
    box = {d.name: d for d in qb.BOX}
    for name in ("rate_documents", "documents_median_tokens", "prefill_per_token_s", "transfer_bandwidth_bytes_per_s"):
        assert (box[name].lo, box[name].hi) == (space[name].lo, space[name].hi)
    for mech, name in (("document_tail", "documents_sigma"), ("request_path", "prefill_step_share")):
        prior = {f.name: f for f in BY_NAME[mech].free}[name]
        assert box[name].lo == pytest.approx(prior.lo, abs=1e-4) and box[name].hi == prior.hi
    assert (qb.PAPER_RR, qb.PAPER_FLOOR, qb.SD) == (separation.PAPER_RR, separation.PAPER_FLOOR, separation.SD)
    assert qb.NEED == pytest.approx(0.0676, abs=1e-4)
    assert qb.TIGHT_SHARE == SLO_TIGHT_SHARE and qb.LOOSE_FACTOR == SLOTargets(0.175, 0.04).loose_factor
    assert qb.profile_numbers()["ttft_tight_s"] == 0.175


def test_feasibility_is_round_robin_within_two_sd_of_the_papers():
    assert qb.feasible(0.585) and qb.feasible(0.556) and qb.feasible(0.614)
    assert not qb.feasible(0.554) and not qb.feasible(0.616)
    assert qb.penalised({"gap": 0.05, "round_robin": 0.60}) == pytest.approx(-0.05)
    assert qb.penalised({"gap": 0.05, "round_robin": 0.70}) == pytest.approx(-0.05 + 10 * 0.085)
    rows = [{"gap": 0.2, "round_robin": 0.3, "feasible": qb.feasible(0.3)},
            {"gap": 0.04, "round_robin": 0.59, "feasible": qb.feasible(0.59)},
            {"gap": 0.03, "round_robin": 0.57, "feasible": qb.feasible(0.57)}]
    b = qb.Bound(rows, [], 3, 0, 100, 1, "serial", 0.0)
    assert b.widest()["gap"] == 0.04 and b.n_feasible == 2


def test_the_search_is_deterministic_and_finds_a_feasible_vector():
    kw = dict(budget=96, seed=4, n_requests=400, reps=2, top=2, confirm_reps=2)
    a, b = qb.bound(**kw), qb.bound(**kw, workers=2)
    assert [r["gap"] for r in a.rows] == [r["gap"] for r in b.rows]
    assert a.confirmed == b.confirmed
    assert len(a.rows) == 96 and a.n_feasible > 0
    assert all(r["feasible"] == (abs(r["round_robin"] - 0.585) <= 0.03) for r in a.rows)
    assert "widest feasible" in qb.describe(a)


def test_the_queue_imports_no_simulator():
    code = ("import sys, repro.identify.queue_bound; "
            "print([m for m in sys.modules if m.startswith(('repro.sim', 'repro.routing', 'repro.engine'))])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_edge_table_retunes_round_robin_and_names_an_unreachable_point():
    from repro.identify import queue_bound as q

    rows = q.edge_table(moves={"documents_sigma": (1.318, 0.8)}, n_requests=1000, reps=3, seed=5)
    near, narrow = rows
    assert near["feasible"] and abs(near["round_robin"] - q.PAPER_RR) < 1e-3 and near["gap"] > 0.02
    assert not narrow["feasible"] and narrow["round_robin"] > q.PAPER_RR + 0.1  # no rate brings it down
