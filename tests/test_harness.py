"""Live runs through the whole harness (emulated engines, proxy, gates, load generator)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from repro.engine.profile import load_profile
from repro.experiment.journal import read as read_journal
from repro.experiment.runner import run
from repro.experiment.spec import RunSpec
from repro.routing.cost_model import CostModel


@pytest.mark.slow
def test_emulated_run_end_to_end(tmp_path):
    spec = RunSpec.from_flat(backend="emulated", workload="chat", rate=20.0, n_requests=60, seed=2, time_scale=4.0,
                             topology="1p2d")
    res = run(spec, tmp_path, on_invalid="keep")  # the mechanics are tested here, not the machine
    j = read_journal(res.journal_path)
    assert len(j) == 60 and j.request_id.is_unique
    assert (j.status == "ok").all(), j.reason.dropna().tolist()[:3]
    assert (j.generated_tokens == j.output_tokens).all()
    assert j.decode_instance.notna().all() and j.predicted_output_tokens.notna().all()
    assert (j.prefill_end_s >= j.prefill_start_s - 0.05).all() and (j.first_token_s >= j.prefill_end_s).all()
    # the proxy's ledger anchored each decode at the decode engine's first streamed token, which it
    # saw after the prefill answered and (with the clocks' offset) about when the client did
    assert j.decode_started_s.notna().all()
    assert (j.decode_started_s >= j.prefill_end_s).all()
    assert (j.decode_started_s - j.first_token_s).abs().max() < 0.25
    for name in ("gates.json", "loadgen.json", "proxy.jsonl", "client.jsonl", "manifest.json"):
        assert (res.run_dir / name).exists(), name
    # goodput is scored on the journal against the deployment's SLO targets (hand-counted here), and no
    # request beats the physics: its TTFT is at least its lone prefill + KV transfer + first decode step
    # (5 % slack for the engines' early wake-ups; a slow machine only adds time)
    slo = CostModel.load("calibrated").slo
    factor = np.where(j.slo_class == "tight", 1.0, slo.loose_factor)
    tpot = j.tpot_s.to_numpy(float)
    good = (j.ttft_s.to_numpy(float) <= slo.ttft_tight_s * factor) & (
        np.isnan(tpot) | (tpot <= slo.tpot_tight_s * factor))
    assert res.summary["requests"] == 60 and res.summary["completed"] == 60
    assert res.summary["goodput"] == pytest.approx(good.sum() / 60)
    phys = load_profile().physics
    alone = np.array([phys.prefill_request_time_s(n) + phys.transfer_time_s(n) + phys.decode_step_s(1, n)
                      for n in j.prompt_tokens.astype(int)])
    assert (j.ttft_s.to_numpy(float) >= 0.95 * alone).all()


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.slow
def test_sweep_killed_with_sigkill_resumes_without_loss_or_repeats(tmp_path):
    out = tmp_path / "runs"
    cmd = [sys.executable, "-m", "repro.cli", "run", "--backend", "emulated", "--topology", "1p1d",
           "--workload", "chat", "--rate", "15", "-n", "90", "--time-scale", "4",
           "--policy", "round_robin,least_loaded", "--on-invalid", "keep", "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while not list(out.glob("*/manifest.json")):  # the first run finished
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
    while not list(out.glob("*least_loaded*/client.jsonl")):  # the second one is under way
        assert time.monotonic() < deadline
        time.sleep(0.1)
    time.sleep(1.0)
    kids = _children(proc.pid)
    assert kids  # engines and the proxy
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    t = time.monotonic()
    while any(_alive(k) for k in kids) and time.monotonic() - t < 10:
        time.sleep(0.2)
    assert not any(_alive(k) for k in kids), "a server outlived its killed harness"
    done = {p.parent.name for p in out.glob("*/manifest.json")}
    assert len(done) == 1
    first_manifest = next(out.glob("*/manifest.json")).read_bytes()
    # start again: the finished run is skipped, the half-written one is redone from scratch
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=180)
    manifests = sorted(out.glob("*/manifest.json"))
    assert len(manifests) == 2
    assert (out / next(iter(done)) / "manifest.json").read_bytes() == first_manifest
    for m in manifests:
        j = read_journal(m.parent / "journal.jsonl")
        assert len(j) == 90 and j.request_id.is_unique
        c = read_journal(m.parent / "client.jsonl")
        assert len(c) == 90 and c.request_id.is_unique  # the redone run did not append to the killed one
