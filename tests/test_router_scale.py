"""The router at production scale decides exactly as the enumeration does.

- the marginal-cost scorers' vectorised path (`place_vectorized`) picks the same (prefill, decode)
  pair, or the same rejection, as the exact enumeration (`place_enumerated`) on random views: every
  term on/off, the SLO hinges firing, unhealthy instances, sampled candidates, the guard, exact and
  near ties;
- a router whose ledger keeps its books in arrays (the large-pool view) shows every policy the same
  signals, bit for bit, as the per-instance loop, and so routes identically.
"""

import itertools
import random
import zlib

import pytest

from repro.routing.cost_model import CostModel
from repro.routing.ledger import Ledger
from repro.routing.policies import make_policy
from repro.routing.policies.base import ClusterView, InstanceSignals, Placement, RequestInfo
from repro.routing.router import Router

CM = CostModel.load("calibrated")
SCORERS = ("marginal_cost", "marginal_cost_batching", "marginal_cost_plus")
SWITCHES = ("use_backlog", "use_length", "use_cache_pressure", "use_slo")


def random_pool(rng: random.Random, role: str, n: int, style: str) -> list[InstanceSignals]:
    """Signals of ``n`` instances; ``style`` 'spread' (all distinct), 'ties' (few distinct values, so
    exact ties are common), 'near' (backlogs a few 1e-13 s apart: scores within the tie tolerance of
    each other but not equal, or chained across 1e-9), 'idle' (all zero) or 'hot' (large backlogs: the hinges fire)."""
    pool = []
    for i in range(n):
        if style == "idle":
            backlog, inflight, tokens, kv = 0.0, 0, 0.0, 0.0
        elif style == "ties":
            backlog = rng.choice([0.0, 0.5, 1.0])
            inflight = rng.choice([0, 1, 2])
            tokens, kv = rng.choice([0.0, 512.0]), rng.choice([0.0, 0.85])
        elif style == "near":
            # offsets within the tie tolerance of each other, some in a chain across 1e-9 (the fast
            # path's window: the enumeration must decide there)
            near = [0.0, 1e-13, 4e-13, 9e-13, 1.5e-12, 3e-12, *(1e-9 + k * 7e-13 for k in range(6))]
            backlog = 1.0 + rng.choice(near)
            inflight = rng.choice([0, 1, 2])
            tokens, kv = 0.0, 0.0
        else:
            scale = 30.0 if style == "hot" else 2.0
            backlog = rng.random() * scale
            inflight = rng.randint(0, 300 if style == "hot" else 40)
            tokens, kv = rng.random() * 50_000, rng.random()
        pool.append(InstanceSignals(i, f"{role}{i}", backlog, inflight, tokens, kv, 0.0,
                                    healthy=rng.random() > 0.15))
    return pool


def random_request(rng: random.Random, k: int) -> RequestInfo:
    return RequestInfo(f"r{k}", rng.choice([1, 50, 700, 4000, 9000]), float(rng.choice([1, 20, 300, 1500])),
                       rng.choice(["tight", "loose"]), 0.0)


def configs():
    """Every scorer with each switch off in turn, plus sampling, the guard and the paper's defaults."""
    for name in SCORERS:
        yield name, {}
        for sw in SWITCHES:
            yield name, {sw: False}
        yield name, {"sample_d": 3, "random_state": 7}
        yield name, {"admission_guard": True, "guard_margin": 1.0}
        yield name, {"slo_weight": 0.0}
    yield "marginal_cost", {"use_own_work": False}
    yield "marginal_cost", {"use_own_work": False, "use_backlog": False}


@pytest.mark.parametrize(("name", "options"), list(configs()), ids=lambda x: str(x))
def test_vectorized_decides_exactly_as_the_enumeration(name, options):
    rng = random.Random(zlib.crc32(repr((name, sorted(options.items()))).encode()))
    fast = make_policy(name, CM, **options)
    ref = make_policy(name, CM, **options)
    fired = {"vector": 0, "reject": 0, "tie": 0}
    for k in range(150):
        style = rng.choice(["spread", "ties", "near", "idle", "hot"])
        n_p, n_d = rng.choice([(1, 1), (2, 5), (8, 24), (13, 40), (40, 120)])
        view = ClusterView(0.0, random_pool(rng, "prefill", n_p, style), random_pool(rng, "decode", n_d, style))
        req = random_request(rng, k)
        got = fast.place_vectorized(req, view)
        want = ref.place_enumerated(req, view)
        assert got == want, (k, style, n_p, n_d)
        fired["vector"] += 1
        fired["reject"] += not isinstance(want, Placement)
        if isinstance(want, Placement) and style in ("ties", "near", "idle"):
            fired["tie"] += 1
    assert fast._rng.getstate() == ref._rng.getstate()  # the same draws, in the same order
    assert fired["reject"] > 0 and fired["tie"] > 0


def test_a_chain_of_ties_across_the_window_is_left_to_the_enumeration():
    # decode scores 0.9e-12 s apart, each with one request fewer in flight: the enumeration's tie rule
    # walks the whole chain, ~1.08e-9 s above the minimum, beyond the fast path's 1e-9 s window
    n = 1201
    pol = {k: make_policy("marginal_cost", CM, use_own_work=False, use_cache_pressure=False, use_slo=False)
           for k in ("fast", "ref")}
    dec = [InstanceSignals(i, f"d{i}", 1.0 + ((i - 1) % n) * 9e-13, 2000 - (i - 1) % n, 0.0, 0.0, 0.0)
           for i in range(n)]
    view = ClusterView(0.0, [InstanceSignals(0, "p0", 0.0, 0, 0.0, 0.0, 0.0)], dec)
    req = RequestInfo("r", 100, 10.0, "loose", 0.0)
    want = pol["ref"].place_enumerated(req, view)
    assert want == Placement(0, 0)  # the chain's end: k = n - 1 sits at index 0
    assert pol["fast"].place_vectorized(req, view) == want


@pytest.mark.parametrize("name,options", [(n, {}) for n in SCORERS] + [("marginal_cost", {"sample_d": 2})],
                         ids=[*SCORERS, "marginal_cost-sample_d=2"])
def test_place_takes_the_vector_path_on_large_pools_only(name, options, monkeypatch):
    pol = make_policy(name, CM, **options)
    calls = []
    monkeypatch.setattr(pol, "place_vectorized", lambda r, v: calls.append("vector"))
    monkeypatch.setattr(pol, "place_enumerated", lambda r, v: calls.append("enum"))
    rng = random.Random(0)
    small = ClusterView(0.0, random_pool(rng, "prefill", 2, "spread"), random_pool(rng, "decode", 4, "spread"))
    large = ClusterView(0.0, random_pool(rng, "prefill", 8, "spread"), random_pool(rng, "decode", 24, "spread"))
    larger = ClusterView(0.0, random_pool(rng, "prefill", 16, "spread"), random_pool(rng, "decode", 48, "spread"))
    for k, v in enumerate((small, large, larger)):
        pol.place(random_request(rng, k), v)
    sampled = bool(options.get("sample_d"))  # sampled: vectorised from 64 instances only
    assert calls == ["enum", "enum" if sampled else "vector", "vector"]


def drive(router: Router, rng: random.Random, steps: int, on_view=None) -> list:
    """Route a random stream through ``router`` (settling, polling, health flips); the decisions."""
    live: list[tuple[float, str]] = []
    out = []
    now = 0.0
    n_p, n_d = len(router.ledger.prefill), len(router.ledger.decode)
    for k in range(steps):
        now += rng.expovariate(200.0)
        for item in [x for x in live if x[0] <= now]:
            live.remove(item)
            router.prefill_done(item[1], now)
            if rng.random() < 0.9:
                router.finish(item[1], now)
        if rng.random() < 0.1:
            router.observe_kv("decode", rng.randrange(n_d), rng.random(), now)
        if rng.random() < 0.05:
            role, n = rng.choice([("prefill", n_p), ("decode", n_d)])
            router.set_health(role, rng.randrange(n), rng.random() < 0.7)
        if on_view is not None:
            on_view(router.view(now))
        req = RequestInfo(f"r{k}", rng.randint(1, 5000), float(rng.randint(1, 1500)), rng.choice(["tight", "loose"]),
                          now)
        d = router.route(req, now)
        out.append(d)
        if isinstance(d, Placement):
            live.append((now + rng.random() * 0.5, req.request_id))
    return out


def signals(view: ClusterView) -> tuple[list, list]:
    """The view's arrays (read first: a large pool's router makes them from the ledger's arrays) and
    its signals (then derived from the arrays) as plain values."""
    arrays = [(a.backlog_s.tolist(), a.in_flight.tolist(), a.in_flight_tokens.tolist(), a.kv_usage.tolist(),
               a.kv_age_s.tolist(), a.healthy.tolist()) for a in view.arrays()]
    lists = [(s.index, s.backlog_s, s.in_flight, s.in_flight_tokens, s.kv_usage, s.kv_age_s, s.healthy)
             for s in itertools.chain(view.prefill, view.decode)]
    return arrays, lists


def oracle(role: str, i: int, now: float) -> float:
    """A stand-in for the simulator's true remaining work (s)."""
    return (i % 3) * 0.25 + (now % 0.7) if role == "decode" else i * 0.1


@pytest.mark.parametrize("with_oracle", [False, True], ids=["ledger", "oracle"])
@pytest.mark.parametrize("policy", ["marginal_cost", "marginal_cost_batching", "round_robin", "least_loaded"])
def test_array_view_shows_the_same_signals_as_the_loop(policy, with_oracle):
    def router(arrays: bool) -> Router:
        r = Router(make_policy(policy, CM), CM, [f"p{i}" for i in range(6)], [f"d{i}" for i in range(20)],
                   oracle_backlog=oracle if with_oracle else None, ledger_arrays=arrays)
        assert (r.ledger.prefill_arrays is not None) == arrays
        return r

    views: dict[bool, list] = {True: [], False: []}
    decisions = {}
    for arrays in (True, False):
        decisions[arrays] = drive(router(arrays), random.Random(3), 1500,
                                  lambda v, a=arrays: views[a].append(signals(v)))
    assert views[True] == views[False]  # every signal, bit for bit, at every decision
    assert decisions[True] == decisions[False]
    assert sum(isinstance(d, Placement) for d in decisions[True]) > 1000
    busy = [row for _, lists in views[True] for row in lists if row[1] > 0.0 and row[2] > 0]
    assert busy  # the books did hold backlog


def test_ledger_arrays_match_the_books():
    rng = random.Random(5)
    led = Ledger(4, 12, CM, arrays=True)
    now, keys = 0.0, []
    for k in range(3000):
        now += rng.random() * 0.01
        op = rng.random()
        if op < 0.5 or not keys:
            key = f"k{k}"
            led.dispatch(key, rng.randrange(4), rng.randrange(12), rng.randint(1, 4000), float(rng.randint(1, 900)),
                         now)
            keys.append(key)
        elif op < 0.75:
            led.prefill_done(rng.choice(keys), now)
        else:
            key = keys.pop(rng.randrange(len(keys)))
            led.settle(key, now)
        pre, dec = led.backlogs(now)
        assert pre.tolist() == [b.backlog(now) for b in led.prefill]
        assert dec.tolist() == [b.backlog(now) for b in led.decode]
        assert led.decode_arrays.in_flight.tolist() == [b.in_flight for b in led.decode]
        assert led.prefill_arrays.tokens.tolist() == [b.tokens for b in led.prefill]
