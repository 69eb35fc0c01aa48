"""Production-router baselines (repro.routing.policies.production): defining behaviour, determinism, sim runs."""

import random

import pytest

import repro.routing.policies.production as pp
from repro.errors import ConfigError
from repro.experiment.inputs import truth_cost_model
from repro.experiment.metrics import summarize
from repro.experiment.runner import simulate_spec
from repro.experiment.spec import RunSpec
from repro.routing.cost_model import CostModel
from repro.routing.policies import POLICIES, PRODUCTION_POLICIES, make_policy
from repro.routing.policies.base import ClusterView, InstanceSignals, Placement, Policy, Rejection, RequestInfo

CM = CostModel.load("calibrated")
NAMES = ("power_of_two", "dynamo_kv", "llmd_weighted", "sglang_least_load")


def sig(i, n=0, tokens=0.0, kv=0.0, healthy=True, role="d"):
    return InstanceSignals(i, f"{role}{i}", 0.0, n, tokens, kv, 0.0, healthy)


def view(pre=None, dec=None):
    pre = pre if pre is not None else [sig(0, role="p"), sig(1, role="p")]
    dec = dec if dec is not None else [sig(i) for i in range(4)]
    return ClusterView(0.0, pre, dec)


def req(L=200, o=200.0):
    return RequestInfo("r", L, o, "loose", 0.0)


def test_registered():
    for name in NAMES:
        assert POLICIES[name] is PRODUCTION_POLICIES[name]
    assert isinstance(make_policy("dynamo_kv", CM), pp.DynamoKV)


def test_power_of_two_lower_load_of_two_distinct_draws():
    dec = [sig(0, n=10), sig(1, n=5), sig(2, n=0)]
    pol = make_policy("power_of_two", CM, random_state=3)
    counts = [0, 0, 0]
    for _ in range(600):
        counts[pol.place(req(), view(dec=dec)).decode] += 1
    # the most loaded instance can never win (it always meets a lighter one); the lightest
    # wins every draw it is in (2/3 of the pairs)
    assert counts[0] == 0
    assert counts[2] > counts[1] > 0
    assert abs(counts[2] / 600 - 2 / 3) < 0.07
    # two instances: the lighter always wins; one healthy: it is taken
    two = [sig(0, n=3), sig(1, n=1)]
    assert {pol.place(req(), view(dec=two)).decode for _ in range(50)} == {1}
    one = [sig(0, n=9), sig(1, healthy=False)]
    assert {pol.place(req(), view(dec=one)).decode for _ in range(20)} == {0}
    assert isinstance(pol.place(req(), view(dec=[sig(0, healthy=False)])), Rejection)


def test_dynamo_kv_logit_and_temperature():
    pol = make_policy("dynamo_kv", CM)  # temperature 0: argmin
    dec = [sig(0, tokens=1600.0), sig(1, tokens=160.0), sig(2, tokens=800.0)]
    logits = dict(pol.logits(req(L=320), dec, "decode"))
    # decode: w * L/B + ceil(T/B) + ceil(L/B)
    assert logits[1] == pytest.approx(1.0 * 320 / 16 + 10 + 20)
    assert logits[0] == pytest.approx(20 + 100 + 20)
    assert pol.place(req(L=320), view(dec=dec)).decode == 1
    # prefill: pending prompt tokens count in both terms
    pre = [sig(0, tokens=3200.0, role="p"), sig(1, tokens=0.0, role="p")]
    lp = dict(pol.logits(req(L=320), pre, "prefill"))
    assert lp[0] == pytest.approx((3200 + 320) / 16 + 200 + 20) and lp[1] == pytest.approx(20 + 20)
    assert pol.place(req(L=320), view(pre=pre, dec=dec)).prefill == 1
    # weight scales the prefill term only
    w2 = make_policy("dynamo_kv", CM, overlap_score_weight=2.0)
    assert dict(w2.logits(req(L=320), dec, "decode"))[1] == pytest.approx(40 + 10 + 20)
    # temperature > 0 samples every instance, the cheapest most often
    hot = make_policy("dynamo_kv", CM, temperature=1.0, random_state=1)
    counts = [0, 0, 0]
    for _ in range(900):
        counts[hot.place(req(L=320), view(dec=dec)).decode] += 1
    assert counts[1] > counts[2] > counts[0] > 0


def test_softmax_sample_min_matches_formula():
    logits = [1.0, 2.0, 4.0]
    rng = random.Random(0)
    n = 20000
    counts = [0, 0, 0]
    for _ in range(n):
        counts[pp.softmax_sample_min(logits, 0.5, rng)] += 1
    import math
    w = [math.exp(-(v / 3.0) / 0.5) for v in logits]
    for c, wi in zip(counts, w, strict=True):
        assert abs(c / n - wi / sum(w)) < 0.015
    assert pp.softmax_sample_min([3.0, 1.0, 1.0 + 1e-7], 0.0, random.Random(0)) in (1, 2)
    assert pp.softmax_sample_min([5.0, 5.0], 2.0, random.Random(0)) in (0, 1)


def test_llmd_weighted_scores_and_max_pick():
    pol = make_policy("llmd_weighted", CM)
    dec = [sig(0, n=4, kv=0.1), sig(1, n=0, kv=0.9), sig(2, n=2, kv=0.2)]
    s = dict(pol.scores(dec))
    # queue: (max - q) / (max - min); kv: 1 - usage; weights 1, 1
    assert s[0] == pytest.approx(0.0 + 0.9)
    assert s[1] == pytest.approx(1.0 + 0.1)
    assert s[2] == pytest.approx(0.5 + 0.8)
    assert pol.place(req(), view(dec=dec)).decode == 2
    # equal queues: every queue score is 1.0, the KV scorer decides
    eq = [sig(0, n=3, kv=0.5), sig(1, n=3, kv=0.2)]
    assert dict(pol.scores(eq)) == {0: pytest.approx(1.5), 1: pytest.approx(1.8)}
    assert pol.place(req(), view(dec=eq)).decode == 1
    # weights
    q_only = make_policy("llmd_weighted", CM, kv_weight=0.0)
    assert q_only.place(req(), view(dec=dec)).decode == 1
    # ties are broken at random (shuffle), covering every tied instance
    tie = [sig(i, n=1, kv=0.3) for i in range(3)]
    assert {pol.place(req(), view(dec=tie)).decode for _ in range(60)} == {0, 1, 2}
    with pytest.raises(ConfigError):
        make_policy("llmd_weighted", CM, queue_weight=-1.0)


def test_sglang_least_load_min_outstanding_lowest_index_on_ties():
    pol = make_policy("sglang_least_load", CM)
    dec = [sig(0, tokens=500.0, n=1), sig(1, tokens=300.0, n=5), sig(2, tokens=300.0, n=0), sig(3, tokens=900.0)]
    assert pol.place(req(), view(dec=dec)).decode == 1  # least tokens (not fewest requests), first of a tie
    dec[1].healthy = False
    assert pol.place(req(), view(dec=dec)).decode == 2
    pre = [sig(0, tokens=4000.0, role="p"), sig(1, tokens=100.0, role="p")]
    assert pol.place(req(), view(pre=pre, dec=dec)).prefill == 1


@pytest.mark.parametrize("name", ["power_of_two", "dynamo_kv", "llmd_weighted"])
def test_seeded_policies_are_deterministic(name):
    opts = {"temperature": 0.7} if name == "dynamo_kv" else {}
    dec = [sig(i, n=i % 2, tokens=100.0 * (i % 3), kv=0.1 * (i % 2)) for i in range(5)]
    pre = [sig(i, n=0, role="p") for i in range(3)]

    def seq(seed):
        pol = make_policy(name, CM, random_state=seed, **opts)
        return [(d.prefill, d.decode) for d in (pol.place(req(), view(pre=pre, dec=dec)) for _ in range(40))]

    assert seq(5) == seq(5)
    assert seq(5) != seq(6)
    with pytest.raises(ConfigError):
        make_policy(name, CM, random_state=-1)


class FirstInstances(Policy):
    """The worst load balancer, for comparison: every request on the first prefill and decode instance."""

    name = "first_instances"

    def place(self, request, view):
        return Placement(0, 0)


def _sim(policy, rate):
    """A 500-request mixed run on the simulator's 2p4d at ``rate`` req/s: (journal, summary)."""
    spec = RunSpec(policy=policy, n_requests=500, rate=rate, profile="a40-qwen2.5-3b")  # saturated at 16 req/s
    journal = simulate_spec(spec)
    return journal, summarize(journal, truth_cost_model(spec).slo, sent=500)


@pytest.fixture(scope="module")
def first_instances_goodput():
    return _sim(f"{__name__}:FirstInstances", 16.0)[1]["goodput"]


@pytest.mark.parametrize("name", NAMES)
def test_short_sim_runs_serve_every_request_and_spread_the_load(name, first_instances_goodput):
    """At the operating point (16 req/s, 2p4d; all numbers deterministic for the trace's seed): every
    request is placed and served (the production routers never reject, every request fits the engines),
    on every instance, far better than all on one instance; at a light rate (0.25 req/s) goodput is
    the physics' own (~0.92: a few long prompts miss even alone), at 4x the operating rate it collapses."""
    journal, s = _sim(name, 16.0)
    assert (s["completed"], s["failed"], s["rejected"]) == (500, 0, 0)
    assert journal.prefill_instance.nunique() == 2 and journal.decode_instance.nunique() == 4
    assert journal.equals(simulate_spec(RunSpec(policy=name, n_requests=500, rate=16.0, profile="a40-qwen2.5-3b")))
    # all on one instance gets ~0.15 here, each production router 0.77-0.81
    assert s["goodput"] > first_instances_goodput + 0.5
    light, overload = _sim(name, 0.25)[1]["goodput"], _sim(name, 64.0)[1]["goodput"]
    assert light > 0.9 and overload < 0.25
