"""The package layout's rules (docs/ARCHITECTURE.md): no import circles, no private names imported
across modules, a simulator run that loads no HTTP, CLI or process-launching code, at most
`MAX_LOOSE_MODULES` modules at the top level and none over `MAX_MODULE_LINES` lines."""

from __future__ import annotations

import ast
import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "repro"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PKG.rglob("*.py")) if p.name != "__main__.py"}


def _resolve(name: str) -> str | None:
    """The repro module an import names (a package's name stands for its __init__)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


@functools.cache
def _tree(path: Path) -> ast.Module:
    """The parsed source of ``path`` (parsed once per session: every rule below reads the same files)."""
    return ast.parse(path.read_text(encoding="utf-8"))


@functools.cache
def _scan(mod: str) -> tuple[tuple[ast.Import | ast.ImportFrom, bool, bool], ...]:
    """Every import statement of ``mod`` with (inside a function, under ``if TYPE_CHECKING:``)."""
    out = []

    def walk(node: ast.AST, inside_def: bool, typing_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                out.append((child, inside_def, typing_only))
            walk(child, inside_def or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)),
                 typing_only or (isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test)))

    walk(_tree(MODULES[mod]), False, False)
    return tuple(out)


@functools.cache
def _imports(mod: str, *, lazy: bool, types: bool = False) -> list[tuple[str, list[str], int]]:
    """(imported repro module, names, line) of ``mod``; ``lazy``: also imports inside functions; ``types``:
    also imports under ``if TYPE_CHECKING:`` (they never run, but a circle of types is a circle of concepts)."""
    out = []
    for node, inside_def, typing_only in _scan(mod):
        if (typing_only and not types) or (inside_def and not lazy):
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("repro"):
                    out.append((_resolve(alias.name), [], node.lineno))
        elif node.module and node.module.startswith("repro") and node.level == 0:
            target = _resolve(node.module)
            names = [a.name for a in node.names]
            # `from repro.pkg import module` imports that module
            subs = [f"{node.module}.{n}" for n in names if f"{node.module}.{n}" in MODULES]
            out.extend((s, [], node.lineno) for s in subs)
            out.append((target, [n for n in names if f"{node.module}.{n}" not in MODULES], node.lineno))
    return [(t, n, line) for t, n, line in out if t and t != mod]


def _cycles(lazy: bool, types: bool = False) -> list[list[str]]:
    graph = {m: sorted({t for t, _, _ in _imports(m, lazy=lazy, types=types)}) for m in MODULES}
    found, state, stack = [], {}, []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in graph.get(m, []):
            if state.get(t) == 1:
                found.append(stack[stack.index(t):] + [t])
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in graph:
        if m not in state:
            visit(m)
    return found


def test_the_layout_is_scanned():
    # the rules below would pass vacuously on an empty scan
    assert {"repro.sim.simulator", "repro.routing.policies", "repro.experiment.runner",
            "repro.live.run"} <= set(MODULES)
    assert any(t == "repro.sim.simulator" for t, _, _ in _imports("repro.experiment.runner", lazy=False))


MAX_LOOSE_MODULES = 8
"""The most ``.py`` files directly under ``repro/`` (its ``__init__`` counted): each a concept of its own that no
package owns; anything else lives in the package of its role (docs/ARCHITECTURE.md)."""
MAX_MODULE_LINES = 700
"""The longest a module may be: a longer one is split along its seams."""


def test_few_loose_modules_at_the_top_level():
    loose = sorted(p.name for p in PKG.glob("*.py"))
    assert len(loose) <= MAX_LOOSE_MODULES, f"{len(loose)} loose modules at repro/'s top level: {loose}"


def test_no_module_is_over_the_house_size():
    long = sorted(f"{m} ({n} lines)" for m, p in MODULES.items()
                  if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES)
    assert long == []


def test_no_import_circles_at_import_time():
    assert _cycles(lazy=False) == []


def test_no_import_circles_even_counting_imports_inside_functions():
    assert _cycles(lazy=True) == []


def test_no_import_circles_even_for_types():
    """Counting imports under ``if TYPE_CHECKING:`` too: a type that would point back up is a Protocol on the
    lower floor (e.g. `repro.paper.grids.GridContext`), not an import of the upper module."""
    assert _cycles(lazy=True, types=True) == []


FLOORS: tuple[tuple[str, ...], ...] = (
    ("errors", "paths", "vocab", "native", "journal_schema", "web", "statistics"),
    ("repro", "sources", "workload"),
    ("engine",),
    ("cluster", "routing"),
    ("emulator", "sim", "figure_style"),
    ("experiment",),
    ("identify", "live"),
    ("validation",),
    ("paper",),
    ("cli",),
)
"""The packages (and top-level modules) of `repro` by floor, the ground first (docs/ARCHITECTURE.md, "Floors"): a
package imports only packages on floors below its own, so no two import each other. ``repro`` is the package's
own ``__init__``."""


def _package(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else "repro"


def _package_imports() -> dict[tuple[str, str], list[str]]:
    """(importer package, imported package) -> where: every import between two packages, counting imports inside
    functions and under ``if TYPE_CHECKING:``."""
    out: dict[tuple[str, str], list[str]] = {}
    for m in MODULES:
        for t, _, line in _imports(m, lazy=True, types=True):
            a, b = _package(m), _package(t)
            if a != b:
                out.setdefault((a, b), []).append(f"{m}:{line} -> {t}")
    return out


def test_every_package_has_a_floor():
    floors = [p for floor in FLOORS for p in floor]
    assert len(floors) == len(set(floors))
    assert sorted({_package(m) for m in MODULES}) == sorted(floors)


def test_no_two_packages_import_each_other():
    ties = _package_imports()
    both = sorted(f"{a} <-> {b}: {ties[(a, b)][:2]} / {ties[(b, a)][:2]}" for a, b in ties if a < b and (b, a) in ties)
    assert both == []


def test_packages_import_only_from_the_floors_below():
    floor = {p: k for k, names in enumerate(FLOORS) for p in names}
    ups = sorted(f"{a} (floor {floor[a] + 1}) imports {b} (floor {floor[b] + 1}): {where[:3]}"
                 for (a, b), where in _package_imports().items() if floor[b] >= floor[a])
    assert ups == []
    assert _package_imports()  # scanned


def test_no_module_imports_a_private_name_of_another():
    bad = [f"{m}:{line} imports {n} from {t}" for m in MODULES for t, names, line in _imports(m, lazy=True)
           for n in names if n.startswith("_") and n != "__version__"]
    assert bad == []


SIM_RUN = """
import json, sys, tempfile
from repro.experiment.runner import run
from repro.experiment.spec import RunSpec
run(RunSpec(n_requests=40, workload="chat", rate=20.0), tempfile.mkdtemp())
print(json.dumps(sorted(sys.modules)))
"""
FORBIDDEN_IN_SIM = ("typer", "click", "httpx", "aiohttp", "fastapi", "uvicorn", "matplotlib", "repro.live",
                    "repro.cli", "repro.emulator", "repro.cluster.launchers", "repro.cluster.processes", "repro.paper")


def test_a_sim_run_loads_no_http_cli_or_process_launching_code():
    out = subprocess.run([sys.executable, "-c", SIM_RUN], capture_output=True, text=True, check=True, cwd=ROOT)
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert "repro.sim.simulator" in loaded  # it did simulate
    bad = [m for m in loaded if any(m == f or m.startswith(f + ".") for f in FORBIDDEN_IN_SIM)]
    assert bad == []


@pytest.mark.parametrize("mod", ["repro.cluster.topology", "repro.experiment.spec", "repro.routing.policies"])
def test_light_modules_stay_light(mod):
    code = f"import json, sys; import {mod}; print(json.dumps(sorted(sys.modules)))"
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                       cwd=ROOT).stdout)
    assert not [m for m in loaded if m.split(".")[0] in ("httpx", "typer", "aiohttp", "fastapi", "subprocess_tee")]
    assert not [m for m in loaded if m.startswith(("repro.cluster.launchers", "repro.live", "repro.cli"))]


@pytest.mark.parametrize("mod", ["repro.live.proxy.app", "repro.emulator.app"])
def test_the_servers_load_no_pandas(mod):
    """The proxy and the emulator start once per engine or run, in every live test and cluster: they write journals
    row by row and read none (pandas is ~0.6 s of a start on a slow core)."""
    code = f"import json, sys; import {mod}; print(json.dumps(sorted(sys.modules)))"
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                       cwd=ROOT).stdout)
    assert mod in loaded
    assert not [m for m in loaded if m.split(".")[0] in ("pandas", "scipy", "sklearn", "matplotlib")]


def test_only_the_command_line_imports_typer_and_rich():
    """Commands and terminal output live in repro/cli/; a domain module reports through hooks (e.g.
    `repro.experiment.runner.SweepProgress`, `repro.live.loadgen.ReplayProgress`), even in a function."""
    offenders = []
    for path in sorted(PKG.rglob("*.py")):
        if (PKG / "cli") in path.parents:
            continue
        for node in ast.walk(_tree(path)):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in ("typer", "rich")]
    assert offenders == []


# docs/HTTP.md: one HTTP client per purpose, each library in its place
HTTP_PLACES = {
    "httptools": ("repro/live/proxy/engine_client.py",),
    "aiohttp": ("repro/live/proxy/", "repro/live/loadgen.py"),
    "httpx": ("repro/cluster/launchers", "repro/live/gates.py", "repro/live/calibration_bench.py",
              "repro/live/validity.py", "repro/live/run.py", "repro/live/run_account.py",
              "repro/live/external_router.py", "repro/live/pd_protocol.py"),
}


def test_each_http_client_stays_in_its_place():
    """The proxy's hot path: httptools; its cold paths and the load generator: aiohttp; the control plane:
    httpx (docs/HTTP.md says why). Imports inside functions count."""
    offenders = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(_tree(path)):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                lib = name.split(".")[0]
                if lib in HTTP_PLACES and not rel.startswith(HTTP_PLACES[lib]):
                    offenders.append(f"{rel}:{node.lineno} imports {lib}")
    assert offenders == [], "see docs/HTTP.md"
    assert any(HTTP_PLACES)  # scanned
