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
import difflib
import io
import os
import subprocess
import sys
import time
import tokenize
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from repro.errors import ConfigError, check_choice, parse_assignments
from repro.paper.summary import collect_headlines, commit_id, default_dirs
from repro.paths import CLUSTERS_DIR, NOTEBOOK_DIR, resolve_dir
from repro.vocab import BACKENDS, SCALES

if TYPE_CHECKING:
    from nbformat import NotebookNode
    from rich.console import Console
    from rich.table import Table

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


# ---- discovery and the parameters cell ---------------------------------------------------------
OVERVIEW = "00_overview"
"""The notebook that reads the run's ``summary.csv``: `run_paper` runs it after the sections."""

NOTEBOOK_WALL_S: dict[str, float] = {
    "08_frontier": 176, "10_feature_ablation": 176, "13_beyond": 146, "09_load_and_tails": 132, "14_scorers": 107,
    "11_predictor_noise": 91, "12_sim_vs_hardware": 69, "06_heterogeneity": 65, "07_pool_width": 48,
    "05_calibration_value": 44, "04_mixed_goodput": 20, "03_methodology": 19, "02_length_predictor": 12,
    "01_calibration": 5,
}
"""Each section notebook's wall seconds in the main job (sim, full, ten traces for 01-11, 2 cores, 01bda99):
`run_paper` starts the longest first (longest-processing-time order), so no long notebook starts
last and runs alone. Only the order depends on these; a notebook not listed starts after them."""


def discover(notebook_dir: Path = NOTEBOOK_DIR) -> list[Path]:
    """The section notebooks, ``NN_name.ipynb``, in order."""
    return sorted(p for p in Path(notebook_dir).glob("[0-9][0-9]_*.ipynb"))


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
    if tb:
        from rich.text import Text

        text = "\n".join(tb)
        return Text.from_ansi(text).plain
    return f"{type(exc).__name__}: {exc}"


def run_notebook(path: Path, out_dir: Path, params: dict[str, Any], cwd: Path = NOTEBOOK_DIR) -> NotebookResult:
    """Execute one notebook with papermill into ``out_dir``; never raises for a failing cell."""
    import papermill as pm

    check_parameters(path, params)
    out_dir.mkdir(parents=True, exist_ok=True)
    output = out_dir / path.name
    t0 = time.perf_counter()
    try:
        # --log-level=ERROR: the kernel's start-up warning about TCP on 127.0.0.1 would print once per notebook
        pm.execute_notebook(str(path), str(output), parameters=params, kernel_name=KERNEL, language="python",
                            cwd=str(cwd), progress_bar=False, log_output=False, report_mode=False,
                            extra_arguments=["--log-level=ERROR"])
    except Exception as exc:  # papermill's PapermillExecutionError carries the cell traceback
        return NotebookResult(path.stem, output, False, time.perf_counter() - t0, _failure_text(exc))
    return NotebookResult(path.stem, output, True, time.perf_counter() - t0)


def run_paper(*, backend: str = "sim", scale: str = "full", only: str | None = None,
              cluster: str | None = None, out: str | Path = "build/notebooks",
              results_dir: str | Path | None = None, figures_dir: str | Path | None = None,
              extra: dict[str, Any] | None = None, jobs: int = 0, executor: str = "local",
              address: str | None = None, table: bool = False,
              console: Console | None = None) -> tuple[list[NotebookResult], pd.DataFrame]:
    """Run the selected notebooks; returns their results and the summary table (also written).
    Results and figures go to `default_dirs` unless given.

    ``jobs``: the cores to use (0: every core on ``sim``; 1 on a live backend, whose runs need the
    machine to themselves). On ``sim`` up to ``jobs`` notebooks run at once (they share nothing and
    are deterministic; the longest first, `NOTEBOOK_WALL_S`), and each notebook's sweeps and
    saturation probes run on worker processes too (`repro.experiment.executor`: ``$REPRO_JOBS`` =
    ``ceil(2 jobs / notebooks at once)``, so a notebook left running alone still uses every core).
    ``executor="ray"`` sends the notebooks' simulations to the Ray cluster at ``address`` instead.
    Every result is the same for any ``jobs`` and executor. The terminal gets the grouped tally and the
    headline claims (`claims_table`); ``table`` also prints every row (`summary_table`)."""
    from rich.console import Console
    from rich.live import Live
    from rich.table import Table

    from repro.paper.figures import write_results

    if backend not in BACKENDS:
        raise ConfigError(f"paper: --backend {backend!r}; allowed: {list(BACKENDS)}")
    if scale not in SCALES:
        raise ConfigError(f"paper: --scale {scale!r}; allowed: {list(SCALES)}")
    if backend == "vllm" and not cluster:
        raise ConfigError("paper: --backend vllm needs --cluster FILE (a cluster YAML; see data/clusters/)")
    if cluster and not Path(cluster).exists() and not (CLUSTERS_DIR / f"{cluster}.yaml").exists():
        raise ConfigError(f"paper: --cluster {cluster!r}: no such file")
    # a log file or pipe gets a wide table (Rich would fold it to 80 columns and cut the keys)
    console = console or Console(width=None if sys.stdout.isatty() else 160)
    nbs = select(only)
    res_default, fig_default = default_dirs(backend, scale)
    out_dir = resolve_dir(out)
    res_dir = resolve_dir(results_dir) if results_dir is not None else res_default
    fig_dir = resolve_dir(figures_dir) if figures_dir is not None else fig_default
    if out_dir.resolve() == NOTEBOOK_DIR.resolve():
        raise ConfigError("paper: --out must not be notebooks/ (executed notebooks go to a build folder)")
    cluster_param = str(Path(cluster).resolve()) if cluster and Path(cluster).exists() else (cluster or "")
    params = {"backend": backend, "scale": scale, "cluster": cluster_param,
              "results_dir": str(res_dir), "figures_dir": str(fig_dir), **(extra or {})}
    for nb in nbs:  # check every notebook's parameters before running any
        check_parameters(nb, params)
    ensure_kernel()

    status = {nb.stem: ("pending", None) for nb in nbs}

    def render() -> Table:
        t = Table(title=f"repro paper --backend {backend} --scale {scale}", expand=False)
        t.add_column("notebook")
        t.add_column("status")
        t.add_column("wall s", justify="right")
        for name, (st, wall) in status.items():
            colour = {"done": "green", "FAILED": "red", "running": "yellow"}.get(st, "dim")
            t.add_row(name, f"[{colour}]{st}[/{colour}]", "" if wall is None else f"{wall:.1f}")
        return t

    results: list[NotebookResult] = []
    with contextlib.ExitStack() as stack:
        if backend == "vllm":
            # engines this machine starts (launcher: vllm) come up once for every notebook's runs
            from repro.cluster.launchers import hold_cluster

            console.print(f"starting the engines of {cluster_param} (once for all notebooks) ...")
            params["cluster"] = stack.enter_context(hold_cluster(cluster_param, out_dir / "cluster"))
        stack.enter_context(live := Live(render(), console=console, refresh_per_second=4, transient=False))
        sections = [n for n in nbs if n.stem != OVERVIEW]
        cores = jobs if jobs else ((os.cpu_count() or 1) if backend == "sim" else 1)
        workers = max(1, min(len(sections), cores))
        env = {"REPRO_EXECUTOR": executor}
        if executor != "ray" or jobs:  # on Ray: as many at once as the cluster has CPUs, unless told
            env["REPRO_JOBS"] = str(max(1, -(-2 * cores // workers)) if cores > 1 else 1)
        if address:
            env["REPRO_RAY_ADDRESS"] = address
        stack.enter_context(environment(env))  # the notebooks' kernels inherit it

        def started(nb: Path) -> None:
            status[nb.stem] = ("running", None)
            live.update(render())

        def finished(res: NotebookResult) -> None:
            results.append(res)
            status[res.name] = ("done" if res.ok else "FAILED", res.wall_s)
            live.update(render())

        # the sections first (in parallel where they share nothing: sim), then the summary they make,
        # then the overview that reads it
        if workers > 1:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor, as_completed

            with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
                # the longest first, so no long one starts last and runs alone
                order = sorted(sections, key=lambda nb: -NOTEBOOK_WALL_S.get(nb.stem, 0.0))
                futures = [pool.submit(run_notebook, nb, out_dir, params) for nb in order]
                for nb in sections:
                    started(nb)
                for fut in as_completed(futures):
                    finished(fut.result())
            results.sort(key=lambda r: r.name)
        else:
            for nb in sections:
                started(nb)
                finished(run_notebook(nb, out_dir, params))
        summary = collect_headlines([r.name for r in results if r.ok], res_dir, backend=backend, scale=scale,
                                    commit=commit_id())
        path = write_results(summary, "summary", res_dir) if len(summary) else None
        for nb in [n for n in nbs if n.stem == OVERVIEW]:
            if path is None:
                status[nb.stem] = ("skipped: no summary", None)
                live.update(render())
                continue
            started(nb)
            finished(run_notebook(nb, out_dir, params))
    if path is not None:
        from repro.paper.claims import tally_text

        if table:
            console.print(summary_table(summary))
        console.print(claims_table(summary))
        console.print("the tally, each measurement once:")
        for line in tally_text(summary):
            console.print(f"  {line}", markup=False, highlight=False)
        console.print(f"{len(summary)} rows written to {path}" + ("" if table else " (--table prints them all here)"))
        if backend == "sim" and scale == "full" and not only:
            from repro.paper.claims import docs_stale
            from repro.paths import REPO_ROOT

            stale = docs_stale(summary, REPO_ROOT)
            if stale:
                console.print(f"[yellow]the verdicts quoted in {', '.join(stale)} differ from this run's[/yellow] "
                              "(`repro conclusion --docs` writes them from it)")
        from repro.paper.report import write_report

        console.print(f"report (one page, opens offline): {write_report(res_dir, fig_dir)}")
    for r in results:
        if not r.ok:
            console.print(f"[red]{r.name} failed[/red]; executed notebook: {r.output}")
            console.print(r.error, markup=False, highlight=False)
    return results, summary


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


def claims_table(summary: pd.DataFrame) -> Table:
    """The paper's headline claims (`repro.paper.claims.HEADLINE_CLAIMS`) as a Rich table: each claim's
    verdict, the row it rests on (ours [95 % interval] vs the paper) and why."""
    from rich.table import Table

    from repro.paper.claims import claim_verdicts
    from repro.paper.verdicts import Estimate

    colours = {"reproduced": "green", "not reproduced": "red", "contradicted": "bold red", "within noise": "yellow"}
    by_key = summary.drop_duplicates("key").set_index("key")
    t = Table(title="the paper's headline claims: ours [95% interval] vs the paper")
    for c in ("claim", "verdict", "row", "ours [95% CI]", "paper", "why"):
        t.add_column(c, justify="right" if c in ("ours [95% CI]", "paper") else "left", overflow="fold")
    for v in claim_verdicts(summary).itertuples():
        if not v.key:
            t.add_row(v.title, v.verdict, "", "", "", "not measured in this run")
            continue
        r = by_key.loc[v.key]
        ours = Estimate(float(r.ours), float(r.ours_lo), float(r.ours_hi)).text(4)
        t.add_row(v.title, f"[{colours.get(v.verdict, 'default')}]{v.verdict}[/]", v.key, ours,
                  "" if pd.isna(r.paper) else f"{float(r.paper):.4g}", v.reason)
    return t


def summary_table(summary: pd.DataFrame) -> Table:
    """The headline numbers as a Rich table: ours with its 95 % interval beside the paper's, and the verdict."""
    from rich.table import Table

    from repro.paper.verdicts import Estimate

    def text(v: Any) -> str:
        return "" if pd.isna(v) else str(v)

    def fmt(v: float) -> str:
        return "" if pd.isna(v) else f"{v:.4g}"

    colours = {"reproduced": "green", "not reproduced": "red", "contradicted": "bold red", "within noise": "yellow",
               "input": "dim", "context": "dim"}
    t = Table(title="headline numbers: ours [95% interval] vs the paper")
    for c in ("notebook", "key", "ours [95% CI]", "paper", "verdict", "unit", "meaning", "measured"):
        t.add_column(c, justify="right" if c in ("ours [95% CI]", "paper") else "left", overflow="fold")
    for r in summary.itertuples():
        ours = Estimate(float(r.ours), float(getattr(r, "ours_lo", float("nan"))),
                        float(getattr(r, "ours_hi", float("nan")))).text(4)
        v = text(getattr(r, "verdict", ""))
        same = text(getattr(r, "same_as", ""))
        t.add_row(str(r.notebook), str(r.key), ours, fmt(r.paper),
                  f"[{colours.get(v, 'default')}]{v}[/]" + (f" (= {same})" if same else ""), text(r.unit),
                  text(getattr(r, "meaning", "")), text(getattr(r, "measured", "")))
    return t


# ---- command line (mounted by repro.cli as `repro paper`) ----------------------------------------
def _parse_extra(pairs: Sequence[str]) -> dict[str, Any]:
    return parse_assignments(list(pairs), "paper: -p")


def _make_cli() -> Callable[..., None]:
    import typer

    def paper_cmd(
        backend: str = typer.Option("sim", "--backend",
                                    help="sim (default: the deterministic simulator) | emulated (local emulated vLLM "
                                         "engines over real HTTP) | vllm"),
        scale: str | None = typer.Option(None, "--scale", help="quick | full (default: full on sim, quick live)"),
        only: str | None = typer.Option(None, "--only", help="notebooks to run, e.g. 01,04 (default: all)"),
        cluster: str | None = typer.Option(None, "--cluster", help="cluster YAML for emulated/vllm"),
        out: Path = typer.Option(Path("build/notebooks"), "--out", help="folder for the executed notebooks"),
        results_dir: Path | None = typer.Option(None, "--results-dir",
                                                help="tidy CSVs (relative: to the repo root; default "
                                                     "results/<backend>-<scale>)"),
        figures_dir: Path | None = typer.Option(None, "--figures-dir",
                                                help="PNG + PDF figures (relative: to the repo root; default "
                                                     "figures/<backend>-<scale>)"),
        param: list[str] = typer.Option([], "--param", "-p", help="extra notebook parameter NAME=VALUE (repeatable)"),
        jobs: int = typer.Option(0, "--jobs", "-j", min=0, max=1024,
                                 help="cores to use: notebooks at once, and their simulations on worker "
                                      "processes (0: every core on sim, 1 on live backends); any value "
                                      "gives the same results"),
        executor: str = typer.Option("local", "--executor",
                                     help="where the notebooks' simulations run: local (worker processes) | "
                                          "ray (a Ray cluster, --address) | serial"),
        address: str | None = typer.Option(None, "--address",
                                           help="ray: the head's HOST:PORT (or 'auto'; default $REPRO_RAY_ADDRESS)"),
        table: bool = typer.Option(False, "--table", help="also print every row of summary.csv (default: the "
                                                          "headline claims and the grouped tally)"),
    ) -> None:
        """Rerun the paper: execute the section notebooks and print ours vs the paper's numbers.

        Default: the deterministic simulator at full scale (10 traces x the paper's 10,000 requests;
        the same numbers on every machine; notebooks in parallel, one per core). --backend emulated runs
        the real proxy and load generator over HTTP against local emulated vLLM engines (quick scale
        by default, ~45 min on 2 cores; see repro.paper.plans for what quick cuts). Every number gets
        a 95% interval and a verdict judged against the paper's stated size; the run ends with the
        headline claims and the grouped tally here, summary.csv and report.html (its conclusion first).
        """
        scale = scale or ("full" if backend == "sim" else "quick")
        from repro.experiment.executor import EXECUTORS

        check_choice("paper", "executor", executor, EXECUTORS)
        if address and executor != "ray":
            raise ConfigError(f"paper: --address is for --executor ray (got --executor {executor})")
        if jobs > 1 and backend != "sim":
            raise ConfigError(f"paper: --jobs {jobs} with --backend {backend}: live runs need the machine to "
                              "themselves (their validity depends on it); --jobs runs sim notebooks in parallel")
        results, _ = run_paper(backend=backend, scale=scale, only=only, cluster=cluster, out=out,
                               results_dir=results_dir, figures_dir=figures_dir, extra=_parse_extra(param),
                               jobs=jobs, executor=executor, address=address, table=table)
        if not all(r.ok for r in results):
            raise typer.Exit(1)

    return paper_cmd


paper_cli = _make_cli()


# ---- checked outputs (golden files) ------------------------------------------------------------
CHECK_ENV = "REPRO_CHECK_OUTPUTS"  # "1": compare checked cells with their golden files; "update": rewrite them
EXPECTED_DIR = NOTEBOOK_DIR / "expected"
CHECK_MARKER = "expected_output("


def is_checked(cell: NotebookNode) -> bool:
    """A code cell whose printed values are compared with a golden file (see `expected_output`)."""
    return cell.get("cell_type") == "code" and CHECK_MARKER in _cell_source(cell)


@contextlib.contextmanager
def expected_output(notebook: str, index: int) -> Iterator[None]:
    """Print what the block prints and, when ``$REPRO_CHECK_OUTPUTS`` is set, compare it with
    ``notebooks/expected/<notebook>-<index>.txt`` (``update``: rewrite that file instead).

    The notebooks stay stripped of outputs in git; the deterministic values a change must not move
    silently live in these small golden files. The test run sets the variable (the root
    ``conftest.py``), so a changed headline number fails the notebook's cell with a diff;
    interactive and ``repro paper`` runs, at any parameters, only print.
    """
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        yield
    text = buf.getvalue()
    sys.stdout.write(text)
    mode = os.environ.get(CHECK_ENV, "")
    if not mode:
        return
    path = EXPECTED_DIR / f"{notebook}-{index}.txt"
    if mode == "update":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return
    expected = path.read_text() if path.exists() else None
    if expected != text:
        diff = "".join(difflib.unified_diff((expected or "").splitlines(True), text.splitlines(True),
                                            fromfile=str(path), tofile="this run"))
        raise AssertionError(
            f"checked output of {notebook} (cell {index}) changed; if the change is intended, rerun "
            f"the notebook tests with {CHECK_ENV}=update\n{diff}"
        )
