"""A policy that breaks its contract gets a clear error and loses nothing (`repro.routing.policies.base`,
"When a policy misbehaves"): import paths that do not resolve, classes that miss part of the contract,
an exception inside a decision, a decision naming no usable instance, decisions over the time budget.
The policies are in tests/policies_bad.py (importable on workers and in a proxy process)."""

from __future__ import annotations

import asyncio
import importlib
import json
import re
import sys

import httpx
import pytest
from typer.testing import CliRunner

from repro.cli.root import app
from repro.errors import ConfigError, PolicyError, RunFailed
from repro.experiment.executor import LocalExecutor, SerialExecutor
from repro.experiment.journal import frame_bytes
from repro.experiment.runner import describe_spec, run, simulate_spec, simulate_timed, sweep_results
from repro.experiment.spec import RunSpec
from repro.live.run import check_policy, run_live_valid
from repro.routing.cost_model import CostModel
from repro.routing.policies import POLICIES, make_policy
from repro.routing.policies.base import RequestInfo
from repro.routing.router import DecisionTimes, Router

BAD = "tests.policies_bad"
CONTRACT = "does not meet the policy contract (repro.routing.policies.base): "
POOLS = ("prefill [0 prefill-0 healthy, 1 prefill-1 healthy], decode [0 decode-0 healthy, 1 decode-1 healthy, "
         "2 decode-2 healthy, 3 decode-3 healthy]")
VALID = "valid (healthy) indices: prefill [0..1], decode [0..3]"


def spec(policy: str, n: int = 50, **kw) -> RunSpec:
    return RunSpec(policy=policy, n_requests=n, rate=16.0, **kw)


def config_error(name: str, **options) -> str:
    with pytest.raises(ConfigError) as err:
        make_policy(name, None, **options)
    return str(err.value)


# ---- 1. an import path that does not resolve -----------------------------------------------------
def test_an_import_path_that_does_not_resolve_names_it_and_why():
    assert config_error("no_such_pkg_xyz.routers:Mine") == (
        "policy: cannot import 'no_such_pkg_xyz.routers:Mine': no module named 'no_such_pkg_xyz' "
        "(is its folder on the Python path?)")
    assert config_error("tests.no_such_module:Mine") == (
        "policy: cannot import 'tests.no_such_module:Mine': no module named 'tests.no_such_module' "
        "(is its folder on the Python path?)")
    assert config_error(f"{BAD}:Nope").startswith(
        f"policy: cannot import '{BAD}:Nope': module '{BAD}' has no attribute 'Nope'; its classes with a place "
        "method: AlwaysFirst, Broken, ")
    assert config_error(f"{BAD}:") == f"policy: import path '{BAD}:' must be 'package.module:ClassName'"


def test_a_module_that_raises_on_import_says_which_module_failed_and_why(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "syntax_router.py").write_text("class Mine:\n    def place(self, request, view:\n        pass\n")
    (tmp_path / "dep_router.py").write_text("import os\nimport not_installed_dep_xyz\n")
    (tmp_path / "boom_helper.py").write_text("X = 1\nraise RuntimeError('boom at import')\n")
    (tmp_path / "uses_boom.py").write_text("import boom_helper\n")
    importlib.invalidate_caches()
    assert config_error("syntax_router:Mine") == (
        "policy: cannot import 'syntax_router:Mine': importing module 'syntax_router' failed: SyntaxError: "
        f"'(' was never closed ({tmp_path / 'syntax_router.py'}, line 2)")
    assert config_error("dep_router:Mine") == (
        "policy: cannot import 'dep_router:Mine': importing module 'dep_router' failed: ModuleNotFoundError: "
        f"No module named 'not_installed_dep_xyz' ({tmp_path / 'dep_router.py'}, line 2)")
    # the module named imports one that raises: the message points at the one that raised
    assert config_error("uses_boom.Mine") == (
        "policy: cannot import 'uses_boom.Mine': importing module 'uses_boom' failed: RuntimeError: boom at import "
        f"({tmp_path / 'boom_helper.py'}, line 2)")


# ---- 2. a class missing part of the contract -------------------------------------------------------
def test_a_class_without_place_or_with_the_wrong_arity_is_named():
    assert config_error(f"{BAD}:NoPlace") == (
        f"policy '{BAD}:NoPlace' {CONTRACT}it has no place(request, view) method")
    assert config_error(f"{BAD}:WrongArity") == (
        f"policy '{BAD}:WrongArity' {CONTRACT}its place(self, request) cannot be called as place(request, view)")
    assert config_error(f"{BAD}:NotImplemented_") == (
        f"policy '{BAD}:NotImplemented_' {CONTRACT}it does not implement place(request, view) (it inherits "
        "Policy.place, which raises)")
    assert config_error(f"{BAD}:not_a_class") == (
        f"policy '{BAD}:not_a_class' {CONTRACT}it is not a class but a function (a policy is a class with a "
        "place(request, view) method)")


def test_one_message_lists_all_that_is_missing_and_constructors_are_checked_with_the_options():
    assert config_error(f"{BAD}:Broken") == (
        f"policy '{BAD}:Broken' {CONTRACT}its place(self, request, view, extra) cannot be called as "
        "place(request, view); its name = 3 is not a non-empty str; its constructor __init__(cost_model=None, *, "
        "needed) cannot be called as Broken(cost_model=...): missing a required argument: 'needed' (every option "
        "needs a default, or a value given with the spec's policy_options)")
    assert "missing a required argument: 'needed'" in config_error(f"{BAD}:NeedsOption")
    assert make_policy(f"{BAD}:NeedsOption", None, needed=1).needed == 1  # given: fine
    assert config_error(f"{BAD}:ConstructorRaises") == (
        f"policy '{BAD}:ConstructorRaises': its constructor raised KeyError: 'missing table'")
    assert config_error(f"{BAD}:NoPlace", bogus=1).endswith("it has no place(request, view) method")
    # a spec names it before anything runs
    with pytest.raises(ConfigError, match="it has no place"):
        spec(f"{BAD}:NoPlace")


def test_registered_and_well_formed_user_policies_still_resolve():
    for name, cls in POLICIES.items():
        assert type(make_policy(name, None)) is cls
    assert make_policy("tests.test_policies:AlwaysLast", None).name == "always_last"
    assert make_policy("tests.test_policies:ForwardingMarginalCost", None, use_slo=False).use_slo is False


# ---- 3. an exception inside a decision ---------------------------------------------------------------
def test_an_exception_in_place_is_a_policy_error_naming_the_request_and_the_candidates():
    with pytest.raises(PolicyError) as err:
        simulate_spec(spec(f"{BAD}:RaisesOnFifth"))
    assert str(err.value) == (f"policy '{BAD}:RaisesOnFifth' raised on request 'mixed-s1-000004': "
                              f"ZeroDivisionError: division by zero; candidates: {POOLS}")
    assert isinstance(err.value.__cause__, ZeroDivisionError)
    with pytest.raises(PolicyError) as err:  # a message of several lines is kept on one
        simulate_spec(spec(f"{BAD}:Raises"))
    assert str(err.value) == (f"policy '{BAD}:Raises' raised on request 'mixed-s1-000000': ValueError: no route "
                              f"today | second line; candidates: {POOLS}")
    with pytest.raises(PolicyError) as err:  # the router's charge for it is the policy's too
        simulate_spec(spec(f"{BAD}:EstimateRaises"))
    assert str(err.value) == (f"policy '{BAD}:EstimateRaises' raised in output_estimate() on request "
                              f"'mixed-s1-000000': KeyError: 'mixed-s1-000000'; candidates: {POOLS}")
    assert isinstance(err.value.__cause__, KeyError)


FIXABLE = '''from repro.routing.policies.baselines import RoundRobin


class Fixable(RoundRobin):
    name = "fixable"

    def place(self, request, view):
        self.n = getattr(self, "n", 0) + 1
        if BROKEN and self.n == 5:
            raise RuntimeError("broken on the 5th")
        return super().place(request, view)


BROKEN = {broken}
'''


def test_a_failed_run_keeps_the_others_and_is_redone_once_the_policy_is_fixed(tmp_path, monkeypatch):
    mods = tmp_path / "mods"
    mods.mkdir()
    monkeypatch.syspath_prepend(str(mods))
    (mods / "fixable_router.py").write_text(FIXABLE.format(broken=True))
    importlib.invalidate_caches()
    good, bad = spec("round_robin", seed=2), spec("fixable_router:Fixable")
    out = tmp_path / "runs"
    with pytest.raises(PolicyError) as err:
        sweep_results([good, bad], out, executor=SerialExecutor())
    assert isinstance(err.value, RunFailed)  # the command line: one line, exit code 1
    assert str(err.value) == (
        f"run {bad.run_id} ({describe_spec(bad)}) failed on serial x1: policy 'fixable_router:Fixable' raised on "
        f"request 'mixed-s1-000004': RuntimeError: broken on the 5th; candidates: {POOLS}. The runs finished "
        f"before it are kept under {out}; run the sweep again to resume")
    kept = {p.name: p.read_bytes() for p in (out / good.run_id).iterdir()}
    assert set(kept) == {"journal.jsonl", "manifest.json"} and json.loads(kept["manifest.json"])["complete"]
    assert not (out / bad.run_id).exists()  # nothing half-written to mistake for finished
    # fixed: the next sweep keeps the finished run and redoes the failed one
    (mods / "fixable_router.py").write_text(FIXABLE.format(broken=False) + "# fixed\n")
    sys.modules.pop("fixable_router", None)
    importlib.invalidate_caches()
    again = sweep_results([good, bad], out, executor=SerialExecutor())
    assert [r.skipped for r in again] == [True, False]
    assert {p.name: p.read_bytes() for p in (out / good.run_id).iterdir()} == kept
    assert json.loads((out / bad.run_id / "manifest.json").read_text())["complete"]
    rr = simulate_spec(spec("round_robin"))  # the fixed policy decides as round-robin does
    assert (out / bad.run_id / "journal.jsonl").read_bytes() == frame_bytes(rr)


@pytest.mark.slow
def test_a_policy_error_on_a_worker_stays_a_policy_error_with_the_run_id(tmp_path):
    good, bad = spec("round_robin", seed=3), spec(f"{BAD}:RaisesOnFifth", seed=3)
    with LocalExecutor(2) as pool, pytest.raises(PolicyError) as err:
        sweep_results([good, bad], tmp_path, executor=pool)
    assert str(err.value).startswith(f"run {bad.run_id} ({describe_spec(bad)}) failed on local x2: policy "
                                     f"'{BAD}:RaisesOnFifth' raised on request 'mixed-s3-000004': ZeroDivisionError")
    assert not (tmp_path / bad.run_id / "manifest.json").exists()


# ---- 4. a decision naming no usable instance ------------------------------------------------------
@pytest.mark.parametrize("name, returned, problem", [
    ("OutOfRange", "Placement(prefill=2, decode=0)", "prefill index 2 is out of range 0..1"),
    ("Negative", "Placement(prefill=0, decode=-1)", "decode index -1 is out of range 0..3"),
    ("NotAnInt", "Placement(prefill=1.0, decode=True)",
     "prefill index 1.0 is not an int (a float); decode index True is not an int (a bool)"),
    ("WrongType", "(0, 1)", "a tuple is neither a Placement nor a Rejection"),
])
def test_a_decision_naming_no_usable_instance_is_a_policy_error(name, returned, problem):
    with pytest.raises(PolicyError) as err:
        simulate_spec(spec(f"{BAD}:{name}"))
    assert str(err.value) == (f"policy '{BAD}:{name}' returned an invalid decision for request 'mixed-s1-000000': "
                              f"{returned}: {problem}; {VALID}")


def test_a_placement_on_an_unhealthy_instance_is_a_policy_error():
    cm = CostModel.load("calibrated")
    router = Router(make_policy(f"{BAD}:AlwaysFirst", cm), cm, ["p0", "p1"], ["d0", "d1", "d2"])
    req = RequestInfo("r7", 100, 50.0, "tight", 0.0)
    assert router.route(req, 0.0).prefill == 0  # healthy: placed
    router.set_health("prefill", 0, False)
    with pytest.raises(PolicyError) as err:
        router.route(RequestInfo("r8", 100, 50.0, "tight", 0.0), 0.0)
    assert str(err.value) == (f"policy '{BAD}:AlwaysFirst' returned an invalid decision for request 'r8': "
                              "Placement(prefill=0, decode=0): prefill index 0 names p0, which is unhealthy; "
                              "valid (healthy) indices: prefill [1], decode [0..2]")
    assert "r8" not in router.ledger  # nothing charged
    # the candidates of a raising policy say which are unhealthy
    raising = Router(make_policy(f"{BAD}:Raises", cm), cm, ["p0", "p1"], ["d0"])
    raising.set_health("prefill", 1, False)
    with pytest.raises(PolicyError, match=r"candidates: prefill \[0 p0 healthy, 1 p1 UNHEALTHY\], decode "
                                          r"\[0 d0 healthy\]$"):
        raising.route(req, 0.0)


def test_numpy_integer_indices_are_taken_as_ints():
    a = simulate_spec(spec(f"{BAD}:NumpyRoundRobin", 300))
    assert frame_bytes(a) == frame_bytes(simulate_spec(spec("round_robin", 300)))


# ---- 5. decisions too slow --------------------------------------------------------------------------
def test_a_run_over_its_decision_budget_fails_with_the_percentiles(tmp_path):
    tight = spec("round_robin", decision_budget_us=0.001)
    with pytest.raises(PolicyError) as err:
        run(tight, tmp_path)
    assert re.fullmatch(
        r"policy 'round_robin': decisions too slow: p99 (\d+\.\d) us over the budget of 0\.001 us "
        r"\(decision_budget_us\); measured over 50 decisions \(wall time of place\(\) on this machine\): "
        r"p50 \d+\.\d us, p99 \1 us, max \d+\.\d us", str(err.value)), str(err.value)
    assert not (tmp_path / tight.run_id).exists()  # not marked finished: a rerun redoes it


def test_decision_times_are_reported_apart_from_the_journal_and_the_summary(tmp_path):
    plain = spec("round_robin")
    res = run(plain, tmp_path)
    dt = res.decision_time
    assert set(dt) == {"p50_us", "p99_us", "max_us", "n"} and dt["n"] == 50 and 0 < dt["p50_us"] <= dt["max_us"]
    manifest = json.loads((res.run_dir / "manifest.json").read_text())
    # a simulated manifest stays the same bytes on every machine: no timings in it, nor in the summary
    assert "decision_time" not in manifest and not any("decision" in k for k in manifest["summary"])
    assert "decision_budget_us" not in plain.to_dict()  # unset: run ids made before the field hold
    timed = spec("round_robin", decision_budget_us=1e6)
    res = run(timed, tmp_path)
    manifest = json.loads((res.run_dir / "manifest.json").read_text())
    assert manifest["complete"] and manifest["decision_time"] == res.decision_time
    assert res.decision_time["n"] == 50
    assert manifest["spec"]["decision_budget_us"] == 1e6 and timed.run_id != plain.run_id
    journal = (res.run_dir / "journal.jsonl").read_bytes()
    assert journal == (tmp_path / plain.run_id / "journal.jsonl").read_bytes()  # the same journal
    assert simulate_timed(plain)[1]["n"] == 50


def test_a_live_runs_manifest_gets_the_proxys_decision_times(tmp_path):
    timing = {"p50_us": 3.0, "p99_us": 9.5, "max_us": 40.0, "n": 20}

    def attempt(s, run_dir):  # what repro.live.run.run_live leaves: validity.json with the proxy's report
        (run_dir / "validity.json").write_text(json.dumps({"valid": True, "reasons": [], "measured": {},
                                                           "proxy": {"decision_time": timing}}))
        return None

    _, live = run_live_valid(RunSpec(backend="emulated", n_requests=20), tmp_path, attempt=attempt)
    assert live["decision_time"] == timing


def test_a_live_run_stops_on_the_proxys_policy_errors_and_on_its_budget():
    live = RunSpec(backend="emulated", n_requests=20, decision_budget_us=5.0)
    ok = {"decision_time": {"p50_us": 3.0, "p99_us": 4.5, "max_us": 40.0, "n": 20},
          "policy_errors": {"count": 0, "first": None}}
    check_policy(live, ok)
    with pytest.raises(PolicyError) as err:
        check_policy(live, {**ok, "policy_errors": {"count": 2, "first": "policy 'x' raised on request 'r1': ..."}})
    assert str(err.value) == (f"run {live.run_id}: the policy broke its contract on 2 request(s) of the replay "
                              "(answered 500, journaled failed in proxy.jsonl and client.jsonl); the first: policy "
                              "'x' raised on request 'r1': ...")
    with pytest.raises(PolicyError) as err:
        check_policy(live, {**ok, "decision_time": {"p50_us": 3.0, "p99_us": 7.25, "max_us": 40.0, "n": 20}})
    assert str(err.value) == (f"run {live.run_id}: policy 'marginal_cost': decisions too slow: p99 7.2 us over the "
                              "budget of 5 us (decision_budget_us); measured over 20 decisions (wall time of place() "
                              "on this machine): p50 3.0 us, p99 7.2 us, max 40.0 us")


def test_decision_times_keep_a_bounded_systematic_sample():
    t = DecisionTimes()
    for ns in range(1, 1001):
        t.record(ns * 1000)
    assert t.summary() == {"p50_us": 500.5, "p99_us": 990.01, "max_us": 1000.0, "n": 1000}
    t = DecisionTimes(keep=64)
    for ns in range(1, 1001):
        t.record(ns)
    assert len(t.samples) < 64 and t.n == 1000 and t.max_ns == 1000
    assert t.samples == list(range(1, 1001, 16))  # every 16th decision: a systematic sample of the whole run
    assert DecisionTimes().summary() == {"p50_us": None, "p99_us": None, "max_us": None, "n": 0}


# ---- the proxy ------------------------------------------------------------------------------------------
def test_the_proxy_answers_500_with_the_policy_error_and_serves_on(tmp_path):
    from repro.live.proxy.app import create_app
    from repro.live.proxy.config import Endpoint, ProxyConfig

    cfg = ProxyConfig(endpoints=[Endpoint("prefill-0", "prefill", "http://127.0.0.1:9"),
                                 Endpoint("decode-0", "decode", "http://127.0.0.1:9")],
                      policy=f"{BAD}:Raises", journal=str(tmp_path / "proxy.jsonl"))
    app = create_app(cfg)

    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as c:
            body = {"model": "m", "prompt": "hello", "max_tokens": 4}
            first = await c.post("/v1/completions", json=body, headers={"X-Request-Id": "req-1"})
            second = await c.post("/v1/completions", json=body, headers={"X-Request-Id": "req-2"})
            return first, second, (await c.get("/health")).json(), (await c.get("/metrics")).text

    first, second, health, metrics = asyncio.run(go())
    app.state.proxy.journal.close()
    message = (f"policy error: policy '{BAD}:Raises' raised on request 'req-1': ValueError: no route today | second "
               "line; candidates: prefill [0 prefill-0 healthy], decode [0 decode-0 healthy]")
    assert first.status_code == 500 and first.json()["error"] == {"message": message, "type": "PolicyError",
                                                                   "param": None, "code": 500}
    assert second.status_code == 500 and "'req-2'" in second.json()["error"]["message"]  # it served on
    assert health["policy_errors"] == {"count": 2, "first": message.removeprefix("policy error: ")}
    assert health["decision_time"]["n"] == 0  # only decisions that returned are timed
    assert "repro_proxy_policy_errors_total 2.0" in metrics and "repro_proxy_decision_seconds_bucket" in metrics
    rows = [json.loads(line) for line in (tmp_path / "proxy.jsonl").read_text().splitlines()]
    assert [(r["request_id"], r["status"], r["reason"]) for r in rows] == [
        ("req-1", "failed", message), ("req-2", "failed", message.replace("req-1", "req-2"))]


# ---- the command line ----------------------------------------------------------------------------------
@pytest.mark.parametrize("policy, code, words", [
    (f"{BAD}:RaisesOnFifth", 1, ["run failed:", "raised on request 'mixed-s1-000004'", "ZeroDivisionError"]),
    (f"{BAD}:OutOfRange", 1, ["run failed:", "prefill index 2 is out of range 0..1"]),
    (f"{BAD}:WrongArity", 2, ["error:", "cannot be called as place(request, view)"]),
    ("no_such_pkg_xyz:Mine", 2, ["error:", "no module named 'no_such_pkg_xyz'"]),
])
def test_the_command_line_says_it_in_one_line_and_exits_non_zero(tmp_path, policy, code, words):
    result = CliRunner().invoke(app, ["run", "--policy", policy, "-n", "50", "--out", str(tmp_path)])
    assert result.exit_code == code, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    assert all(w in lines[0] for w in words), lines[0]


@pytest.mark.slow
def test_a_live_run_whose_policy_raises_stops_with_no_manifest_and_its_rows_kept(tmp_path):
    live = RunSpec.from_flat(backend="emulated", workload="chat", rate=20.0, n_requests=20, seed=2, time_scale=4.0,
                             topology="1p2d", policy=f"{BAD}:RaisesOnFifth")
    with pytest.raises(PolicyError) as err:
        run(live, tmp_path, on_invalid="keep")
    first = (f"policy '{BAD}:RaisesOnFifth' raised on request 'chat-s2-000004': ZeroDivisionError: division by zero; "
             "candidates: prefill [0 prefill-0 healthy], decode [0 decode-0 healthy, 1 decode-1 healthy]")
    assert str(err.value) == (f"run {live.run_id}: the policy broke its contract on 1 request(s) of the replay "
                              f"(answered 500, journaled failed in proxy.jsonl and client.jsonl); the first: {first}")
    run_dir = tmp_path / live.run_id
    assert not (run_dir / "manifest.json").exists() and not (run_dir / "journal.jsonl").exists()
    proxy = [json.loads(line) for line in (run_dir / "proxy.jsonl").read_text().splitlines()]
    client = [json.loads(line) for line in (run_dir / "client.jsonl").read_text().splitlines()]
    assert len(proxy) == len(client) == 20  # every row, whole
    failed = [r for r in proxy if r["status"] != "ok"]
    assert [(r["request_id"], r["reason"]) for r in failed] == [("chat-s2-000004", f"policy error: {first}")]
    assert {r["request_id"]: r["status"] for r in client}["chat-s2-000004"] == "failed"
