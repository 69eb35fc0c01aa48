"""Open-loop replay: schedule, journaling (exactly once), statuses and reasons, lag report.

Most tests run against a tiny fake OpenAI server (uvicorn in a thread) whose behaviour per request
is chosen by the request id; the crash test kills a real emulated engine mid-run.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from repro.cluster.launchers.base import wait_healthy
from repro.cluster.processes import free_ports, terminate_pids
from repro.cluster.topology import Instance
from repro.experiment import journal
from repro.live.loadgen import ReplayReport, replay, replay_sync
from tests.conftest import default_sigint, synthetic_trace

REPO = Path(__file__).resolve().parent.parent
MODEL = "fake-model"


# ---- a fake OpenAI-compatible server ------------------------------------------------------------
def make_fake_app(log: list) -> FastAPI:
    """Behaviour by X-Request-Id: 'slow' (first token after 1.5 s), 'r429', 'e500', 'cut' (stream
    closed without [DONE]), 'short' (one token fewer), 'hdr' (sets X-*-Instance headers); else
    max_tokens tokens, one chunk each, 5 ms apart."""
    app = FastAPI()

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": MODEL, "object": "model"}]}

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await request.json()
        rid = request.headers.get("x-request-id", "")
        log.append({"rid": rid, "t": time.monotonic(), "slo": request.headers.get("x-slo-class"), "body": body})
        n = int(body["max_tokens"])
        if "r429" in rid:
            return JSONResponse({"error": {"message": "router full", "type": "RateLimit", "code": 429}},
                                status_code=429, headers={"Retry-After": "3"})
        if "e500" in rid:
            return JSONResponse({"error": {"message": "engine exploded", "code": 500}}, status_code=500)
        headers = {}
        if "hdr" in rid:
            headers = {"X-Prefill-Instance": "prefill-7", "X-Decode-Instance": "decode-3"}

        async def gen():
            if "slow" in rid:
                await asyncio.sleep(1.5)
            k = n - 1 if "short" in rid else n
            for i in range(k):
                if "cut" in rid and i == 2:
                    raise RuntimeError("connection dropped")  # uvicorn closes the stream mid-body
                chunk = {"choices": [{"index": 0, "text": f" w{i}", "finish_reason": None}], "usage": None}
                yield f"data: {json.dumps(chunk)}\n\n".encode()
                await asyncio.sleep(0.005)
            final = {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": k, "total_tokens": 5 + k}}
            yield f"data: {json.dumps(final)}\n\n".encode()
            yield b"data: [DONE]\n\n"

        return StreamingResponse(gen(), media_type="text/event-stream", headers=headers)

    return app


class ThreadServer:
    def __init__(self, app):
        self.port = free_ports(1)[0]
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="critical",
                                                    access_log=False, lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "fake server did not start"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(timeout=5)


@pytest.fixture(scope="module")
def fake():
    log: list = []
    with ThreadServer(make_fake_app(log)) as srv:
        srv.log = log
        yield srv


def trace_with(ids: list[str], arrivals: list[float], out: int = 8) -> pd.DataFrame:
    df = synthetic_trace(len(ids), 10.0, prompt=12, output=out, seed=1)
    df["request_id"] = ids
    df["arrival_s"] = arrivals
    return df


def rows_by_id(path) -> dict[str, dict]:
    df = journal.read(path)
    assert not df["request_id"].duplicated().any(), "a request was journaled twice"
    return {r["request_id"]: r for r in df.to_dict("records")}


# ---- tests ----------------------------------------------------------------------------------------
def test_open_loop_statuses_reasons_and_journal(fake, tmp_path):
    ids = ["a-slow-0", "a-ok-1", "a-r429-2", "a-e500-3", "a-cut-4", "a-short-5", "a-hdr-6", "a-ok-7", "a-ok-8"]
    arrivals = [0.05 + 0.1 * k for k in range(len(ids))]  # physics s; time_scale 2 -> 50 ms wall apart
    df = trace_with(ids, arrivals)
    j = tmp_path / "j.jsonl"
    before = len(fake.log)
    t0 = time.monotonic()
    rep = replay_sync(df, fake.url, journal_path=j, time_scale=2.0, timeout_s=20)
    wall = time.monotonic() - t0
    assert isinstance(rep, ReplayReport)
    assert (rep.sent, rep.ok, rep.failed, rep.rejected) == (9, 5, 3, 1)
    rows = rows_by_id(j)
    assert set(rows) == set(ids)
    # open loop: the slow first request (1.5 s) did not hold back the later sends. Each send is
    # judged against its own schedule (50 ms apart from the first), not against its neighbour:
    # one send late by a busy core and the next on time again is open-loop; a closed loop would
    # hold the second send back by the first request's 1.5 s.
    sends = {e["rid"]: e["t"] for e in fake.log[before:]}
    offsets = np.array([sends[i] for i in ids]) - sends[ids[0]]
    lateness = offsets - 0.05 * np.arange(len(ids))
    assert np.all(np.abs(lateness) < 0.15), lateness
    assert rows["a-ok-1"]["finish_s"] < rows["a-slow-0"]["first_token_s"]
    assert wall < 10.0  # ~2 s: the slow request's 1.5 s; never its 20 s timeout (a request left hanging)
    # the body and headers sent
    first = next(e for e in fake.log[before:] if e["rid"] == "a-ok-1")
    b = first["body"]
    assert b["model"] == MODEL and b["max_tokens"] == 8 and b["ignore_eos"] is True and b["temperature"] == 0
    assert b["stream"] is True and b["stream_options"] == {"include_usage": True}
    assert first["slo"] == df.loc[1, "slo_class"]
    from repro.workload.traces import prompt_text

    assert b["prompt"] == prompt_text(df, 1)
    # statuses and reasons
    assert rows["a-r429-2"]["status"] == "rejected" and "Retry-After: 3" in rows["a-r429-2"]["reason"]
    assert "router full" in rows["a-r429-2"]["reason"]
    assert rows["a-e500-3"]["status"] == "failed" and rows["a-e500-3"]["reason"].startswith("HTTP 500")
    assert "engine exploded" in rows["a-e500-3"]["reason"]
    assert rows["a-cut-4"]["status"] == "failed"
    assert "without [DONE]" in rows["a-cut-4"]["reason"] or "transport" in rows["a-cut-4"]["reason"]
    assert rows["a-short-5"]["status"] == "failed" and "7 of 8" in rows["a-short-5"]["reason"]
    assert rows["a-hdr-6"]["prefill_instance"] == "prefill-7" and rows["a-hdr-6"]["decode_instance"] == "decode-3"
    # ok rows: client-side timings in physics seconds (wall x 2), schema of the journal
    for rid in ("a-ok-1", "a-hdr-6", "a-ok-7", "a-slow-0"):
        r = rows[rid]
        assert r["status"] == "ok" and r["reason"] is None or pd.isna(r["reason"])
        assert r["generated_tokens"] == 8 and r["preemptions"] == -1
        assert pd.isna(r["prefill_end_s"]) and pd.isna(r["decode_start_s"]) and pd.isna(r["predicted_output_tokens"])
        assert r["arrival_s"] == pytest.approx(arrivals[ids.index(rid)])
        assert 0 <= r["prefill_start_s"] - r["arrival_s"] < 0.05  # physics s (25 ms wall)
        assert r["first_token_s"] >= r["prefill_start_s"] and r["finish_s"] >= r["first_token_s"]
        assert r["ttft_s"] == pytest.approx(r["first_token_s"] - r["arrival_s"])
        assert r["tpot_s"] == pytest.approx((r["e2e_s"] - r["ttft_s"]) / 7)
    # 7 gaps of >= 5 ms wall = >= 10 ms physics each
    assert rows["a-ok-1"]["e2e_s"] - rows["a-ok-1"]["ttft_s"] >= 7 * 0.005 * 2 * 0.9
    assert rows["a-slow-0"]["ttft_s"] == pytest.approx(1.5 * 2, abs=0.3)
    # lag report
    assert 0 <= rep.lag_p50_s <= rep.lag_p99_s <= rep.lag_max_s < 0.025
    assert rep.keeping_up == (rep.lag_p99_s <= rep.lag_threshold_s == 0.005)
    assert rep.physics_s == pytest.approx(rep.wall_s * 2)
    assert ("kept up" if rep.keeping_up else "DID NOT KEEP UP") in str(rep)


def test_burst_beyond_the_client_says_it_did_not_keep_up(fake, tmp_path):
    n = 150
    df = trace_with([f"b-ok-{k}" for k in range(n)], [0.01] * n, out=2)
    rep = replay_sync(df, fake.url, journal_path=tmp_path / "j.jsonl", time_scale=1.0, model=MODEL,
                      prompts=["hi"] * n)
    assert rep.sent == n and rep.ok == n
    assert rep.lag_max_s > 0.005 and not rep.keeping_up
    assert "DID NOT KEEP UP" in str(rep)
    assert len(rows_by_id(tmp_path / "j.jsonl")) == n


def test_timeout_is_journaled_as_failed(fake, tmp_path):
    df = trace_with(["t-slow-0", "t-ok-1"], [0.0, 0.01])
    rep = replay_sync(df, fake.url, journal_path=tmp_path / "j.jsonl", timeout_s=0.5, model=MODEL)
    rows = rows_by_id(tmp_path / "j.jsonl")
    assert (rep.ok, rep.failed) == (1, 1)
    assert rows["t-slow-0"]["status"] == "failed" and rows["t-slow-0"]["reason"].startswith("timeout")
    assert rows["t-slow-0"]["finish_s"] == pytest.approx(0.5, abs=0.2)


def test_cancel_journals_in_flight_as_cancelled_and_nothing_unsent(fake, tmp_path):
    ids = [f"c-slow-{k}" for k in range(4)] + [f"c-ok-{k}" for k in range(4, 8)]
    df = trace_with(ids, [0.0, 0.05, 0.1, 0.15, 5.0, 5.1, 5.2, 5.3])
    j = tmp_path / "j.jsonl"

    async def main():
        task = asyncio.create_task(replay(df, fake.url, journal_path=j, model=MODEL))
        # cancel once the four slow ones are in flight (each answers after 1.5 s), before the rest are due
        deadline = time.monotonic() + 10.0
        while sum(1 for e in list(fake.log) if e["rid"].startswith("c-slow")) < 4:
            assert time.monotonic() < deadline, "the four slow requests were never sent"
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    rows = rows_by_id(j)
    assert set(rows) == {f"c-slow-{k}" for k in range(4)}  # sent ones, each once; unsent: none
    assert all(r["status"] == "failed" and r["reason"] == "cancelled" for r in rows.values())


def test_ctrl_c_on_the_cli_journals_in_flight(fake, tmp_path):
    from repro.workload.traces import Trace

    ids = [f"k-slow-{k}" for k in range(3)] + ["k-ok-9"]
    df = trace_with(ids, [0.0, 0.05, 0.1, 30.0])
    trace_file = Trace(df, {"workload": "chat", "seed": 1}).save(tmp_path / "t.parquet")
    j = tmp_path / "j.jsonl"
    script = ("import typer\nfrom repro.cli.loadgen import loadgen_cli\napp = typer.Typer()\n"
              "app.command()(loadgen_cli)\napp()\n")
    proc = subprocess.Popen([sys.executable, "-c", script, "--url", fake.url, "--trace", str(trace_file),
                             "--journal", str(j), "--no-progress"], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    try:
        deadline = time.monotonic() + 20
        while sum(1 for e in list(fake.log) if e["rid"].startswith("k-slow")) < 3:
            assert time.monotonic() < deadline and proc.poll() is None, (
                proc.stderr.read() if proc.poll() is not None else "")
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    rows = rows_by_id(j)
    assert set(rows) == {f"k-slow-{k}" for k in range(3)}
    assert all(r["reason"] == "cancelled" for r in rows.values())


def test_engine_killed_mid_run_every_request_journaled(tmp_path):
    """A real emulated engine (time scale 10) is killed while requests stream; the run finishes."""
    K = 10.0
    port = free_ports(1)[0]
    proc = subprocess.Popen([sys.executable, "-m", "repro.emulator", "--port", str(port), "--time-scale", str(K),
                             "--stream-interval-tokens", "4"], cwd=REPO, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    inst = Instance("engine", "decode", f"http://127.0.0.1:{port}", pid=proc.pid)
    try:
        wait_healthy([inst], 30)
        n = 40
        df = synthetic_trace(n, 10.0, prompt=100, output=120, seed=3)
        df["arrival_s"] = np.linspace(0.1, 20.0, n)  # physics s: 2 s of wall at K=10
        j = tmp_path / "j.jsonl"

        def kill_after_five_ok() -> None:  # mid-run by what has happened, not by the clock (a loaded machine)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                lines = j.read_text().splitlines() if j.exists() else []
                if sum(json.loads(x).get("status") == "ok" for x in lines if x.strip()) >= 5:
                    break
                time.sleep(0.01)
            os.killpg(proc.pid, signal.SIGKILL)

        killer = threading.Thread(target=kill_after_five_ok)
        killer.start()
        rep = replay_sync(df, inst.url, journal_path=j, time_scale=K, timeout_s=10)
        killer.join()
    finally:
        terminate_pids([proc.pid], procs={proc.pid: proc})
    rows = rows_by_id(j)
    assert rep.sent == n and len(rows) == n and rep.ok + rep.failed + rep.rejected == n
    statuses = pd.Series([r["status"] for r in rows.values()])
    assert (statuses == "ok").sum() >= 5 and (statuses == "failed").sum() >= 10
    for r in rows.values():
        if r["status"] == "failed":
            assert r["reason"] and any(s in r["reason"] for s in ("transport error", "without [DONE]", "timeout"))
            assert r["finish_s"] >= r["prefill_start_s"]
        else:
            assert r["generated_tokens"] == 120 and r["tpot_s"] > 0
    # the requests sent after the kill could not connect
    late = [r for r in rows.values() if r["arrival_s"] > 15.0]
    assert late and all(r["status"] == "failed" and "transport error" in r["reason"] for r in late)


def test_trace_object_against_an_emulated_engine_ttft_in_physics_seconds(tmp_path):
    """With time scale K the journal holds physics seconds: TPOT ~ the profile's decode step."""
    from repro.engine.profile import load_profile
    from repro.workload.traces import make_trace

    K = 10.0
    port = free_ports(1)[0]
    proc = subprocess.Popen([sys.executable, "-m", "repro.emulator", "--port", str(port), "--time-scale", str(K)],
                            cwd=REPO, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        inst = Instance("engine", "decode", f"http://127.0.0.1:{port}")
        wait_healthy([inst], 30)
        trace = make_trace("chat", 0, 0.5, 4)  # sparse: requests barely overlap
        rep = replay_sync(trace, inst.url, journal_path=tmp_path / "j.jsonl", time_scale=K)
    finally:
        terminate_pids([proc.pid], procs={proc.pid: proc})
    df = journal.read(tmp_path / "j.jsonl")
    assert rep.ok == 4 and list(df["status"]) == ["ok"] * 4
    assert (df["generated_tokens"] == df["output_tokens"]).all()
    phys = load_profile().physics
    tp = df["tpot_s"].median()
    assert phys.decode_step_s(1, 500) * 0.8 < tp < phys.decode_step_s(1, 500) * 1.6
    assert (df["ttft_s"] > phys.prefill_base_net_s * 0.9).all()


def test_a_second_ctrl_c_stops_the_load_generator_at_once(tmp_path, monkeypatch, capsys):
    """The first Ctrl-C asks the replay's process to journal its requests in flight (SIGINT, said on the
    terminal); a second one while it does kills it (SIGKILL), and the KeyboardInterrupt reaches the caller."""
    import signal
    import subprocess

    from repro.live import loadgen
    from repro.workload.traces import make_trace

    class Child:
        pid = 0

        def wait(self, timeout=None):
            raise KeyboardInterrupt  # the first Ctrl-C, while the replay runs

    sent = []

    def stop(proc, sig, timeout):
        sent.append(sig)
        if sig == signal.SIGINT:
            raise KeyboardInterrupt  # the second Ctrl-C, while it journals what is in flight

    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: Child())
    monkeypatch.setattr(loadgen, "stop_process", stop)
    with pytest.raises(KeyboardInterrupt):
        loadgen.replay_process(make_trace("chat", seed=1, rate=5.0, n_requests=5), "http://127.0.0.1:9",
                               journal_path=tmp_path / "j", work_dir=tmp_path)
    assert sent == [signal.SIGINT, signal.SIGKILL]
    assert "Ctrl-C again to stop it at once" in capsys.readouterr().err
