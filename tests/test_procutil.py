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


def test_live_servers_settle_their_startup_heap_and_the_caller_does_not(tmp_path):
    """Engines and the proxy freeze what they allocated while starting (`settle_heap`), so that no
    full collection of it stalls them mid-run; launching them freezes nothing in the caller."""
    import gc

    import httpx

    from repro.cluster.launchers import launch
    from repro.live.proxy.config import Endpoint, ProxyConfig
    from repro.live.run import free_port, proxy_process

    before = gc.get_freeze_count()
    with launch("1p1d", "emulated") as instances:
        frozen = [httpx.get(i.url + "/_emulator/state", trust_env=False).json()["gc_frozen_objects"]
                  for i in instances]
        cfg = ProxyConfig(endpoints=[Endpoint(i.name, i.role, i.url) for i in instances],
                          journal=str(tmp_path / "proxy.jsonl"), port=free_port())
        with proxy_process(cfg, tmp_path) as url:
            proxy_frozen = httpx.get(url + "/health", trust_env=False).json()["validity"]["gc_frozen_objects"]
    assert all(n > 10_000 for n in frozen), frozen  # FastAPI, pydantic, uvicorn, the app
    assert proxy_frozen > 10_000
    assert gc.get_freeze_count() == before
