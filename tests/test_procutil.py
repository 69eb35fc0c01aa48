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
