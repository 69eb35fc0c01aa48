import pytest

from repro.engine.profile import load_profile
from repro.errors import ConfigError
from repro.routing.cost_model import CostModel
from repro.routing.policies import make_policy
from repro.routing.policies.base import (
    ClusterView,
    InstanceSignals,
    Placement,
    Policy,
    Rejection,
    RequestInfo,
)
from repro.routing.policies.batching import MarginalCostBatching
from repro.routing.policies.marginal_cost import MarginalCost

CM = CostModel.from_physics(load_profile("a40-qwen2.5-3b").physics)  # the hand-computed numbers below: this profile


def sig(i, backlog=0.0, n=0, tokens=0.0, kv=0.0, healthy=True, role="d"):
    return InstanceSignals(i, f"{role}{i}", backlog, n, tokens, kv, 0.0, healthy)


def view(pre=None, dec=None):
    pre = pre or [sig(0, role="p"), sig(1, role="p")]
    dec = dec or [sig(i) for i in range(4)]
    return ClusterView(0.0, pre, dec)


def req(o=200.0, L=200, cls="loose"):
    return RequestInfo("r", L, o, cls, 0.0)


def test_round_robin_cycles_each_pool_and_skips_unhealthy():
    rr = make_policy("round_robin", CM)
    got = [rr.place(req(), view()) for _ in range(6)]
    assert [g.decode for g in got] == [0, 1, 2, 3, 0, 1]
    assert [g.prefill for g in got] == [0, 1, 0, 1, 0, 1]
    v = view(dec=[sig(0), sig(1, healthy=False), sig(2), sig(3)])
    rr = make_policy("round_robin", CM)
    assert [rr.place(req(), v).decode for _ in range(4)] == [0, 2, 3, 0]


def test_least_loaded_joins_shortest_queue():
    jsq = make_policy("least_loaded", CM)
    v = view(pre=[sig(0, n=3, role="p"), sig(1, n=1, role="p")],
             dec=[sig(0, n=5), sig(1, n=2), sig(2, n=9), sig(3, n=4)])
    assert jsq.place(req(), v) == Placement(1, 1)


def test_length_threshold_sends_long_requests_by_tokens_and_short_by_count():
    pol = make_policy("length_threshold", CM, threshold_tokens=500)
    dec = [sig(0, n=1, tokens=9000), sig(1, n=5, tokens=1000), sig(2, n=3, tokens=5000), sig(3, n=2, tokens=8000)]
    assert pol.place(req(o=2000), view(dec=dec)).decode == 1
    assert pol.place(req(o=50), view(dec=dec)).decode == 0


@pytest.mark.parametrize("name", ["marginal_cost", "marginal_cost_batching"])
def test_marginal_cost_prefers_less_backlog_and_can_be_ablated(name):
    dec = [sig(0, backlog=30.0, n=2), sig(1, backlog=2.0, n=2), sig(2, backlog=10.0, n=2), sig(3, backlog=50.0, n=2)]
    pol = make_policy(name, CM)
    assert {pol.place(req(), view(dec=dec)).decode for _ in range(4)} == {1}
    # without the backlog term every decode instance prices the same: ties rotate
    blind = make_policy(name, CM, use_backlog=False)
    assert len({blind.place(req(), view(dec=dec)).decode for _ in range(4)}) > 1


def test_batching_variant_prices_the_slowdown_a_long_request_imposes():
    # same in-flight count; d0's work is short, d1's long: a long request should avoid d1
    dec = [sig(0, backlog=4.0, n=4), sig(1, backlog=400.0, n=4)]
    pol = make_policy("marginal_cost_batching", CM)
    s = {d: sc for sc, _, p, d in pol.scores(req(o=3000), view(dec=dec)) if p == 0}
    assert s[1] - s[0] > 0.1  # seconds of neighbours' slowdown
    # a 1-token request barely interacts with either (the paper's scorer charges it all 396 s)
    s1 = {d: sc for sc, _, p, d in pol.scores(req(o=1), view(dec=dec)) if p == 0}
    assert abs(s1[1] - s1[0]) < 1e-3


@pytest.mark.parametrize("name", ["marginal_cost", "marginal_cost_batching"])
def test_marginal_cost_prefill_backlog_drives_prefill_choice(name):
    pre = [sig(0, backlog=0.9, role="p"), sig(1, backlog=0.1, role="p")]
    assert make_policy(name, CM).place(req(), view(pre=pre)).prefill == 1


@pytest.mark.parametrize("name", ["marginal_cost", "marginal_cost_batching"])
def test_cache_pressure_steers_away_from_a_nearly_full_instance(name):
    # equal backlog; d0 would be over the safe fraction after admission
    dec = [sig(0, backlog=1.0, kv=0.95), sig(1, backlog=1.0, kv=0.10), sig(2, backlog=1.0, kv=0.1),
           sig(3, backlog=1.0, kv=0.1)]
    on = make_policy(name, CM, use_slo=False)
    scores = {d: s for s, _, p, d in on.scores(req(o=2000, L=3000), view(dec=dec)) if p == 0}
    assert scores[0] > scores[1] + CM.ttft_tight_s  # priced at least one TTFT target more
    off = make_policy(name, CM, use_slo=False, use_cache_pressure=False)
    scores_off = {d: s for s, _, p, d in off.scores(req(o=2000, L=3000), view(dec=dec)) if p == 0}
    assert scores_off[0] == pytest.approx(scores_off[1])


@pytest.mark.parametrize("name", ["marginal_cost", "marginal_cost_batching"])
def test_slo_term_weighs_tight_requests_more(name):
    pre = [sig(0, backlog=2.0, role="p")]
    pol = make_policy(name, CM)
    tight = pol.scores(req(cls="tight"), view(pre=pre))[0][0]
    loose = pol.scores(req(cls="loose"), view(pre=pre))[0][0]
    none = make_policy(name, CM, use_slo=False).scores(req(cls="tight"), view(pre=pre))[0][0]
    assert none < loose < tight


def test_length_switch_changes_the_ledger_charge():
    pol = MarginalCost(CM, use_length=False, default_output_tokens=300)
    assert pol.output_estimate(req(o=5000)) == 300
    assert MarginalCost(CM).output_estimate(req(o=5000)) == 5000


def test_no_healthy_instance_is_a_rejection():
    v = view(dec=[sig(i, healthy=False) for i in range(4)])
    for name in ("round_robin", "least_loaded", "length_threshold", "marginal_cost", "marginal_cost_batching"):
        assert isinstance(make_policy(name, CM).place(req(), v), Rejection)


class AlwaysLast(Policy):
    name = "always_last"

    def place(self, request, view):
        return Placement(len(view.prefill) - 1, len(view.decode) - 1)


def test_user_policy_by_import_path():
    pol = make_policy("tests.test_policies:AlwaysLast", CM)
    assert pol.place(req(), view()) == Placement(1, 3)


def test_bad_policy_names_and_options_are_config_errors():
    with pytest.raises(ConfigError, match="unknown policy"):
        make_policy("nope")
    with pytest.raises(ConfigError, match="cannot import"):
        make_policy("no.such.module:Cls")
    with pytest.raises(ConfigError, match="unknown option 'bogus'"):
        make_policy("marginal_cost", CM, bogus=1)
    with pytest.raises(ConfigError, match="cache_safe_fraction"):
        make_policy("marginal_cost", CM, cache_safe_fraction=1.5)


def test_sampled_placement_prices_only_d_instances_and_is_seeded():
    dec = [sig(i, backlog=float(i), n=1) for i in range(4)]
    pol = make_policy("marginal_cost", CM, sample_d=2, random_state=7)
    picks = [pol.place(req(), view(dec=dec)).decode for _ in range(200)]
    # d0 is the global argmin; with 2 of 4 sampled it wins only when drawn (1/2 of the time)
    share = picks.count(0) / len(picks)
    assert 0.35 < share < 0.65 and 3 not in picks  # d3 is never the cheaper of two
    again = make_policy("marginal_cost", CM, sample_d=2, random_state=7)
    assert [again.place(req(), view(dec=dec)).decode for _ in range(200)] == picks


def test_temperature_spreads_choices_by_score():
    dec = [sig(0, backlog=0.0, n=1), sig(1, backlog=100.0, n=1), sig(2, backlog=0.0, n=1), sig(3, backlog=0.0, n=1)]
    pol = make_policy("marginal_cost", CM, temperature_s=0.01, random_state=1)
    picks = [pol.place(req(o=2000), view(dec=dec)).decode for _ in range(300)]
    assert set(picks) == {0, 2, 3}  # the expensive one (more interference) is effectively never chosen


def test_admission_guard_rejects_hopeless_requests_only():
    pre = [sig(0, backlog=5.0, tokens=200_000, role="p")]
    guard = make_policy("marginal_cost", CM, admission_guard=True, guard_margin=1.5)
    d = guard.place(req(cls="tight"), view(pre=pre))
    assert isinstance(d, Rejection) and "admission guard" in d.reason and d.retry_after_s > 0
    assert isinstance(guard.place(req(cls="tight"), view()), Placement)  # an idle cluster admits
    assert isinstance(make_policy("marginal_cost", CM).place(req(cls="tight"), view(pre=pre)), Placement)
    plus = make_policy("marginal_cost_plus", CM)
    assert plus.admission_guard and plus.guard_margin == 1.0 and plus.sample_d == 0  # as tuned (repro.paper.tuning)
    assert make_policy("marginal_cost_plus", CM, guard_margin=3.0).guard_margin == 3.0


class ForwardingMarginalCost(MarginalCost):
    name = "forwarding_marginal_cost"

    def __init__(self, cost_model=None, **options):
        super().__init__(cost_model, **options)


def test_options_are_constructor_keywords_and_describe_reads_them():
    import dataclasses
    import inspect

    from repro.routing.policies import POLICIES, available_policies
    from repro.routing.policies.base import option_defaults
    from repro.routing.policies.batching import MarginalCostPlus

    assert available_policies() == sorted(POLICIES)
    for name, cls in POLICIES.items():
        assert cls.name == name
        pol = make_policy(name, CM)
        record = getattr(cls, "Options", None)  # the scorers: a typed options record, else the signature
        names = ([f.name for f in dataclasses.fields(record)] if record is not None
                 else [p for p in inspect.signature(cls).parameters if p != "cost_model"])
        assert list(pol.get_params()) == names == list(cls.param_names())
        assert pol.describe() == {"policy": name, **pol.get_params()}
    # MarginalCostPlus has the options of the scorer it builds on; only the guard's defaults differ
    base, plus = (option_defaults(c) for c in (MarginalCostPlus.__mro__[1], MarginalCostPlus))
    assert list(base) == list(plus)
    assert {k for k in base if base[k] != plus[k]} == {"admission_guard", "guard_margin"}
    # a user subclass forwarding **options accepts its base class's options
    pol = make_policy("tests.test_policies:ForwardingMarginalCost", CM, use_slo=False)
    assert pol.describe()["use_slo"] is False and pol.param_names() == MarginalCost.param_names()


# ---- the paper's scorer (§III), term by term -------------------------------------------------
SWITCHES = ("use_backlog", "use_own_work", "use_cache_pressure", "use_slo")


def paper_terms(cm, p, d, L, o, cls, tpot_reading="batch"):
    """The paper's score of pair (p, d), written out from the formula with the cost model's raw
    constants (seconds): {term: seconds}, the SLO hinge with every other term on. ``tpot_reading``:
    TPOT_hat = tau_dec(n_d) (``batch``) or (backlog(d) + o tau_dec(n_d)) / o (``backlog``)."""
    T_ttft = cm.ttft_tight_s * (1.0 if cls == "tight" else cm.loose_factor)
    T_tpot = cm.tpot_tight_s * (1.0 if cls == "tight" else cm.loose_factor)
    tau_pre = cm.tau_pre_base_s + cm.tau_pre_per_token_s * L  # L < max_num_batched_tokens: one step
    tau_xfer = cm.xfer_latency_s + L * cm.kv_bytes_per_token / cm.xfer_bandwidth_bytes_per_s
    tau_dec = cm.tau_dec_s * (1.0 + cm.dec_concurrency_slope * d.in_flight)
    u = (d.kv_usage * cm.kv_capacity_tokens + L + o) / cm.kv_capacity_tokens
    ttft_hat = p.backlog_s + tau_pre + tau_xfer + tau_dec
    return {
        "backlog": p.backlog_s + d.backlog_s,
        "own_work": tau_pre + tau_xfer + o * tau_dec,
        "cache": T_ttft * max(0.0, u - 0.8) / (1 - 0.8),
        "slo": max(0.0, ttft_hat - T_ttft) + (max(0.0, d.backlog_s + o * tau_dec - o * T_tpot)
                                              if tpot_reading == "backlog" else o * max(0.0, tau_dec - T_tpot)),
    }


# 1 x 2 prefill, 2 decode; d1 is over the cache's safe fraction after admission of L + o
PRE = [sig(0, backlog=0.30, n=3, role="p"), sig(1, backlog=0.05, n=1, role="p")]
DEC = [sig(0, backlog=12.0, n=10, kv=0.5), sig(1, backlog=1.0, n=20, kv=0.9)]


def by_pair(pol, request):
    return {(p, d): s for s, _, p, d in pol.scores(request, ClusterView(0.0, PRE, DEC))}


def test_paper_scorer_is_the_sum_of_its_terms_and_each_switch_removes_exactly_its_term():
    r = req(o=300.0, L=1000, cls="loose")
    full = by_pair(MarginalCost(CM), r)
    for (p, d), score in full.items():
        t = paper_terms(CM, PRE[p], DEC[d], 1000, 300.0, "loose")
        assert t["slo"] == 0.0  # loose targets: both hinges quiet here
        assert score == pytest.approx(sum(t.values()), abs=1e-12)
    t = paper_terms(CM, PRE[1], DEC[1], 1000, 300.0, "loose")
    assert t["cache"] > 0.3 and paper_terms(CM, PRE[1], DEC[0], 1000, 300.0, "loose")["cache"] == 0.0
    # the numbers, by hand: (0.05 + 1.0) + (0.0667 + 6e-5*1000 + 0.001 + 1000*36864/2e10 + 300*13.237ms*(1 + 0.0041*20))
    #                       + 0.525 * (0.92167 - 0.8) / 0.2
    assert full[(1, 1)] == pytest.approx(1.05 + 0.1295432 + 4.2973262 + 0.3193750, abs=1e-6)
    for switch, term in zip(SWITCHES, ("backlog", "own_work", "cache", "slo"), strict=True):
        off = by_pair(MarginalCost(CM, **{switch: False}), r)
        for (p, d), score in full.items():
            removed = paper_terms(CM, PRE[p], DEC[d], 1000, 300.0, "loose")[term]
            assert score - off[(p, d)] == pytest.approx(removed, abs=1e-12), (switch, p, d)
    # use_length: o becomes the default estimate, in every term
    flat = by_pair(MarginalCost(CM, use_length=False, default_output_tokens=50.0), r)
    for (p, d), score in flat.items():
        assert score == pytest.approx(sum(paper_terms(CM, PRE[p], DEC[d], 1000, 50.0, "loose").values()), abs=1e-12)


def test_paper_scorer_tpot_hinge_reads_the_per_token_time_of_the_batch_it_joins():
    """The default TPOT reading: TPOT_hat = tau_dec(n_d). d0's 12 s of decode backlog do not enter the
    hinge (they are in the score once); the hinge fires only when tau_dec(n_d) itself exceeds T_tpot."""
    r = req(o=300.0, L=1000, cls="tight")
    full = by_pair(MarginalCost(CM), r)
    no_slo = by_pair(MarginalCost(CM, use_slo=False), r)
    for (p, d), score in full.items():
        t = paper_terms(CM, PRE[p], DEC[d], 1000, 300.0, "tight")
        assert score == pytest.approx(sum(t.values()), abs=1e-12)
        assert score - no_slo[(p, d)] == pytest.approx(t["slo"], abs=1e-12)
    tau = CM.tau_dec(10)
    ttft_over = 0.30 + CM.tau_pre(1000) + CM.tau_xfer(1000) + tau - CM.ttft_tight_s
    assert tau < CM.tpot_tight_s  # 10 in flight: the batch's per-token time is within the target
    assert full[(0, 0)] - no_slo[(0, 0)] == pytest.approx(ttft_over, abs=1e-12)
    # a batch slow enough per token: the hinge is o x the per-token overrun
    slow = [sig(0, backlog=12.0, n=600, kv=0.5), DEC[1]]
    got = {(p, d): s_ for s_, _, p, d in MarginalCost(CM).scores(r, ClusterView(0.0, PRE, slow))}
    off = {(p, d): s_ for s_, _, p, d in MarginalCost(CM, use_slo=False).scores(r, ClusterView(0.0, PRE, slow))}
    tau600 = CM.tau_dec(600)
    assert tau600 > CM.tpot_tight_s
    ttft600 = max(0.0, 0.30 + CM.tau_pre(1000) + CM.tau_xfer(1000) + tau600 - CM.ttft_tight_s)
    assert got[(0, 0)] - off[(0, 0)] == pytest.approx(ttft600 + 300 * (tau600 - CM.tpot_tight_s), abs=1e-12)


def test_paper_scorer_slo_hinge_prices_predicted_ttft_and_tpot_overruns_in_seconds():
    """The prior TPOT reading (``marginal_cost_backlog_tpot``): TPOT_hat = (backlog(d) + o tau_dec) / o."""
    from repro.routing.policies.readings import MarginalCostBacklogTpot as MarginalCost

    r = req(o=300.0, L=1000, cls="tight")
    full = by_pair(MarginalCost(CM), r)
    no_slo = by_pair(MarginalCost(CM, use_slo=False), r)
    for (p, d), score in full.items():
        t = paper_terms(CM, PRE[p], DEC[d], 1000, 300.0, "tight", tpot_reading="backlog")
        assert score == pytest.approx(sum(t.values()), abs=1e-12)
        assert score - no_slo[(p, d)] == pytest.approx(t["slo"], abs=1e-12)
    tau = CM.tau_dec(10)
    # d0: 12 s of decode backlog shared over 300 tokens: TPOT_hat = (12 + 300 tau) / 300 > 39.7 ms
    tpot_over = 12.0 + 300 * tau - 300 * CM.tpot_tight_s
    ttft_over = 0.30 + CM.tau_pre(1000) + CM.tau_xfer(1000) + tau - CM.ttft_tight_s
    assert tpot_over > 4.0 and ttft_over > 0.25
    assert full[(0, 0)] - no_slo[(0, 0)] == pytest.approx(tpot_over + ttft_over, abs=1e-12)
    # a switched-off term is read nowhere: without the backlog, neither hinge sees it
    nb = by_pair(MarginalCost(CM, use_backlog=False), r)
    ttft_over_nb = max(0.0, CM.tau_pre(1000) + CM.tau_xfer(1000) + tau - CM.ttft_tight_s)
    tpot_over_nb = max(0.0, 300 * tau - 300 * CM.tpot_tight_s)
    assert nb[(0, 0)] == pytest.approx(CM.tau_pre(1000) + CM.tau_xfer(1000) + 300 * tau + ttft_over_nb + tpot_over_nb,
                                       abs=1e-12)
    # slo_weight scales the hinge only
    half = by_pair(MarginalCost(CM, slo_weight=0.5), r)
    assert half[(0, 0)] - no_slo[(0, 0)] == pytest.approx(0.5 * (tpot_over + ttft_over), abs=1e-12)


@pytest.mark.parametrize("wrong", [CM.with_overrides(name="tau_dec/7.4", tau_dec_s=CM.tau_dec_s / 7.4),
                                   CostModel.load("sim_derived")], ids=["tau_dec/7.4", "sim_derived"])
def test_miscalibrated_paper_scorer_degenerates_into_queue_counting(wrong):
    """§III-B: with the router's tau_dec 7.4x too small its ledger books every request as finishing
    7.4x too early, so backlog(d) (the ledger's remaining seconds) drains while the requests still
    run; the size-aware terms are silenced and the scorer picks what JSQ picks. The same history,
    with the same real clock, read by a calibrated router's ledger, picks the other instance."""
    from repro.routing.router import Router

    def view_after_history(cm):
        router = Router(MarginalCost(cm), cm, ["p0"], ["d0", "d1"])
        router.ledger.dispatch("long", 0, 0, 200, 1000.0, now=0.0)  # one long request on d0
        router.prefill_done("long", 0.08)
        router.decode_started("long", 0.1)
        for k in range(3):  # three short ones on d1, two seconds later
            router.ledger.dispatch(f"short{k}", 0, 1, 200, 100.0, now=2.0)
        for k in range(3):
            router.prefill_done(f"short{k}", 2.1 + 0.1 * k)
            router.decode_started(f"short{k}", 2.12 + 0.1 * k)
        return router.view(2.6)

    new = req(o=100.0, L=200, cls="loose")
    right, wrong_view = view_after_history(CM), view_after_history(wrong)
    # what each router believes: counts agree (1 vs 3); the calibrated book still holds ~10.7 s on
    # d0 (the long request's remaining decode) against ~2.8 s on d1; the miscalibrated one holds none
    assert [s.in_flight for s in right.decode] == [s.in_flight for s in wrong_view.decode] == [1, 3]
    assert right.decode[0].backlog_s > 3 * right.decode[1].backlog_s > 0
    assert [s.backlog_s for s in wrong_view.decode] == [0.0, 0.0]
    jsq = make_policy("least_loaded", CM).place(new, right).decode
    assert jsq == 0
    assert MarginalCost(CM).place(new, right).decode == 1  # calibrated: size-aware, away from the long request
    assert MarginalCost(wrong).place(new, wrong_view).decode == jsq  # miscalibrated: queue counting
    # ... and by the count alone: the two scores differ by exactly o * tau_dec_s * slope * (3 - 1)
    s = {d: sc for sc, _, p, d in MarginalCost(wrong).scores(new, wrong_view)}
    assert s[1] - s[0] == pytest.approx(100.0 * wrong.tau_dec_s * wrong.dec_concurrency_slope * 2, rel=1e-9)
    # the batching variant counts queues here even calibrated (its decode backlog weighs ~0.004)
    assert make_policy("marginal_cost_batching", CM).place(new, right).decode == jsq


def test_registry_lists_the_paper_scorer_and_the_batching_variant():
    from typer.testing import CliRunner

    from repro.cli.root import app
    from repro.routing.policies import PAPER_POLICIES, POLICIES, available_policies
    from repro.routing.policies.batching import MarginalCostPlus

    assert POLICIES["marginal_cost"] is MarginalCost and POLICIES["marginal_cost_batching"] is MarginalCostBatching
    assert {"marginal_cost", "marginal_cost_batching", "marginal_cost_plus"} <= set(available_policies())
    assert "marginal_cost" in PAPER_POLICIES and "marginal_cost_batching" not in PAPER_POLICIES
    assert issubclass(MarginalCostPlus, MarginalCostBatching)  # chosen on held-out traces (repro.paper.tuning)
    out = " ".join(CliRunner().invoke(app, ["policies"], terminal_width=400).output.split())
    assert "marginal_cost: The paper's router (§III)" in out and "seconds-of-backlog" in out
    assert "marginal_cost_batching: Beyond the paper" in out


def test_the_scorers_options_are_one_typed_record_checked_at_the_boundary():
    """`ScorerOptions`: each option typed, with its range; a wrong type or value is a ConfigError naming the option
    (the command line's ``-o KEY=VALUE`` arrives as YAML: ``true``, ``2``, ``0.5``)."""
    from repro.errors import ConfigError
    from repro.routing.policies import POLICIES
    from repro.routing.policies.marginal_cost import MarginalCostOptions
    from repro.routing.policies.scoring import ScorerOptions

    pol = make_policy("marginal_cost", CM, sample_d=2, slo_weight=2, use_slo=False)
    assert pol.options == MarginalCostOptions(sample_d=2, slo_weight=2.0, use_slo=False)
    assert isinstance(pol.slo_weight, float) and pol.sample_d == 2 and pol.use_slo is False
    for bad, match in (({"sample_d": 1.5}, "'sample_d' must be an integer"), ({"use_slo": "no"}, "true or false"),
                       ({"slo_weight": -1}, "'slo_weight' must be >= 0"),
                       ({"cache_safe_fraction": 1.0}, r"'cache_safe_fraction' must be in \[0, 1\)"),
                       ({"guard_margin": 0.5}, "'guard_margin' must be >= 1"), ({"nope": 1}, "unknown option 'nope'")):
        with pytest.raises(ConfigError, match=match):
            make_policy("marginal_cost", CM, **bad)
    assert [name for name, *_ in ScorerOptions.describe()] == list(POLICIES["marginal_cost_batching"].param_names())
    assert all(help_text for *_, help_text in MarginalCostOptions.describe())
