import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from repro.routing.cost_model import CostModel
from repro.routing.ledger import Ledger, ParallelBook, SerialBook

ops = st.lists(
    st.tuples(
        st.sampled_from(["charge", "hold", "start", "reanchor", "settle"]),
        st.sampled_from([0.0, 0.0, 0.5, 1.0, 3.0]),
        st.sampled_from([0.0, 0.5, 1.0, 2.0, 7.5]),
    ),
    min_size=1,
    max_size=120,
)


@settings(max_examples=200, deadline=None)
@given(ops, st.randoms(use_true_random=False))
def test_parallel_book_matches_brute_force(seq, rnd):
    """Counting down (charge, start, reanchor) and held (hold) entries: the backlog is the held work plus
    each counting entry's remaining seconds, whatever the order of operations."""
    book = ParallelBook()
    ends: dict[str, float] = {}
    held: dict[str, float] = {}
    now = 0.0
    for step, (op, dt, work) in enumerate(seq):
        now += dt
        if op == "charge" or not (ends or held):
            key = f"k{step}"
            book.charge(key, now + work, 10.0, now)
            ends[key] = now + work
        elif op == "hold":
            key = f"k{step}"
            book.hold(key, work, 10.0, now)
            held[key] = work
        elif op == "start":
            key = rnd.choice(sorted(ends) + sorted(held))
            book.start(key, now + work, now)  # an entry already counting down is left as it is
            if key in held:
                del held[key]
                ends[key] = now + work
        elif op == "reanchor" and ends:
            key = rnd.choice(sorted(ends))
            book.reanchor(key, now + work, now)
            ends[key] = now + work
        else:
            key = rnd.choice(sorted(ends) + sorted(held))
            book.settle(key, 10.0, now)
            ends.pop(key, None)
            held.pop(key, None)
        brute = sum(max(e - now, 0.0) for e in ends.values()) + sum(held.values())
        assert abs(book.backlog(now) - brute) < 1e-6
        assert book.in_flight == len(ends) + len(held)
        assert abs(book.tokens - 10.0 * (len(ends) + len(held))) < 1e-9


def test_serial_book_is_a_workload_process():
    b = SerialBook()
    b.charge(1.0, 100, now=0.0)
    b.charge(1.0, 100, now=0.5)  # queued behind the first
    assert b.backlog(0.5) == 1.5
    assert b.backlog(1.0) == 1.0
    assert b.backlog(5.0) == 0.0
    b.settle(100, now=1.0)
    b.settle(100, now=1.2)  # last one settles early: no phantom backlog remains
    assert b.backlog(1.2) == 0.0
    assert b.in_flight == 0


# A cost model unlike both shipped ones (and with its own KV bytes and bandwidth), so that a ledger that
# priced with anything but the cost model it is given would book other numbers.
OWN = CostModel.load("calibrated").with_overrides(name="own", tau_pre_base_s=0.02, tau_pre_per_token_s=2e-4,
                                                  tau_dec_s=0.03, xfer_latency_s=0.01, kv_bytes_per_token=1000,
                                                  xfer_bandwidth_bytes_per_s=1e8)


@pytest.mark.parametrize("cm", [CostModel.load("calibrated"), CostModel.load("sim_derived"), OWN],
                         ids=lambda cm: cm.name)
def test_ledger_books_its_cost_models_price_of_the_requests_in_flight(cm):
    """The prior anchoring (``prefill_answer``). Three requests in flight on one prefill and two decode
    instances: every backlog equals the cost model's pricing (module docstring) worked out here from
    the model's raw constants."""
    base, per_tok, dec, lat = cm.tau_pre_base_s, cm.tau_pre_per_token_s, cm.tau_dec_s, cm.xfer_latency_s

    def pre(L):  # chunked by the token budget, as the engine (a base per chunk)
        return math.ceil(L / cm.max_num_batched_tokens) * base + per_tok * L

    def xfer(L):
        return lat + L * cm.kv_bytes_per_token / cm.xfer_bandwidth_bytes_per_s

    led = Ledger(1, 2, cm, anchor="prefill_answer")
    led.dispatch("a", 0, 1, prompt_tokens=1000, output_estimate=500, now=0.0)
    led.dispatch("b", 0, 1, prompt_tokens=3000, output_estimate=100, now=0.1)
    led.dispatch("c", 0, 0, prompt_tokens=200, output_estimate=50, now=0.2)
    # the prefill is a FCFS queue: each prompt starts when the one before it would end
    end_a = pre(1000)
    end_b = max(end_a, 0.1) + pre(3000)
    end_c = max(end_b, 0.2) + pre(200)
    assert led.prefill[0].backlog(0.2) == pytest.approx(end_c - 0.2, rel=1e-12)
    assert led.prefill[0].in_flight == 3
    # decode: each request's transfer and output after its own prefill, summed per instance
    done_a, done_b = end_a + xfer(1000) + 500 * dec, end_b + xfer(3000) + 100 * dec
    assert led.decode[1].backlog(0.2) == pytest.approx((done_a - 0.2) + (done_b - 0.2), rel=1e-12)
    assert led.decode[0].backlog(0.2) == pytest.approx(end_c + xfer(200) + 50 * dec - 0.2, rel=1e-12)
    assert led.decode[1].tokens == 1000 + 500 + 3000 + 100
    # a's prefill answers late, at t=2: its prefill charge leaves, its decode work restarts from t=2
    led.prefill_done("a", now=2.0)
    assert led.prefill[0].in_flight == 2
    assert led.decode[1].backlog(2.0) == pytest.approx(
        (xfer(1000) + 500 * dec) + max(done_b - 2.0, 0.0), rel=1e-12)
    for key in ("a", "b", "c"):
        led.settle(key, now=2.5)
    assert len(led) == 0 and led.prefill[0].backlog(2.5) == 0.0
    assert led.decode[0].backlog(2.5) == 0.0 == led.decode[1].backlog(2.5)
    assert led.decode[1].in_flight == 0 and led.decode[1].tokens == 0.0



@pytest.mark.parametrize("cm", [CostModel.load("calibrated"), OWN], ids=lambda cm: cm.name)
def test_decode_work_counts_down_only_from_the_decode_start(cm):
    """The default anchoring (``decode_start``): a request's whole priced decode work stays on its decode
    instance until its decode starts, however long it waits after its prefill answered; from the start
    its ``o * tau_dec`` counts down; a second start (a resumed preemption) changes nothing."""
    dec, lat = cm.tau_dec_s, cm.xfer_latency_s

    def xfer(L):
        return lat + L * cm.kv_bytes_per_token / cm.xfer_bandwidth_bytes_per_s

    led = Ledger(1, 2, cm)
    assert led.anchor == "decode_start"
    led.dispatch("a", 0, 1, prompt_tokens=1000, output_estimate=500, now=0.0)
    led.dispatch("b", 0, 1, prompt_tokens=3000, output_estimate=100, now=0.1)
    whole_a, whole_b = xfer(1000) + 500 * dec, xfer(3000) + 100 * dec
    assert led.decode[1].backlog(0.1) == pytest.approx(whole_a + whole_b, rel=1e-12)
    led.prefill_done("a", now=1.0)
    led.prefill_done("b", now=1.5)
    assert led.prefill[0].in_flight == 0
    # both wait in the decode engine's queue: nothing drains, however long
    assert led.decode[1].backlog(50.0) == pytest.approx(whole_a + whole_b, rel=1e-12)
    led.decode_started("a", now=60.0)
    assert led.decode[1].backlog(60.0 + 100 * dec) == pytest.approx(400 * dec + whole_b, rel=1e-9)
    led.decode_started("a", now=70.0)  # again (after a preemption): ignored
    assert led.decode[1].backlog(60.0 + 100 * dec) == pytest.approx(400 * dec + whole_b, rel=1e-9)
    assert led.decode[1].backlog(60.0 + 600 * dec) == pytest.approx(whole_b, rel=1e-9)
    led.settle("b", now=61.0)  # failed before its decode started: its held work leaves
    assert led.decode[1].backlog(60.0 + 600 * dec) == 0.0
    led.settle("a", now=62.0)
    assert len(led) == 0 and led.decode[1].in_flight == 0 and led.decode[1].tokens == 0.0


def test_the_array_books_read_the_held_work_bit_for_bit():
    """A ledger with array books returns every book's own backlog, held work included."""
    cm = CostModel.load("calibrated")
    led = Ledger(2, 3, cm, arrays=True)
    for i in range(12):
        led.dispatch(f"r{i}", i % 2, i % 3, prompt_tokens=100 + 37 * i, output_estimate=50 + 11 * i, now=0.1 * i)
    for i in range(0, 12, 2):
        led.prefill_done(f"r{i}", now=1.3 + 0.01 * i)
    for i in range(0, 12, 3):
        led.decode_started(f"r{i}", now=1.5 + 0.01 * i)
    led.settle("r4", now=1.7)
    for now in (1.7, 2.0, 9.0):
        pre, dec = led.backlogs(now)
        assert dec.tolist() == [b.backlog(now) for b in led.decode]
        assert pre.tolist() == [b.backlog(now) for b in led.prefill]


def test_an_unknown_anchor_is_refused_by_name():
    with pytest.raises(ValueError, match="'anchor' must be one of"):
        Ledger(1, 1, CostModel.load("calibrated"), anchor="first_byte")
