import pytest
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


# A cost model unlike both shipped ones (and with its own KV bytes and bandwidth), so that a ledger that
# priced with anything but the cost model it is given would book other numbers.
OWN = CostModel.load("calibrated").with_overrides(name="own", tau_pre_base_s=0.02, tau_pre_per_token_s=2e-4,
                                                  tau_dec_s=0.03, xfer_latency_s=0.01, kv_bytes_per_token=1000,
                                                  xfer_bandwidth_bytes_per_s=1e8)


@pytest.mark.parametrize("cm", [CostModel.load("calibrated"), CostModel.load("sim_derived"), OWN],
                         ids=lambda cm: cm.name)
def test_ledger_books_its_cost_models_price_of_the_requests_in_flight(cm):
    """Three requests in flight on one prefill and two decode instances: every backlog equals the
    cost model's pricing (module docstring) worked out here from the model's raw constants."""
    base, per_tok, dec, lat = cm.tau_pre_base_s, cm.tau_pre_per_token_s, cm.tau_dec_s, cm.xfer_latency_s

    def pre(L):  # one chunk: all prompts here are below max_num_batched_tokens
        return base + per_tok * L

    def xfer(L):
        return lat + L * cm.kv_bytes_per_token / cm.xfer_bandwidth_bytes_per_s

    led = Ledger(1, 2, cm)
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

