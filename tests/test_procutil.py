import asyncio

import pytest

from repro.cluster.processes import run_sync


async def _answer(x):
    await asyncio.sleep(0)
    return x * 2


async def _boom():
    raise ValueError("from the coroutine")


def test_run_sync_outside_and_inside_a_running_loop():
    assert run_sync(_answer(21)) == 42

    async def notebook_cell():  # a Jupyter kernel runs cells inside a running event loop
        return run_sync(_answer(5))

    assert asyncio.run(notebook_cell()) == 10


def test_run_sync_propagates_exceptions_from_the_worker_thread():
    async def cell():
        return run_sync(_boom())

    with pytest.raises(ValueError, match="from the coroutine"):
        asyncio.run(cell())


def test_live_nice_reads_the_environment_and_names_the_variable_when_wrong(monkeypatch):
    from repro.cluster.processes import DEFAULT_LIVE_NICE, LIVE_NICE_ENV, live_nice
    from repro.errors import ConfigError

    monkeypatch.delenv(LIVE_NICE_ENV, raising=False)
    assert live_nice() == DEFAULT_LIVE_NICE == -5
    for raw, want in (("off", None), ("OFF", None), ("7", 7), (" -20 ", -20), ("19", 19)):
        monkeypatch.setenv(LIVE_NICE_ENV, raw)
        assert live_nice() == want
    for raw in ("-21", "20", "high", "1.5"):
        monkeypatch.setenv(LIVE_NICE_ENV, raw)
        with pytest.raises(ConfigError, match=r"REPRO_LIVE_NICE.*-20 to 19"):
            live_nice()


def test_launched_engines_run_at_the_live_niceness(monkeypatch):
    """The launcher's children get `live_nice` (here +5: raising niceness needs no privilege) on the
    process and, where Linux has scheduling autogroups, on the session each leads."""
    import os

    from repro.cluster.launchers import launch
    from repro.cluster.processes import LIVE_NICE_ENV, priority_of

    monkeypatch.setenv(LIVE_NICE_ENV, "5")
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    with launch("1p1d", "emulated") as instances:
        pids = {i.pid for i in instances}
        prios = [priority_of(pid) for pid in pids]
    assert len(pids) == 2
    for prio in prios:
        assert prio["nice"] == max(5, mine)
        assert prio["autogroup_nice"] in (None, 5)  # None: no autogroups on this kernel
    assert os.getpriority(os.PRIO_PROCESS, 0) == mine  # the caller is untouched


def test_live_servers_settle_their_startup_heap_and_the_caller_does_not(tmp_path, monkeypatch):
    """Engines and the proxy freeze what they allocated while starting (`settle_heap`), so that no
    full collection of it stalls them mid-run; launching them freezes nothing in the caller."""
    import gc

    import httpx

    from repro.cluster.launchers import launch
    from repro.live.proxy.config import Endpoint, ProxyConfig
    from repro.live.run import free_port, proxy_process

    monkeypatch.delenv("REPRO_LIVE_SCHED", raising=False)
    before = gc.get_freeze_count()
    with launch("1p1d", "emulated") as instances:
        frozen = [httpx.get(i.url + "/_emulator/state", trust_env=False).json()["gc_frozen_objects"]
                  for i in instances]
        cfg = ProxyConfig(endpoints=[Endpoint(i.name, i.role, i.url) for i in instances],
                          journal=str(tmp_path / "proxy.jsonl"), port=free_port())
        with proxy_process(cfg, tmp_path) as url:
            proxy_frozen = httpx.get(url + "/health", trust_env=False).json()["validity"]["gc_frozen_objects"]
        policies = [httpx.get(i.url + "/_emulator/state", trust_env=False).json()["priority"]["policy"]
                    for i in instances]
    assert all(n > 10_000 for n in frozen), frozen  # FastAPI, pydantic, uvicorn, the app
    assert proxy_frozen > 10_000
    # each serves under real-time round-robin where this machine allows it ($REPRO_LIVE_SCHED=rr)
    assert policies == ["rr" if _can_run_realtime() else "other"] * 2
    assert gc.get_freeze_count() == before


def _can_run_realtime() -> bool:
    import subprocess
    import sys

    probe = "import os; os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(1))"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0


_HOG_THEN_REPORT = """
import json, os, subprocess, sys, time
from repro.cluster.processes import enter_live_loop, policy_name
first = enter_live_loop()
# a child started meanwhile runs under normal scheduling (and is not killed by the inherited guard)
child = subprocess.run([sys.executable, "-c", "import os; print(os.sched_getscheduler(0))"],
                       capture_output=True, text=True).stdout.strip()
t = time.process_time()
while time.process_time() - t < 1.6:  # computes past RTTIME_GUARD_S without sleeping
    pass
time.sleep(0.01)
print(json.dumps([first, policy_name(0), int(child) == os.SCHED_OTHER]))
"""


@pytest.mark.parametrize("sched", ["rr", "normal"])
def test_enter_live_loop_runs_real_time_and_a_hogging_process_drops_back(monkeypatch, sched):
    """`enter_live_loop` puts a live process under SCHED_RR where allowed ($REPRO_LIVE_SCHED=rr, the
    default), and the RLIMIT_RTTIME guard returns it to normal scheduling once it computes longer
    than `RTTIME_GUARD_S` without sleeping; ``normal`` leaves it alone."""
    import json
    import subprocess
    import sys

    from repro.cluster.processes import LIVE_SCHED_ENV

    monkeypatch.setenv(LIVE_SCHED_ENV, sched)
    out = subprocess.run([sys.executable, "-c", _HOG_THEN_REPORT], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    first, after, child = json.loads(out.stdout)
    assert first == ("rr" if sched == "rr" and _can_run_realtime() else "other")
    assert after == "other"
    assert child is True


def test_live_sched_names_the_variable_when_wrong(monkeypatch):
    from repro.cluster.processes import LIVE_SCHED_ENV, live_realtime
    from repro.errors import ConfigError

    monkeypatch.setenv(LIVE_SCHED_ENV, "fifo")
    with pytest.raises(ConfigError, match=r"REPRO_LIVE_SCHED.*'rr' or 'normal'.*'fifo'"):
        live_realtime()
    monkeypatch.setenv(LIVE_SCHED_ENV, " RR ")
    assert live_realtime()
    monkeypatch.delenv(LIVE_SCHED_ENV)
    assert live_realtime()


def test_terminate_pids_ends_the_group_of_a_leader_that_already_died():
    """An engine killed mid-run (SIGKILL, a crash) leaves its own children (vLLM's EngineCore and
    workers) in its process group: stopping the cluster must end them too."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from repro.cluster.processes import group_alive, terminate_pids

    code = ("import subprocess, sys, time\n"
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
            "print('up', flush=True)\n"
            "time.sleep(600)\n")
    leader = subprocess.Popen([sys.executable, "-c", code], start_new_session=True, stdout=subprocess.PIPE, text=True)
    try:
        assert leader.stdout.readline().strip() == "up"
        os.kill(leader.pid, signal.SIGKILL)
        leader.wait()
        assert group_alive(leader.pid)  # the child lives on without its leader
        terminate_pids([leader.pid], timeout=5.0, procs={leader.pid: leader})
        deadline = time.monotonic() + 5.0
        while group_alive(leader.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not group_alive(leader.pid)
    finally:
        if group_alive(leader.pid):
            os.killpg(leader.pid, signal.SIGKILL)
        leader.stdout.close()


def test_a_group_of_zombies_is_dead_and_stopping_it_does_not_wait():
    """Engines this very process started (`repro cluster up` in a notebook or a test) and that ended stay as zombies
    until reaped: their group is dead, and `terminate_pids` (`repro cluster down`) returns at once, not after its
    timeout."""
    import os
    import subprocess
    import sys
    import time

    from repro.cluster.processes import group_alive, pid_alive, terminate_pids

    child = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while pid_alive(child.pid) and time.monotonic() < deadline:  # ended, not reaped: a zombie
            time.sleep(0.05)
        os.killpg(child.pid, 0)  # the group still exists for the kernel
        assert not group_alive(child.pid)
        t = time.monotonic()
        terminate_pids([child.pid], timeout=5.0)
        assert time.monotonic() - t < 2.0
    finally:
        child.wait()
    assert not group_alive(os.getpgrp())  # never our own


def test_a_recycled_pid_is_never_signalled(tmp_path):
    """Our child ended and was reaped; its number now belongs to another process, a session leader (pids are
    recycled). Stopping "our" pid must leave that process and its group alone."""
    import signal as sig
    import subprocess
    import sys
    import time

    from repro.cluster.processes import terminate_pids

    ended = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    ended.wait()
    log = tmp_path / "signals.txt"
    code = ("import signal, sys, time\n"
            "out = open(sys.argv[1], 'a', buffering=1)\n"
            "for s in (signal.SIGTERM, signal.SIGINT):\n"
            "    signal.signal(s, lambda n, f: out.write(f'{n}\\n'))\n"
            "print('up', flush=True)\n"
            "time.sleep(60)\n")
    stranger = subprocess.Popen([sys.executable, "-c", code, str(log)], start_new_session=True,
                                stdout=subprocess.PIPE, text=True)
    try:
        assert stranger.stdout.readline().strip() == "up"
        ended.pid = stranger.pid  # the number recycled: our record of the ended child now names the stranger
        terminate_pids([stranger.pid], timeout=0.5, procs={stranger.pid: ended})
        time.sleep(0.2)
        assert stranger.poll() is None and (not log.exists() or log.read_text() == "")
    finally:
        stranger.send_signal(sig.SIGKILL)
        stranger.wait()
        stranger.stdout.close()


def test_free_ports_never_hands_out_a_port_twice_while_its_server_may_still_be_starting(monkeypatch):
    """Two launches at once in one process (a test session's two real clusters) choose their ports before their
    engines bind them (~20 s of imports later): a port this process handed out lately is never handed out again."""
    import socket

    from repro.cluster import processes

    monkeypatch.setattr(processes, "_GIVEN_PORTS", {})
    first = processes.free_ports(6)
    taken = set(first)
    real_socket = socket.socket
    offered = iter(first[:3] + [0] * 100)  # the OS offers three of the handed-out ports again first

    class Replaying(real_socket):  # the replayed ports are free at the OS again: their first sockets were closed
        def bind(self, address):
            super().bind((address[0], next(offered)))

    monkeypatch.setattr(processes.socket, "socket", Replaying)
    second = processes.free_ports(4)
    assert len(set(second)) == 4 and not taken & set(second), (first, second)
