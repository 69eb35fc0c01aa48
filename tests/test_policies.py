import pytest

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
from repro.routing.policies.paper import MarginalCost

CM = CostModel.load("calibrated")


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


def test_marginal_cost_prefers_less_backlog_and_can_be_ablated():
    dec = [sig(0, backlog=30.0, n=2), sig(1, backlog=2.0, n=2), sig(2, backlog=10.0, n=2), sig(3, backlog=50.0, n=2)]
    pol = make_policy("marginal_cost", CM)
    assert {pol.place(req(), view(dec=dec)).decode for _ in range(4)} == {1}
    # without the backlog term every decode instance prices the same: ties rotate
    blind = make_policy("marginal_cost", CM, use_backlog=False)
    assert len({blind.place(req(), view(dec=dec)).decode for _ in range(4)}) > 1


def test_marginal_cost_prices_the_slowdown_a_long_request_imposes():
    # same in-flight count; d0's work is short, d1's long: a long request should avoid d1
    dec = [sig(0, backlog=4.0, n=4), sig(1, backlog=400.0, n=4)]
    pol = make_policy("marginal_cost", CM)
    s = {d: sc for sc, _, p, d in pol.scores(req(o=3000), view(dec=dec)) if p == 0}
    assert s[1] - s[0] > 0.1  # seconds of neighbours' slowdown
    # a 1-token request barely interacts with either
    s1 = {d: sc for sc, _, p, d in pol.scores(req(o=1), view(dec=dec)) if p == 0}
    assert abs(s1[1] - s1[0]) < 1e-3


def test_marginal_cost_prefill_backlog_drives_prefill_choice():
    pre = [sig(0, backlog=0.9, role="p"), sig(1, backlog=0.1, role="p")]
    assert make_policy("marginal_cost", CM).place(req(), view(pre=pre)).prefill == 1


def test_cache_pressure_steers_away_from_a_nearly_full_instance():
    # equal backlog; d0 would be over the safe fraction after admission
    dec = [sig(0, backlog=1.0, kv=0.95), sig(1, backlog=1.0, kv=0.10), sig(2, backlog=1.0, kv=0.1),
           sig(3, backlog=1.0, kv=0.1)]
    on = make_policy("marginal_cost", CM, use_slo=False)
    scores = {d: s for s, _, p, d in on.scores(req(o=2000, L=3000), view(dec=dec)) if p == 0}
    assert scores[0] > scores[1] + CM.ttft_tight_s  # priced at least one TTFT target more
    off = make_policy("marginal_cost", CM, use_slo=False, use_cache_pressure=False)
    scores_off = {d: s for s, _, p, d in off.scores(req(o=2000, L=3000), view(dec=dec)) if p == 0}
    assert scores_off[0] == pytest.approx(scores_off[1])


def test_slo_term_weighs_tight_requests_more():
    pre = [sig(0, backlog=2.0, role="p")]
    pol = make_policy("marginal_cost", CM)
    tight = pol.scores(req(cls="tight"), view(pre=pre))[0][0]
    loose = pol.scores(req(cls="loose"), view(pre=pre))[0][0]
    none = make_policy("marginal_cost", CM, use_slo=False).scores(req(cls="tight"), view(pre=pre))[0][0]
    assert none < loose < tight


def test_length_switch_changes_the_ledger_charge():
    pol = MarginalCost(CM, use_length=False, default_output_tokens=300)
    assert pol.output_estimate(req(o=5000)) == 300
    assert MarginalCost(CM).output_estimate(req(o=5000)) == 5000


def test_no_healthy_instance_is_a_rejection():
    v = view(dec=[sig(i, healthy=False) for i in range(4)])
    for name in ("round_robin", "least_loaded", "length_threshold", "marginal_cost"):
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
    assert plus.admission_guard and plus.sample_d == 2
    assert make_policy("marginal_cost_plus", CM, guard_margin=3.0).guard_margin == 3.0


class ForwardingMarginalCost(MarginalCost):
    name = "forwarding_marginal_cost"

    def __init__(self, cost_model=None, **options):
        super().__init__(cost_model, **options)


def test_options_are_constructor_keywords_and_describe_reads_them():
    import inspect

    from repro.routing.policies import POLICIES, available_policies
    from repro.routing.policies.paper import MarginalCostPlus

    assert available_policies() == sorted(POLICIES)
    for name, cls in POLICIES.items():
        assert cls.name == name
        pol = make_policy(name, CM)
        names = [p for p in inspect.signature(cls).parameters if p != "cost_model"]
        assert list(pol.get_params()) == names == list(cls.param_names())
        assert pol.describe() == {"policy": name, **pol.get_params()}
    # MarginalCostPlus restates MarginalCost's options; only three defaults differ
    base, plus = (inspect.signature(c).parameters for c in (MarginalCost, MarginalCostPlus))
    assert list(base) == list(plus)
    assert {k for k in base if base[k].default != plus[k].default} == {"sample_d", "admission_guard", "guard_margin"}
    # a user subclass forwarding **options accepts its base class's options
    pol = make_policy("tests.test_policies:ForwardingMarginalCost", CM, use_slo=False)
    assert pol.describe()["use_slo"] is False and pol.param_names() == MarginalCost.param_names()
