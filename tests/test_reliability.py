"""Accounting that cannot drift, journals that survive kill -9, and the security defaults."""

from __future__ import annotations

import inspect
import json
from types import SimpleNamespace

import httpx
import pandas as pd
import pytest

from repro.cluster.launchers import launch
from repro.cluster.launchers.emulated import EmulatedLauncher
from repro.cluster.launchers.vllm import VllmLauncher
from repro.emulator.engine import EmulatorConfig
from repro.emulator.server import build_parser
from repro.experiment.journal import JournalWriter
from repro.experiment.journal import read as read_journal
from repro.experiment.metrics import AccountingError, check_accounting, summarize
from repro.journal_schema import empty_row
from repro.live.proxy.config import Endpoint, ProxyConfig
from repro.live.run import check_live_accounting, free_port, proxy_process


def _rows(n, status="ok", prefix="r"):
    out = []
    for i in range(n):
        row = empty_row()
        row.update(request_id=f"{prefix}{i}", slo_class="loose", prompt_tokens=10, output_tokens=5, status=status,
                   arrival_s=float(i), generated_tokens=5, preemptions=-1)
        out.append(row)
    return out


def test_journal_truncated_mid_line_drops_only_the_torn_row_and_appends_cleanly(tmp_path):
    path = tmp_path / "j.jsonl"
    with JournalWriter(path) as w:
        for row in _rows(5):
            w.write(row)
    data = path.read_bytes()
    last = data.rstrip(b"\n").rfind(b"\n") + 1
    for cut in (last + 1, last + (len(data) - last) // 2, len(data) - 1):  # kill -9 at any moment of the last write
        path.write_bytes(data[:cut])
        assert list(read_journal(path).request_id) == ["r0", "r1", "r2", "r3"]
        with JournalWriter(path) as w:  # a resumed writer truncates the torn tail before appending
            w.write(_rows(1, prefix="again")[0])
        j = read_journal(path)
        assert list(j.request_id) == ["r0", "r1", "r2", "r3", "again0"]
        check_accounting(j)
    path.write_bytes(data.replace(b'"r1"', b'"r1', 1))  # a corrupt line in the middle is an error, not silently lost
    with pytest.raises(ValueError, match="line 2"):
        read_journal(path)


def _report(sent, ok, failed=0, rejected=0):
    return SimpleNamespace(sent=sent, ok=ok, failed=failed, rejected=rejected)


def test_live_accounting_mismatches_are_errors():
    client = pd.concat([read_frame(_rows(3)), read_frame(_rows(1, "failed", "f")),
                        read_frame(_rows(1, "rejected", "x"))], ignore_index=True)
    assert check_live_accounting(_report(5, 3, 1, 1), client) == {"ok": 3, "failed": 1, "rejected": 1}
    with pytest.raises(AccountingError, match="sent=6"):
        check_live_accounting(_report(6, 3, 1, 1), client)  # a request sent but never journaled
    with pytest.raises(AccountingError, match="load generator counted"):
        check_live_accounting(_report(5, 4, 0, 1), client)
    with pytest.raises(AccountingError, match="twice"):
        check_live_accounting(_report(5, 3, 1, 1), client, read_frame(_rows(2) + _rows(1)[:1]))
    with pytest.raises(AccountingError, match="never sent"):
        check_live_accounting(_report(5, 3, 1, 1), client, read_frame(_rows(1, prefix="ghost")))
    with pytest.raises(AccountingError):
        check_accounting(pd.concat([client, client.iloc[:1]], ignore_index=True))  # duplicated id
    from repro.routing.cost_model import CostModel

    # the counts by status, and goodput over all sent: two of the three completed rows meet the loose
    # TTFT target (3 x 0.175 s); the failed row's fast TTFT does not make it good
    slo = CostModel.load("calibrated").slo
    scored = client.assign(ttft_s=[0.1, 0.5, 1.0, 0.1, None])
    s = summarize(scored, slo, sent=5)
    assert {k: s[k] for k in ("requests", "completed", "failed", "rejected")} == {
        "requests": 5, "completed": 3, "failed": 1, "rejected": 1}
    assert s["goodput"] == pytest.approx(2 / 5)
    assert summarize(scored.iloc[:3], slo, sent=3)["goodput"] == pytest.approx(2 / 3)
    with pytest.raises(AccountingError):
        summarize(client, CostModel.load("calibrated").slo, sent=7)


def read_frame(rows):
    from repro.experiment.journal import frame

    return frame(rows)


def test_servers_bind_loopback_by_default():
    assert EmulatorConfig().host == "127.0.0.1" and build_parser().parse_args([]).host == "127.0.0.1"
    assert ProxyConfig(endpoints=[Endpoint("p", "prefill", "http://x:1"),
                                  Endpoint("d", "decode", "http://x:2")]).host == "127.0.0.1"
    for cls in (EmulatedLauncher, VllmLauncher):
        assert inspect.signature(cls.__init__).parameters["host"].default == "127.0.0.1"
    assert "s3" not in repr(ProxyConfig(endpoints=[Endpoint("p", "prefill", "http://x:1"),
                                                   Endpoint("d", "decode", "http://x:2")], api_key="s3"))


def test_api_key_is_honoured_by_engines_and_forwarded_by_the_proxy_and_never_written(tmp_path):
    key = "k9-secret"
    with launch("1p1d", "emulated", time_scale=20.0, extra_args=["--api-key", key]) as inst:
        eng = inst[1].url
        body = {"prompt": "hi there", "max_tokens": 3, "ignore_eos": True}
        assert httpx.post(eng + "/v1/completions", json=body, timeout=10).status_code == 401
        assert httpx.post(eng + "/v1/completions", json=body, headers={"Authorization": f"Bearer {key}"},
                          timeout=10).status_code == 200
        assert httpx.get(eng + "/health", timeout=5).status_code == 200  # as vLLM: only /v1 needs the key
        cfg = ProxyConfig(endpoints=[Endpoint(i.name, i.role, i.url) for i in inst],
                          journal=str(tmp_path / "proxy.jsonl"),
                          time_scale=20.0, port=free_port(), api_key=key, predictor="constant")
        with proxy_process(cfg, tmp_path) as url:
            assert httpx.post(url + "/v1/completions", json=body, timeout=10).status_code == 401
            r = httpx.post(url + "/v1/completions", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=10)
            assert r.status_code == 200, r.text  # forwarded to both engines
    for name in ("proxy.json", "proxy.jsonl", "proxy.log"):
        assert key not in (tmp_path / name).read_text(), name
    assert json.loads((tmp_path / "proxy.json").read_text())["api_key"] is None
