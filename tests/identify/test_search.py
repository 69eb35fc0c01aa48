"""The fits' search (`repro.identify.search.evolve`): an interrupted search resumes from its journal and
simulates only what it had not, reaching the same result."""

import numpy as np

from repro.experiment.executor import SerialExecutor
from repro.identify.search import evolve, load_journal

CALLS: list[int] = []


def bowl(x: np.ndarray) -> dict[str, float]:
    CALLS.append(1)
    return {"y": float(((x - 0.3) ** 2).sum())}


def run(journal, generations):
    seen: list[tuple[tuple[float, ...], float]] = []

    def record(x, vals):
        seen.append((tuple(x), vals["y"]))
        return vals["y"]

    message, simulated = evolve([(0.0, 1.0), (0.0, 1.0)], bowl, record, executor=SerialExecutor(), popsize=4,
                                generations=generations, seed=3, journal=journal)
    return seen, simulated


def test_a_resumed_search_simulates_only_what_it_had_not(tmp_path):
    journal = tmp_path / "search.jsonl"
    CALLS.clear()
    short, n_short = run(journal, 2)  # interrupted after two generations
    assert n_short == len(short) == len(CALLS) == 8 * 3
    CALLS.clear()
    full, n_full = run(journal, 5)  # rerun with more generations: the first three read back
    assert n_full == len(CALLS) == 8 * 3
    assert full[: len(short)] == short
    CALLS.clear()
    again, n_again = run(journal, 5)  # a finished search reruns without simulating anything
    assert n_again == 0 and not CALLS and again == full
    assert len(load_journal(journal)) == len({x for x, _ in full})


def test_a_torn_journal_line_is_skipped(tmp_path):
    journal = tmp_path / "search.jsonl"
    run(journal, 1)
    with journal.open("a") as f:
        f.write('{"x": [0.1, ')
    assert len(load_journal(journal)) == 16
