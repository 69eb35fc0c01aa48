"""The pool `repro paper` serves to its notebook kernels (`repro.experiment.executor.PoolServer`, `PoolClient`):
the executor contract, identical tasks computed once, errors with their kind, a map given up early,
and a sweep through it byte-identical to one in this process."""

from __future__ import annotations

import os
import threading
import time

import pytest

from repro.errors import PolicyError
from repro.experiment import executor as ex
from repro.experiment.spec import RunSpec


def _square(x: int) -> int:
    time.sleep(0.05)
    if x < 0:
        raise PolicyError(f"bad item {x}")
    return x * x


@pytest.fixture
def server():
    with ex.PoolServer(2) as srv:
        yield srv


def _client(srv: ex.PoolServer, priority: int = 0) -> ex.PoolClient:
    env = srv.env(priority)
    return ex.PoolClient(env[ex.POOL_ENV], env[ex.POOL_KEY_ENV], srv.jobs, priority)


def test_a_client_gets_every_result_once(server):
    client = _client(server)
    got = list(client.imap_unordered(_square, list(range(12))))
    assert sorted(i for i, _ in got) == list(range(12)) and all(r == i * i for i, r in got)
    assert client.describe() == "shared pool x2"


def test_identical_tasks_of_two_clients_run_once(server):
    clients = [_client(server), _client(server, 1)]
    out: dict[int, dict[int, int]] = {}

    def run(k: int) -> None:
        out[k] = dict(clients[k].imap_unordered(_square, list(range(100, 110))))

    threads = [threading.Thread(target=run, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out[0] == out[1] == {i: (100 + i) ** 2 for i in range(10)}
    assert server.requested == 20 and server.computed == 10


def test_a_failing_task_names_its_index_and_keeps_its_kind(server):
    client = _client(server)
    with pytest.raises(ex.TaskFailed) as err:
        list(client.imap_unordered(_square, [3, -1, 4]))
    assert err.value.index == 1 and isinstance(err.value.error, PolicyError) and "bad item -1" in err.value.cause
    assert dict(client.imap_unordered(_square, [5])) == {0: 25}  # the client goes on


def test_a_map_given_up_early_leaves_the_client_usable(server):
    client = _client(server)
    it = client.imap_unordered(_square, list(range(200, 220)))
    next(it)
    it.close()
    assert sorted(dict(client.imap_unordered(_square, [6, 7])).items()) == [(0, 36), (1, 49)]


def test_shared_executor_is_the_pool_named_by_the_environment(server, monkeypatch):
    for k, v in server.env(3).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(ex, "_SHARED", {})
    got = ex.shared_executor()
    assert isinstance(got, ex.PoolClient) and got.priority == 3 and got.jobs == 2
    monkeypatch.setenv(ex.JOBS_ENV, "1")  # one job: no pool
    assert isinstance(ex.shared_executor(), ex.SerialExecutor)


def test_a_sweep_through_the_pool_is_the_sweep_in_this_process(server, monkeypatch, tmp_path):
    from repro.experiment import runner

    monkeypatch.setenv("REPRO_SIM_CACHE", "off")
    specs = [RunSpec.from_flat(workload="chat", seed=s, rate=8.0, n_requests=60, policy=p)
             for s in (1, 2) for p in ("round_robin", "marginal_cost")]
    pooled = runner.sweep(specs, tmp_path / "a", sim_in_memory=True, executor=_client(server))
    alone = runner.sweep(specs, tmp_path / "b", sim_in_memory=True, executor=ex.SerialExecutor())
    assert pooled.to_csv() == alone.to_csv()


def _fake_ray(tmp_path, fail_first: int):
    """A stand-in for ``python -m ray.scripts.scripts start --head --block``: its first ``fail_first`` starts exit
    before saying it is up (as a head whose raylet missed Ray's 30 s does), the next says so and blocks."""
    count = tmp_path / "starts"
    script = tmp_path / "python"
    script.write_text(f"""#!/bin/bash
n=$(cat {count} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {count}
if [ $n -le {fail_first} ]; then echo "Exception: The current node timed out during startup."; exit 1; fi
echo $$ > {tmp_path / "pid"}
echo "SUCC scripts.py:1085 -- Ray runtime started."
exec sleep 600
""")
    script.chmod(0o755)
    return script, count


def test_a_ray_head_that_dies_before_it_is_up_is_started_again(tmp_path, monkeypatch):
    import sys

    from repro.experiment.executor import local_ray_head

    script, count = _fake_ray(tmp_path, fail_first=1)
    monkeypatch.setattr(sys, "executable", str(script))
    with local_ray_head(cpus=1, timeout_s=30) as address:
        assert address.startswith("127.0.0.1:") and count.read_text().strip() == "2"
        pid = int((tmp_path / "pid").read_text())
        os.kill(pid, 0)  # the head that came up runs
    with pytest.raises(ProcessLookupError):  # and was stopped (and reaped) with the context
        os.kill(pid, 0)


def test_a_ray_head_that_never_comes_up_is_an_error_naming_its_log(tmp_path, monkeypatch):
    import sys

    from repro.experiment.executor import local_ray_head

    script, count = _fake_ray(tmp_path, fail_first=99)
    monkeypatch.setattr(sys, "executable", str(script))
    with pytest.raises(RuntimeError, match=r"3 start\(s\) failed: exited with code 1 before it was up \(log: /tmp/"):
        with local_ray_head(cpus=1, timeout_s=30):
            pass
    assert count.read_text().strip() == "3"
