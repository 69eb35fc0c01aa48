"""`repro.live.run_account`: a live run's CPU booked to its parts, and an engine's own account of its requests."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from repro.live.run_account import CpuAccount, request_time_delta

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass\n"


def test_cpu_is_booked_to_the_engine_the_driver_and_outside():
    """A process named as an engine (and its child), one of the driver's own, and one outside the run: each one's
    CPU seconds land on its part, a process that ends during the interval counts up to its last sample."""
    outside = subprocess.Popen([sys.executable, "-c", BURN.format(s=0.6)], start_new_session=True)
    engine = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time\n"
                               f"subprocess.run([sys.executable, '-c', {BURN.format(s=0.4)!r}])\ntime.sleep(1)"])
    acc = CpuAccount({"prefill-0": engine.pid}, driver=engine.pid + 10**7, period_s=0.1)  # a driver not running
    acc.start()
    own = subprocess.Popen([sys.executable, "-c", BURN.format(s=0.3)])
    for p in (outside, engine, own):
        p.wait(timeout=60)
    time.sleep(0.2)
    acc.stop()
    cpu = acc.cpu_s()
    assert cpu["prefill-0:frontend"] == pytest.approx(0.4, abs=0.25)  # its child's burn (the parent only waits)
    assert cpu["outside"] >= 0.5  # the independent burner and the test's own child (its driver is another pid)
    shares = acc.shares()
    assert sum(shares["share"].values()) == pytest.approx(1.0) and shares["cores"] >= 1
    # the series: every sample's time, each part's CPU since the start, never falling, ending at the totals
    series = acc.series()
    times = series["t_unix"]
    assert len(times) >= 3 and times == sorted(times)
    for part, values in series["cpu_s"].items():
        assert len(values) == len(times) and values == sorted(values), part
        assert values[-1] == pytest.approx(cpu[part], abs=1e-3), part


def test_an_engines_account_is_the_mean_per_request_between_two_scrapes():
    before = {"u": {"vllm:request_queue_time_seconds": (1.0, 10), "vllm:request_inference_time_seconds": (5.0, 10),
                    "vllm:e2e_request_latency_seconds": (7.0, 10)}}
    after = {"u": {"vllm:request_queue_time_seconds": (3.0, 20), "vllm:request_inference_time_seconds": (15.0, 20),
                   "vllm:e2e_request_latency_seconds": (19.0, 20)}}
    row = request_time_delta(before, after, {"u": "prefill-0"})["prefill-0"]
    assert row["requests"] == 10 and row["queue_s"] == pytest.approx(0.2) and row["inference_s"] == pytest.approx(1.0)
    assert row["frontend_s"] == pytest.approx(1.2 - 0.2 - 1.0)
