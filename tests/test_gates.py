"""Correctness gates against emulated engines (and one fake engine that miscounts tokens)."""

from __future__ import annotations

import json
import threading
import time

import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from repro.cli.gates import render_rich
from repro.cluster.launchers import launch
from repro.cluster.processes import free_ports
from repro.cluster.topology import Instance
from repro.errors import ConfigError
from repro.live.gates import (
    GateFailure,
    GatesReport,
    greedy_equivalence,
    render_text,
    reset_prefix_caches,
    run_gates,
    token_contract,
    warm_up,
)

K = 10.0


@pytest.fixture(scope="module")
def cluster():
    """1 prefill, 2 healthy decode instances and one with the `diverge` fault."""
    topo = {"name": "gates", "instances": [
        {"role": "prefill", "count": 1},
        {"role": "decode", "count": 2},
        {"role": "decode", "name": "odd", "faults": ["diverge"]},
    ]}
    with launch(topo, "emulated", time_scale=K) as inst:
        yield {i.name: i for i in inst}


def pick(cluster, *names):
    return [cluster[n] for n in names]


def test_healthy_1p2d_passes_every_gate(cluster):
    inst = pick(cluster, "prefill-0", "decode-0", "decode-1")
    seen = []
    rep = run_gates(inst, n_tokens=40, on_report=seen.append)
    assert isinstance(rep, GatesReport) and rep.passed
    assert [r.gate for r in rep.reports] == ["reset_prefix_cache", "warm_up", "token_contract", "greedy_equivalence",
                                            "reset_prefix_cache (after)"]
    assert [r.gate for r in seen] == [r.gate for r in rep.reports]
    assert {c.instance for c in rep["reset_prefix_cache"].checks} == {"prefill-0", "decode-0", "decode-1"}
    assert {c.instance for c in rep["warm_up"].checks} == {"prefill-0->decode-0", "prefill-0->decode-1"}
    assert all(c.data["kv"] for c in rep["warm_up"].checks)  # the KV was handed over, not recomputed
    for c in rep["token_contract"].checks:
        assert c.ok and c.data["usage_completion_tokens"] == 40 and c.data["streamed_tokens"] == 40
        assert c.data["retokenized"] == 40 and c.data["finish_reason"] == "length" and c.data["done"]
    assert {c.instance for c in rep["greedy_equivalence"].checks} == {"decode-0", "decode-1"}
    text = render_text(rep)
    assert "FAIL" not in text and "[PASS] greedy_equivalence" in text
    from rich.console import Console

    Console(file=open("/dev/null", "w")).print(render_rich(rep))
    json.dumps(rep.to_dict())


def test_prefix_cache_is_empty_after_the_gates(cluster):
    import httpx

    def cached(name):
        return httpx.get(cluster[name].url + "/_emulator/state", trust_env=False).json()["cached_blocks"]

    run_gates(pick(cluster, "prefill-0", "decode-0"), n_tokens=8, n_prompts=1, reset_after=False)
    assert cached("prefill-0") > 0 and cached("decode-0") > 0  # the gates' own prompts
    run_gates(pick(cluster, "prefill-0", "decode-0"), n_tokens=8, n_prompts=1)
    for name in ("prefill-0", "decode-0"):
        state = httpx.get(cluster[name].url + "/_emulator/state", trust_env=False).json()
        assert state["cached_blocks"] == 0


def test_diverged_decode_instance_is_named_majority(cluster):
    inst = pick(cluster, "prefill-0", "decode-0", "decode-1", "odd")
    with pytest.raises(GateFailure) as ei:
        run_gates(inst)
    e = ei.value
    assert isinstance(e, ConfigError)
    assert e.gate == "greedy_equivalence" and e.instance == "odd"
    assert "odd" in str(e) and "differs at character" in str(e) and "majority" in str(e)
    assert "decode-0" not in str(e).split("odd", 1)[0].replace("gate greedy_equivalence failed on ", "")
    gates = e.gates
    assert [r.gate for r in gates.reports][-1] == "greedy_equivalence" and not gates.passed
    rows = {c.instance: c.ok for c in gates["greedy_equivalence"].checks}
    assert rows == {"decode-0": True, "decode-1": True, "odd": False}
    # the contract still held on the diverged instance: only the text differs
    assert all(c.ok for c in gates["token_contract"].checks)


def test_diverged_decode_instance_is_named_on_a_tie(cluster):
    """Two decode instances disagree: the prefill engine's own output breaks the tie."""
    with pytest.raises(GateFailure) as ei:
        greedy_equivalence(pick(cluster, "prefill-0"), pick(cluster, "decode-0", "odd"))
    assert ei.value.instance == "odd"
    assert "tie broken by prefill-0" in str(ei.value)
    # the other order names the same instance
    with pytest.raises(GateFailure) as ei:
        greedy_equivalence(pick(cluster, "prefill-0"), pick(cluster, "odd", "decode-0"))
    assert ei.value.instance == "odd"


def test_warm_up_every_pair_and_unreachable_engine(cluster):
    rep = warm_up(pick(cluster, "prefill-0"), pick(cluster, "decode-0", "decode-1", "odd"))
    assert rep.passed and len(rep.checks) == 3
    dead = Instance("decode-9", "decode", f"http://127.0.0.1:{free_ports(1)[0]}")
    with pytest.raises(GateFailure) as ei:
        warm_up(pick(cluster, "prefill-0"), [cluster["decode-0"], dead])
    assert ei.value.instance == "decode-9" and "/v1/models" in str(ei.value)


def test_reset_without_dev_mode_says_to_set_it():
    with launch("1p1d", "emulated", time_scale=K, dev_mode=False) as inst:
        with pytest.raises(GateFailure) as ei:
            reset_prefix_caches(inst)
    msg = str(ei.value)
    assert ei.value.gate == "reset_prefix_cache" and ei.value.instance == "prefill-0"
    assert "VLLM_SERVER_DEV_MODE=1" in msg and "404" in msg and "decode-0" in msg


# ---- a fake engine that breaks the token contract -------------------------------------------------
def miscounting_engine(off_by: int) -> FastAPI:
    app = FastAPI()

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": "m", "object": "model"}]}

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await request.json()
        kv = body.get("kv_transfer_params") or {}
        if kv.get("do_remote_decode"):
            return {"choices": [{"index": 0, "text": " a", "finish_reason": "length"}],
                    "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
                    "kv_transfer_params": {"do_remote_prefill": True, "do_remote_decode": False,
                                           "remote_block_ids": [1], "remote_engine_id": "x",
                                           "remote_request_id": "r", "remote_host": "127.0.0.1",
                                           "remote_port": 1, "tp_size": 1}}
        n = int(body["max_tokens"])

        async def gen():
            for i in range(n - off_by):
                chunk = {"choices": [{"index": 0, "text": f" t{i}",
                                      "finish_reason": None if i < n - off_by - 1 else "length"}],
                         "usage": {"prompt_tokens": 5, "completion_tokens": i + 1, "total_tokens": 6 + i}}
                yield f"data: {json.dumps(chunk)}\n\n".encode()
            final = {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": 5 + n}}
            yield f"data: {json.dumps(final)}\n\n".encode()
            yield b"data: [DONE]\n\n"

        return StreamingResponse(gen(), media_type="text/event-stream")

    return app


def test_token_contract_catches_a_stream_short_of_its_usage():
    port = free_ports(1)[0]
    server = uvicorn.Server(uvicorn.Config(miscounting_engine(3), host="127.0.0.1", port=port, log_level="critical",
                                           lifespan="off"))
    th = threading.Thread(target=server.run, daemon=True)
    th.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        url = f"http://127.0.0.1:{port}"
        with pytest.raises(GateFailure) as ei:
            token_contract([Instance("p", "prefill", url)], [Instance("liar", "decode", url)], n_tokens=20)
        e = ei.value
        assert e.gate == "token_contract" and e.instance == "liar"
        assert "streamed pieces carry 17 tokens" in str(e)
        c = e.report.checks[0]
        assert c.data["usage_completion_tokens"] == 20 and c.data["streamed_tokens"] == 17
    finally:
        server.should_exit = True
        th.join(timeout=5)


def test_cli_gates_a_cluster_and_fails_with_the_instance():
    import typer
    from typer.testing import CliRunner

    from repro.cli.gates import gates_cli

    app = typer.Typer()
    app.command("gates")(gates_cli)
    app.command("other")(lambda: None)
    res = CliRunner().invoke(app, ["gates", "--cluster", "1p1d", "--time-scale", "10", "--n-tokens", "16"])
    assert res.exit_code == 0, res.output
    assert "[PASS] greedy_equivalence" in res.output and "all gates passed" in res.output
    res = CliRunner().invoke(app, ["gates"])
    assert res.exit_code != 0 and isinstance(res.exception, ConfigError)
