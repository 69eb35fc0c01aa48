from hypothesis import given, settings
from hypothesis import strategies as st

from repro.routing.cost_model import CostModel
from repro.routing.ledger import Ledger, ParallelBook, SerialBook

ops = st.lists(
    st.tuples(
        st.sampled_from(["charge", "reanchor", "settle"]),
        st.sampled_from([0.0, 0.0, 0.5, 1.0, 3.0]),
        st.sampled_from([0.0, 0.5, 1.0, 2.0, 7.5]),
    ),
    min_size=1,
    max_size=120,
)


@settings(max_examples=200, deadline=None)
@given(ops, st.randoms(use_true_random=False))
def test_parallel_book_matches_brute_force(seq, rnd):
    book = ParallelBook()
    ends: dict[str, float] = {}
    now = 0.0
    for step, (op, dt, work) in enumerate(seq):
        now += dt
        if op == "charge" or not ends:
            key = f"k{step}"
            book.charge(key, now + work, 10.0, now)
            ends[key] = now + work
        elif op == "reanchor":
            key = rnd.choice(sorted(ends))
            book.reanchor(key, now + work, now)
            ends[key] = now + work
        else:
            key = rnd.choice(sorted(ends))
            book.settle(key, 10.0, now)
            del ends[key]
        brute = sum(max(e - now, 0.0) for e in ends.values())
        assert abs(book.backlog(now) - brute) < 1e-6
        assert book.in_flight == len(ends)
        assert abs(book.tokens - 10.0 * len(ends)) < 1e-9


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


def test_ledger_prices_with_the_routers_cost_model_and_settles():
    cal = CostModel.load("calibrated")
    wrong = CostModel.load("sim_derived")
    for cm in (cal, wrong):
        led = Ledger(1, 2, cm)
        led.dispatch("a", 0, 1, prompt_tokens=1000, output_estimate=500, now=0.0)
        assert abs(led.prefill[0].backlog(0.0) - cm.tau_pre(1000)) < 1e-12
        expected = cm.tau_pre(1000) + cm.tau_xfer(1000) + 500 * cm.tau_dec_s
        assert abs(led.decode[1].backlog(0.0) - expected) < 1e-9
        assert led.decode[0].backlog(0.0) == 0.0
        led.prefill_done("a", now=0.2)
        assert led.prefill[0].in_flight == 0
        assert abs(led.decode[1].backlog(0.2) - (cm.tau_xfer(1000) + 500 * cm.tau_dec_s)) < 1e-9
        led.settle("a", now=1.0)
        assert led.decode[1].backlog(1.0) == 0.0 and len(led) == 0
    # the miscalibrated book under-states the same work by the tau_dec ratio (7.4x)
    assert cal.tau_dec_s / wrong.tau_dec_s > 7.0
