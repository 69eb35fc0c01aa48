"""Shared test helpers."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

# Tests simulate for real: a cached result (repro.experiment.simcache) would hide a monkeypatched
# simulator; tests of the cache turn it on for themselves.
os.environ["REPRO_SIM_CACHE"] = "off"
# ... and sweeps run in this process (a monkeypatch does not reach worker processes); the parallel
# executors have their own tests (test_parallel_sweep.py, test_ray_executor.py), which pass them explicitly.
os.environ["REPRO_JOBS"] = "1"
# ... and tests start engines of their own on free ports of 127.0.0.1 even while a user's `repro cluster up`
# engines run (they never touch them); tests of the refusal unset it (tests/test_cluster_reuse.py).
os.environ["REPRO_BESIDE_CLUSTER"] = "1"


def synthetic_trace(n: int, rate: float, prompt, output, seed: int = 0, slo=None) -> pd.DataFrame:
    """A Poisson trace with the given prompt/output lengths (scalars or arrays)."""
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(1.0 / rate, n))
    prompt = np.broadcast_to(np.asarray(prompt, dtype=np.int64), (n,)).copy()
    output = np.broadcast_to(np.asarray(output, dtype=np.int64), (n,)).copy()
    if slo is None:
        slo = rng.choice(["tight", "loose"], n)
    return pd.DataFrame(
        {
            "request_id": [f"t{seed}-{i:05d}" for i in range(n)],
            "arrival_s": arrival,
            "family": ["chat"] * n,
            "source_index": np.zeros(n, dtype=np.int64),
            "prompt_tokens": prompt,
            "output_tokens": output,
            "slo_class": slo,
        }
    )


def default_sigint() -> None:
    """``preexec_fn`` for a child that must react to Ctrl-C: a runner started in the background
    (nohup, CI) may ignore SIGINT, and Python then installs no KeyboardInterrupt handler."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def make_trace_df():
    return synthetic_trace


BYSTANDER = """
import signal, sys, time
out = open(sys.argv[1], "a", buffering=1)
def note(sig, frame):
    out.write(f"{sig}\\n")
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGQUIT):
    signal.signal(s, note)
print("up", flush=True)
while True:
    time.sleep(3600)
"""


@pytest.fixture(scope="session", autouse=True)
def bystander(tmp_path_factory):
    """A long-lived process of the same user beside the whole test session (as `repro paper`'s notebook kernels
    are beside a user's test run: in a session of its own, like a kernel): no test may signal it. It writes every
    signal it receives; at the session's end it must be alive and have received none."""
    import subprocess
    import sys

    log = tmp_path_factory.mktemp("bystander") / "signals.txt"
    proc = subprocess.Popen([sys.executable, "-c", BYSTANDER, str(log)], start_new_session=True,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "up"
    yield proc
    alive = proc.poll() is None
    got = log.read_text().split() if log.exists() else []
    proc.kill()
    proc.wait()
    proc.stdout.close()
    assert alive and not got, (f"a test signalled a process it did not start (the bystander, pid {proc.pid}): "
                               f"{'it died' if not alive else 'signals ' + ', '.join(got)}")
