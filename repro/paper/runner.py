"""`repro paper`: run the section notebooks headlessly with papermill and summarise the headline numbers.

Each notebook ``notebooks/NN_name.ipynb`` starts with a cell tagged ``parameters`` whose lines read
``name: type = value  # help``. The runner parses that cell itself, so that a parameter the notebook
does not declare is an error naming it (papermill only warns). Executed notebooks go to ``--out``
(``build/notebooks``), never into ``notebooks/``. Each notebook writes ``results/NN_headline.csv``
(notebook, key, ours, paper, unit); the runner concatenates them into ``results/summary.csv``.
"""

from __future__ import annotations

import ast
import contextlib
import io
import os
import re
import subprocess
import sys
import time
import tokenize
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from repro.errors import ConfigError
from repro.experiment.executor import PRIORITY_ENV
from repro.paper.golden import CHECK_MARKER
from repro.paper.summary import collect_headlines, commit_id, default_dirs
from repro.paths import CLUSTERS_DIR, NOTEBOOK_DIR, resolve_dir
from repro.vocab import BACKENDS, SCALES

if TYPE_CHECKING:
    from nbformat import NotebookNode

KERNEL = "python3"


@dataclass(frozen=True)
class Parameter:
    """One line of a notebook's parameters cell: ``name: type = default  # help``."""

    name: str
    type: str
    default: Any
    help: str


@dataclass
class NotebookResult:
    """One executed notebook: where it went, whether every cell ran, and its wall time (s)."""

    name: str
    output: Path
    ok: bool
    wall_s: float
    error: str = ""
    headline: pd.DataFrame | None = field(default=None, repr=False)


StatusHook = Callable[[dict[str, tuple[str, float | None]]], None]
"""Hears every notebook's (status, wall seconds) whenever one changes (`run_paper`'s ``on_status``)."""


@dataclass
class PaperRun:
    """What `run_paper` did: every notebook's result (sections in order, the overview last), the
    summary of their headline rows, and where summary.csv and report.html went (None: no summary)."""

    results: list[NotebookResult]
    summary: pd.DataFrame
    summary_path: Path | None
    report: Path | None

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)


# ---- discovery and the parameters cell ---------------------------------------------------------
OVERVIEW = "00_overview"
"""The notebook that reads the run's ``summary.csv``: `run_paper` runs it after the sections."""

NOTEBOOK_WALL_S: dict[str, float] = {
    "08_frontier": 113, "10_feature_ablation": 106, "14_scorers": 106, "13_beyond": 58, "09_load_and_tails": 55,
    "03_methodology": 45, "05_calibration_value": 33, "12_sim_vs_hardware": 32, "06_heterogeneity": 32,
    "11_predictor_noise": 30, "07_pool_width": 27, "04_mixed_goodput": 27, "02_length_predictor": 17,
    "01_calibration": 9,
}
"""Each section notebook's wall seconds alone (``repro paper --only NN``: sim, full, a cold cache, the shared
pool of 2 cores; the 2-core development machine, commit 29218d8), the notebooks before it not having simulated
its runs: `run_paper` starts the longest first (longest-processing-time order) and their simulations go first
in the pool, so no long one starts last and runs alone. Only the order depends on these; a notebook not listed
starts after them."""

KERNELS_BEYOND_CORES = 1
"""On ``sim`` with the shared pool: notebooks at once beyond one per core. Their kernels mostly wait on the
pool, and one more keeps the cores busy while a kernel computes its own statistics and figures."""


ON_REQUEST = ("15_scorecard",)
"""Notebooks `run_paper` runs only when asked: the scorecard, with ``policies`` (`repro paper --policy`)
or named by ``--only``."""


def discover(notebook_dir: Path = NOTEBOOK_DIR) -> list[Path]:
    """The section notebooks, ``NN_name.ipynb``, in order. A section written as ``NN_name.py`` (jupytext's
    py:percent) without its ``.ipynb`` twin would not run: a `ConfigError` naming it and the command that
    writes the twin."""
    folder = Path(notebook_dir)
    lonely = [p for p in sorted(folder.glob("[0-9][0-9]_*.py")) if not p.with_suffix(".ipynb").exists()]
    if lonely:
        names = " ".join(str(p) for p in lonely)
        raise ConfigError(f"paper: section notebook(s) without their .ipynb twin, which is what runs: {names}; "
                          f"write the twin with `jupytext --to ipynb --update-metadata "
                          f"'{{\"jupytext\": {{\"formats\": \"ipynb,py:percent\"}}}}' {names}` "
                          f"(docs/ARCHITECTURE.md, \"A notebook (adding a section)\")")
    return sorted(folder.glob("[0-9][0-9]_*.ipynb"))


def select(only: str | Sequence[str] | None, notebook_dir: Path = NOTEBOOK_DIR) -> list[Path]:
    """Notebooks chosen by ``--only 01,04`` (numbers or names); unknown selectors are an error."""
    nbs = discover(notebook_dir)
    if not nbs:
        raise ConfigError(f"paper: no notebooks in {notebook_dir}")
    if not only:
        return nbs
    wanted = [w.strip() for w in (only.split(",") if isinstance(only, str) else only) if w.strip()]
    chosen: list[Path] = []
    for w in wanted:
        hits = [p for p in nbs if p.stem == w or p.stem.split("_", 1)[0] == w.zfill(2) or p.stem.startswith(w + "_")]
        if not hits:
            raise ConfigError(f"paper: --only {w!r} matches no notebook; available: {[p.stem for p in nbs]}")
        chosen.extend(h for h in hits if h not in chosen)
    return sorted(chosen)


def _cell_source(cell: NotebookNode) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def parameters_cell(nb: NotebookNode) -> str:
    """The source of the notebook's cell tagged ``parameters`` (a `ConfigError` when it has none)."""
    for cell in nb.cells:
        if cell.get("cell_type") == "code" and "parameters" in cell.get("metadata", {}).get("tags", []):
            return _cell_source(cell)
    raise ConfigError("paper: notebook has no cell tagged 'parameters'")


def parse_parameters(source: str) -> dict[str, Parameter]:
    """``name: type = value  # help`` lines of a parameters cell (values must be literals)."""
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
    out: dict[str, Parameter] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            try:
                default = ast.literal_eval(node.value)
            except ValueError:
                raise ConfigError(f"paper: parameter {node.target.id!r} must have a literal default") from None
            out[node.target.id] = Parameter(node.target.id, ast.unparse(node.annotation), default,
                                            comments.get(node.lineno, ""))
        elif isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            raise ConfigError(f"paper: parameter {names} needs a type annotation (name: type = value  # help)")
    return out


def notebook_parameters(path: Path) -> dict[str, Parameter]:
    """The parameters a notebook file declares, by name."""
    import nbformat

    return parse_parameters(parameters_cell(nbformat.read(str(path), as_version=4)))


def check_parameters(path: Path, params: dict[str, Any]) -> None:
    """Every passed name must be declared by the notebook (a typo is an error, not a warning)."""
    declared = notebook_parameters(path)
    unknown = sorted(set(params) - set(declared))
    if unknown:
        raise ConfigError(f"paper: {path.stem} has no parameter {', '.join(repr(u) for u in unknown)}; "
                          f"declared: {sorted(declared)}")


# ---- kernel --------------------------------------------------------------------------------------
def ensure_kernel(name: str = KERNEL) -> None:
    """Install the ``python3`` Jupyter kernel for this interpreter (user level) when it is missing."""
    from jupyter_client.kernelspec import KernelSpecManager

    if name in KernelSpecManager().find_kernel_specs():
        return
    proc = subprocess.run([sys.executable, "-m", "ipykernel", "install", "--user", "--name", name],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise ConfigError(f"paper: could not install the {name!r} Jupyter kernel: {proc.stderr.strip()} "
                          "(pip install -e '.[notebooks]')")


# ---- running -------------------------------------------------------------------------------------
def _failure_text(exc: BaseException) -> str:
    tb = getattr(exc, "traceback", None)
    if tb:  # the kernel's coloured traceback, its ANSI colour codes removed
        return re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", "\n".join(tb))
    return f"{type(exc).__name__}: {exc}"


def run_notebook(path: Path, out_dir: Path, params: dict[str, Any], cwd: Path = NOTEBOOK_DIR,
                 env: dict[str, str] | None = None) -> NotebookResult:
    """Execute one notebook with papermill into ``out_dir``; never raises for a failing cell. ``env``: set in
    the kernel's environment (besides this process's)."""
    import papermill as pm

    check_parameters(path, params)
    out_dir.mkdir(parents=True, exist_ok=True)
    output = out_dir / path.name
    t0 = time.perf_counter()
    try:
        # --log-level=ERROR: the kernel's start-up warning about TCP on 127.0.0.1 would print once per notebook
        with environment(env or {}):  # the kernel inherits it
            pm.execute_notebook(str(path), str(output), parameters=params, kernel_name=KERNEL, language="python",
                                cwd=str(cwd), progress_bar=False, log_output=False, report_mode=False,
                                extra_arguments=["--log-level=ERROR"])
    except Exception as exc:  # papermill's PapermillExecutionError carries the cell traceback
        return NotebookResult(path.stem, output, False, time.perf_counter() - t0, _failure_text(exc))
    return NotebookResult(path.stem, output, True, time.perf_counter() - t0)


def run_paper(*, backend: str = "sim", scale: str = "full", only: str | None = None,
              cluster: str | None = None, out: str | Path = "build/notebooks",
              results_dir: str | Path | None = None, figures_dir: str | Path | None = None,
              extra: dict[str, Any] | None = None, policies: Sequence[str] = (), jobs: int = 0,
              executor: str = "local",
              address: str | None = None, on_status: StatusHook | None = None,
              on_message: Callable[[str], None] | None = None) -> PaperRun:
    """Run the selected notebooks; returns their results and the summary table (also written).
    Results and figures go to `default_dirs` unless given.

    ``jobs``: the cores to use (0: every core on ``sim``; 1 on a live backend, whose runs need the
    machine to themselves). On ``sim`` with the ``local`` executor, ``jobs`` worker processes simulate for
    every notebook (one `repro.experiment.executor.PoolServer` for the run: workers start once, a spec that
    two notebooks ask for at once is simulated once, the longest notebook's simulations go first) while
    ``jobs + KERNELS_BEYOND_CORES`` notebooks run at once (the longest first, `NOTEBOOK_WALL_S`; they share
    nothing else and are deterministic). Otherwise up to ``jobs`` notebooks run at once, each with its own
    ``$REPRO_JOBS = ceil(2 jobs / notebooks at once)`` workers (``serial``: none), and ``executor="ray"``
    sends the notebooks' simulations to the Ray cluster at ``address`` instead.
    Every result is the same for any ``jobs`` and executor. ``on_status`` hears every notebook's
    status (name -> (pending | running | done | FAILED | skipped..., wall s)) whenever one changes,
    ``on_message`` a line worth printing (the command line, `repro.cli.paper`, shows both); nothing
    here prints. Ends by writing summary.csv and report.html.

    ``policies`` (registered names or import paths ``pkg.module:Class``, checked before anything runs):
    scored against the paper's router by the scorecard notebook (`ON_REQUEST`, added to the selection),
    whose ``scorecard.csv`` the report shows; every notebook that declares a ``policies`` parameter
    gets them."""
    from repro.paper.figures import write_results

    if backend not in BACKENDS:
        raise ConfigError(f"paper: --backend {backend!r}; allowed: {list(BACKENDS)}")
    if scale not in SCALES:
        raise ConfigError(f"paper: --scale {scale!r}; allowed: {list(SCALES)}")
    if backend == "vllm" and not cluster:
        raise ConfigError("paper: --backend vllm needs --cluster FILE (a cluster YAML; see data/clusters/)")
    if cluster and not Path(cluster).exists() and not (CLUSTERS_DIR / f"{cluster}.yaml").exists():
        raise ConfigError(f"paper: --cluster {cluster!r}: no such file")
    if policies:
        from repro.paper.contenders import check_policies

        policies = check_policies(policies)
    nbs = [nb for nb in select(only) if nb.stem not in ON_REQUEST or only or policies]
    if policies:
        nbs = sorted({*nbs, *[nb for nb in discover() if nb.stem in ON_REQUEST]})
    res_default, fig_default = default_dirs(backend, scale)
    out_dir = resolve_dir(out)
    res_dir = resolve_dir(results_dir) if results_dir is not None else res_default
    fig_dir = resolve_dir(figures_dir) if figures_dir is not None else fig_default
    if out_dir.resolve() == NOTEBOOK_DIR.resolve():
        raise ConfigError("paper: --out must not be notebooks/ (executed notebooks go to a build folder)")
    cluster_param = str(Path(cluster).resolve()) if cluster and Path(cluster).exists() else (cluster or "")
    params = {"backend": backend, "scale": scale, "cluster": cluster_param,
              "results_dir": str(res_dir), "figures_dir": str(fig_dir), **(extra or {})}
    wants = {nb.stem for nb in nbs if policies and "policies" in notebook_parameters(nb)}

    def own(nb: Path) -> dict[str, Any]:  # a notebook's parameters (the cluster may change below)
        return {**params, "policies": list(policies)} if nb.stem in wants else params

    for nb in nbs:  # check every notebook's parameters before running any
        check_parameters(nb, own(nb))
    ensure_kernel()

    status: dict[str, tuple[str, float | None]] = {nb.stem: ("pending", None) for nb in nbs}

    def changed() -> None:
        if on_status is not None:
            on_status(dict(status))

    changed()

    results: list[NotebookResult] = []
    with contextlib.ExitStack() as stack:
        if backend == "vllm":
            # engines this machine starts (launcher: vllm) come up once for every notebook's runs
            from repro.cluster.launchers import hold_cluster

            if on_message is not None:
                on_message(f"starting the engines of {cluster_param} (once for all notebooks) ...")
            params["cluster"] = stack.enter_context(hold_cluster(cluster_param, out_dir / "cluster"))
        sections = [n for n in nbs if n.stem != OVERVIEW]
        cores = jobs if jobs else ((os.cpu_count() or 1) if backend == "sim" else 1)
        # the longest first, so no long one starts last and runs alone
        order = sorted(sections, key=lambda nb: -NOTEBOOK_WALL_S.get(nb.stem, 0.0))
        own_env: dict[str, dict[str, str]] = {nb.stem: {} for nb in sections}
        if backend == "sim" and executor == "local" and cores > 1 and sections:
            # one pool of `cores` workers for every notebook's simulations (`repro.experiment.executor.PoolServer`):
            # its workers start once, a spec two notebooks ask for at once runs once, and the longest notebook's
            # simulations go first; the kernels mostly wait on it, so more of them run at once than there are cores
            from repro.experiment.executor import PoolServer

            pool = stack.enter_context(PoolServer(cores))
            workers = max(1, min(len(sections), cores + KERNELS_BEYOND_CORES))
            env = pool.env()
            own_env = {nb.stem: {PRIORITY_ENV: str(rank)} for rank, nb in enumerate(order)}
        else:
            workers = max(1, min(len(sections), cores))
            env = {"REPRO_EXECUTOR": executor}
            if executor != "ray" or jobs:  # on Ray: as many at once as the cluster has CPUs, unless told
                env["REPRO_JOBS"] = str(max(1, -(-2 * cores // workers)) if cores > 1 else 1)
            if address:
                env["REPRO_RAY_ADDRESS"] = address
        stack.enter_context(environment(env))  # the notebooks' kernels inherit it

        def started(nb: Path) -> None:
            status[nb.stem] = ("running", None)
            changed()

        def finished(res: NotebookResult) -> None:
            results.append(res)
            status[res.name] = ("done" if res.ok else "FAILED", res.wall_s)
            changed()

        # the sections first (in parallel where they share nothing: sim), then the summary they make,
        # then the overview that reads it
        if workers > 1:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor, as_completed

            with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as kernels:
                futures = [kernels.submit(run_notebook, nb, out_dir, own(nb), env=own_env[nb.stem]) for nb in order]
                for nb in sections:
                    started(nb)
                for fut in as_completed(futures):
                    finished(fut.result())
            results.sort(key=lambda r: r.name)
        else:
            for nb in sections:
                started(nb)
                finished(run_notebook(nb, out_dir, own(nb)))
        summary = collect_headlines([r.name for r in results if r.ok], res_dir, backend=backend, scale=scale,
                                    commit=commit_id())
        path = write_results(summary, "summary", res_dir) if len(summary) else None
        for nb in [n for n in nbs if n.stem == OVERVIEW]:
            if path is None:
                status[nb.stem] = ("skipped: no summary", None)
                changed()
                continue
            started(nb)
            finished(run_notebook(nb, out_dir, params))
    report = None
    if path is not None or (res_dir / "scorecard.csv").exists() and any(r.ok and r.name in ON_REQUEST
                                                                         for r in results):
        from repro.paper.report import write_report

        report = write_report(res_dir, fig_dir)
    return PaperRun(results, summary, path, report)


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """Set environment variables for the duration (restored after, also on error)."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# ---- checked outputs (golden files: repro.paper.golden) -----------------------------------------
def is_checked(cell: NotebookNode) -> bool:
    """A code cell whose printed values are compared with a golden file (`repro.paper.golden.expected_output`)."""
    return cell.get("cell_type") == "code" and CHECK_MARKER in _cell_source(cell)
