"""The validity verdict of live runs (`repro.live.validity`) and what the runner does with it."""

import json

import pandas as pd
import pytest

from repro.errors import RunInvalid
from repro.experiment import runner
from repro.experiment.spec import RunSpec
from repro.live.validity import (
    CpuSampler,
    Thresholds,
    harness_latency,
    judge,
    lateness_between,
    time_scales_to_try,
)


def test_time_scales_halve_down_to_one_then_retry_once_at_one():
    assert time_scales_to_try(4) == [4.0, 2.0, 1.0, 1.0]
    assert time_scales_to_try(3) == [3.0, 1.5, 1.0, 1.0]
    assert time_scales_to_try(1) == [1.0, 1.0]


def test_lags_are_judged_in_physics_seconds():
    t = Thresholds(client_lag_p99_s=0.010)
    ok = judge(time_scale=1, client_lag_p99_s=0.008, proxy=None, engine_late_p99_s=None,
               engine_lost_fraction=None, cpu_steal_fraction=None, thresholds=t)
    assert ok.valid and ok.measured["client_lag_p99_s"] == pytest.approx(0.008)
    bad = judge(time_scale=4, client_lag_p99_s=0.008, proxy=None, engine_late_p99_s=None,
                engine_lost_fraction=None, cpu_steal_fraction=None, thresholds=t)
    assert not bad.valid and bad.reasons == ["client_lag_p99_s = 0.032 s > 0.01 s"]
    proxy = {"loop_lag_p99_s": 0.5, "poll_gap_excess_p99_s": 0.0}
    v = judge(time_scale=1, client_lag_p99_s=0.001, proxy=proxy, engine_late_p99_s=0.0, engine_lost_fraction=0.5,
              cpu_steal_fraction=0.9)
    assert [r.split(" =")[0] for r in v.reasons] == ["proxy_loop_lag_p99_s", "engine_lost_fraction",
                                                      "cpu_steal_fraction"]
    assert not judge(time_scale=1, client_lag_p99_s=float("nan"), proxy=None, engine_late_p99_s=None,
                     engine_lost_fraction=None, cpu_steal_fraction=None).valid


def test_harness_latency_is_client_ttft_minus_time_in_the_engines():
    client = pd.DataFrame({"request_id": ["a", "b", "c", "d"], "status": ["ok", "ok", "failed", "ok"],
                           "ttft_s": [0.300, 0.200, float("nan"), 0.5]})
    records = {
        "p0": [{"request_id": "a", "prefill_only": True, "arrival_s": 10.0, "finish_s": 10.2, "first_token_s": 10.2},
               {"request_id": "b", "prefill_only": True, "arrival_s": 11.0, "finish_s": 11.1, "first_token_s": 11.1},
               {"request_id": "c", "prefill_only": True, "arrival_s": 12.0, "finish_s": 12.1, "first_token_s": 12.1}],
        "d0": [{"request_id": "a", "prefill_only": False, "arrival_s": 5.0, "first_token_s": 5.09, "finish_s": 9.0},
               {"request_id": "b", "prefill_only": False, "arrival_s": 6.0, "first_token_s": 6.07, "finish_s": 7.0},
               # d never reached a decode engine; gate requests (other ids) are ignored
               {"request_id": "gate-1", "prefill_only": False, "arrival_s": 1.0, "first_token_s": 1.1,
                "finish_s": 1.2}],
    }
    lat = harness_latency(client, records)
    # a: 0.300 - 0.2 - 0.09 = 0.010; b: 0.200 - 0.1 - 0.07 = 0.030
    assert lat["n"] == 2 and lat["mean_s"] == pytest.approx(0.020) and lat["p50_s"] == pytest.approx(0.020)
    assert harness_latency(client, {}) is None  # real engines: not measured


def test_only_what_the_time_scale_adds_to_the_harness_latency_is_judged():
    t = Thresholds(harness_added_latency_s=0.003)
    kw = dict(client_lag_p99_s=0.001, proxy=None, engine_late_p99_s=None, engine_lost_fraction=None,
              cpu_steal_fraction=None, thresholds=t)
    at1 = judge(time_scale=1, harness_latency_p50_s=0.006, **kw)  # what any run has: not judged
    assert at1.valid and at1.measured["harness_added_latency_s"] == 0.0
    at2 = judge(time_scale=2, harness_latency_p50_s=0.010, **kw)  # 5 ms wall: 10 ms physics, 5 ms of it added
    assert not at2.valid and at2.reasons == ["harness_added_latency_s = 0.005 s > 0.003 s"]
    assert judge(time_scale=2, harness_latency_p50_s=0.004, **kw).valid
    assert judge(time_scale=4, harness_latency_p50_s=None, **kw).measured["harness_added_latency_s"] is None
    assert judge(time_scale=4, harness_latency_p50_s=None, **kw).valid  # real engines: nothing to judge
    # engines that kept their times, requests that could not be matched (an external router): K = 1 only
    assert judge(time_scale=1, harness_latency_p50_s=None, harness_latency_unjoinable=True, **kw).valid
    assert not judge(time_scale=2, harness_latency_p50_s=None, harness_latency_unjoinable=True, **kw).valid


def test_lateness_between_two_snapshots():
    buckets = [0.001, 0.01, 0.1]
    before = {"a": {"buckets_wall_s": buckets, "counts": [90, 0, 0, 0], "lost_wall_s": 1.0}}
    after = {"a": {"buckets_wall_s": buckets, "counts": [190, 0, 0, 0], "lost_wall_s": 1.0},
             "b": {"buckets_wall_s": buckets, "counts": [95, 2, 3, 0], "lost_wall_s": 0.5}}
    p99, lost = lateness_between(before, after, wall_s=10.0)
    assert p99 == 0.1 and lost == pytest.approx(0.05)  # 3 of 200 steps in (0.01, 0.1]; b lost 0.5 of 10 s
    assert lateness_between({}, {}, 10.0) == (None, None)
    quiet = {"a": {"buckets_wall_s": buckets, "counts": [100, 1, 0, 0], "lost_wall_s": 0.0}}
    assert lateness_between({}, quiet, 10.0)[0] == 0.001


def test_cpu_steal_from_proc_stat(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 100 800 0 0 0 0 0 0\n")
    s = CpuSampler(str(stat))
    s.start()
    stat.write_text("cpu  150 0 150 850 0 0 0 50 0 0\n")  # 200 ticks, 50 stolen
    assert s.steal_fraction() == pytest.approx(0.25)
    assert CpuSampler(str(tmp_path / "missing")).steal_fraction() is None


def _fake_live(verdicts, seen):
    def run_live(spec, run_dir):
        valid, reasons = verdicts[len(seen)]
        seen.append(spec.live.time_scale)
        (run_dir / "validity.json").write_text(json.dumps(
            {"valid": valid, "reasons": reasons, "measured": {"client_lag_p99_s": 0.1}, "time_scale": 1.0}))
        return pd.DataFrame({"request_id": ["r0"], "status": ["ok"]})
    return run_live


@pytest.fixture
def live_spec(monkeypatch):
    import repro.live.run

    monkeypatch.setattr(runner, "summarize", lambda journal, slo, sent: {"goodput": 1.0})
    monkeypatch.setattr(runner, "sha256", lambda path: "x")
    return repro.live.run, RunSpec.from_flat(backend="emulated", topology="1p1d", n_requests=1, time_scale=4.0)


def test_an_invalid_attempt_is_retried_at_lower_time_scales_and_the_manifest_says_so(live_spec, monkeypatch, tmp_path):
    live, spec = live_spec
    seen = []
    monkeypatch.setattr(live, "run_live", _fake_live([(False, ["lag"]), (True, [])], seen))
    res = runner.run(spec, tmp_path)
    assert seen == [4.0, 2.0]
    assert res.summary["valid"] is True and res.summary["time_scale_used"] == 2.0
    m = json.loads((res.run_dir / "manifest.json").read_text())
    assert [a["valid"] for a in m["attempts"]] == [False, True] and m["valid"] is True


def test_a_run_never_valid_stops_with_the_cause_and_what_to_do(live_spec, monkeypatch, tmp_path):
    live, spec = live_spec
    seen = []
    monkeypatch.setattr(live, "run_live", _fake_live([(False, ["client_lag_p99_s = 0.1 s > 0.01 s"])] * 4, seen))
    with pytest.raises(RunInvalid, match=r"K=4: client_lag_p99_s = 0.1 s > 0.01 s.*K=1.*lower the time scale"):
        runner.run(spec, tmp_path)
    assert seen == [4.0, 2.0, 1.0, 1.0]
    assert not (tmp_path / spec.run_id / "manifest.json").exists()  # never summarized as a result
    assert len((tmp_path / spec.run_id / "attempts.jsonl").read_text().splitlines()) == 4


def test_keep_records_an_invalid_run_as_invalid(live_spec, monkeypatch, tmp_path):
    live, spec = live_spec
    seen = []
    monkeypatch.setattr(live, "run_live", _fake_live([(False, ["lag"])], seen))
    res = runner.run(spec, tmp_path, on_invalid="keep")
    assert seen == [4.0] and res.summary["valid"] is False
