"""The source files a piece of code runs, and their hash: what decides whether a finished run is stale.

`import_closure(module)` follows a module's imports (read from its source with `ast`, resolved with
`importlib.util.find_spec`, recursively; imports inside functions included) and returns the source
files of every module it reaches that is not part of the standard library. A module of another
installed distribution is not read but named with its version (``numpy==2.4.6``): a new release of
a dependency changes the hash, its thousands of files are not hashed. A compiled module (mypyc's
extension beside ``repro/routing/ledger.py``) counts by its Python source. `closure_hash(modules)`
is the sha256 of those files' paths and bytes, and of the versions.

Used by `repro.routing.policies.policy_fingerprint` (a policy and everything it imports: pricing.py
included) and by `repro.experiment.runner`, which reuses a finished run only when its fingerprint
is this code's.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import sysconfig
from collections.abc import Iterable
from pathlib import Path

from repro.paths import REPO_ROOT

_STDLIB = tuple(str(Path(sysconfig.get_paths()[k]).resolve()) for k in ("stdlib", "platstdlib"))
_SITE = tuple(str(Path(sysconfig.get_paths()[k]).resolve()) for k in ("purelib", "platlib"))


def _source_of(origin: str) -> Path | None:
    """A module's Python source: ``origin`` itself, or for a compiled extension the ``.py`` beside it."""
    p = Path(origin)
    if p.suffix == ".py":
        return p
    if p.suffix in (".so", ".pyd"):
        src = p.with_name(p.name.split(".", 1)[0] + ".py")
        return src if src.exists() else None
    return None


def _imports(source: str, package: str) -> set[str]:
    """Absolute names of the modules ``source`` imports (``package``: the importing module's package)."""
    out: set[str] = set()
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return out
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - node.level + 1] if node.level > 1 else parts
                base = ".".join([*parts, base] if base else parts)
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)  # `from pkg import module`
    return {n for n in out if n}


@functools.lru_cache(maxsize=1)
def _declared_distributions() -> dict[str, list[str]]:
    """Top-level package -> the distributions whose ``top_level.txt`` names it (one small file per distribution:
    ~10 ms, where `importlib.metadata.packages_distributions` also reads every RECORD: ~1.2 s on a slow core)."""
    out: dict[str, list[str]] = {}
    for dist in importlib.metadata.distributions():
        for top in (dist.read_text("top_level.txt") or "").split():
            out.setdefault(top, []).append(dist.metadata["Name"])
    return out


@functools.lru_cache(maxsize=1)
def _distributions() -> dict[str, list[str]]:
    return dict(importlib.metadata.packages_distributions())


@functools.lru_cache(maxsize=64)
def _distribution_version(top: str) -> str:
    try:  # most distributions are named as their top-level package (numpy, pandas); else look it up
        return f"{top}=={importlib.metadata.version(top)}"
    except importlib.metadata.PackageNotFoundError:
        pass
    for dist in _declared_distributions().get(top) or _distributions().get(top, []):
        try:
            return f"{dist}=={importlib.metadata.version(dist)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return f"{top}==?"


@functools.lru_cache(maxsize=256)
def import_closure(module: str) -> tuple[tuple[Path, ...], tuple[str, ...]]:
    """``(source files, other distributions' versions)`` of ``module`` and everything it imports, outside
    the standard library. Modules that cannot be found are skipped (a guarded optional import)."""
    root_top = module.split(".")[0]
    files: dict[str, Path] = {}
    versions: set[str] = set()
    todo, seen = [module], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name.split(".")[0] in sys.builtin_module_names:
            continue
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError, AttributeError):
            continue
        if spec is None or not spec.origin or spec.origin in ("built-in", "frozen"):
            continue
        origin = str(Path(spec.origin).resolve())
        if origin.startswith(_STDLIB) and not origin.startswith(_SITE):
            continue
        top = name.split(".")[0]
        if top != root_top and top != "repro" and origin.startswith(_SITE):
            versions.add(_distribution_version(top))  # another installed distribution: its version
            continue
        src = _source_of(origin)
        if src is None:
            continue
        files[str(src)] = src
        package = name if spec.submodule_search_locations else name.rpartition(".")[0]
        todo.extend(_imports(src.read_text(encoding="utf-8", errors="replace"), package))
    return tuple(files[k] for k in sorted(files)), tuple(sorted(versions))


def closure_hash(modules: Iterable[str]) -> str:
    """A short sha256 of the import closures of ``modules`` (`import_closure`): paths, bytes and versions."""
    h = hashlib.sha256()
    for m in sorted(set(modules)):
        files, versions = import_closure(m)
        for f in files:
            h.update(f.name.encode())
            h.update(f.read_bytes())
        for v in versions:
            h.update(v.encode())
    return h.hexdigest()[:16]


_LOADED: dict[str, tuple[str, float]] = {}
"""A user's module -> (the closure hash of the code this process imported, when it was last checked)."""
RECHECK_S = 1.0
"""How often (seconds) `fresh_module` looks at a loaded module's files again."""


def _own_files(module: str) -> list[tuple[str, Path]]:
    """The modules of ``module``'s closure that are a user's own code (not repro's, not installed, not the
    standard library) and loaded in this process, with their files, deepest dependency last."""
    files, _ = import_closure(module)
    paths = {str(p) for p in files}
    out = []
    for name, mod in list(sys.modules.items()):
        origin = getattr(mod, "__file__", None)
        if not origin or name.split(".")[0] == "repro":
            continue
        src = _source_of(str(Path(origin).resolve()))
        if src is not None and str(src) in paths and not str(src).startswith(_SITE):
            out.append((name, src))
    return out


def _drop_bytecode(src: Path) -> None:
    """Remove the cached bytecode of ``src`` (``__pycache__``): CPython trusts a ``.pyc`` whose recorded source
    mtime (whole seconds) and size match, so a file edited within the second it was compiled, to the same size,
    would be reloaded from its stale bytecode. Nothing to do where there is none or it cannot be removed."""
    with contextlib.suppress(OSError, NotImplementedError, ValueError):
        os.unlink(importlib.util.cache_from_source(str(src)))


def fresh_module(module: str) -> bool:
    """Make sure this process runs the code of a user's ``module`` (a policy given by import path) as it is
    on disk now: import it, and when its files or those of the user's modules it imports (`import_closure`)
    changed since this process imported them, reload those modules (its helpers first), so that an edited
    policy runs its new code in a long-lived process (a notebook's kernel, a sweep's worker processes).
    Looked at again at most every `RECHECK_S` seconds. Returns True when something was reloaded. Raises
    what the import raises."""
    import importlib
    import time

    now = time.monotonic()
    if module not in sys.modules:
        importlib.import_module(module)
        _LOADED[module] = (closure_hash([module]), now)
        return False
    seen = _LOADED.get(module)
    if seen is not None and now - seen[1] < RECHECK_S:
        return False
    current = closure_hash([module])
    if seen is None or seen[0] == current:  # first check in this process: what is loaded is taken as is
        _LOADED[module] = (current if seen is None else seen[0], now)
        return False
    own = _own_files(module)
    for name, src in sorted(own, key=lambda x: (x[0] == module, -x[0].count("."))):
        _drop_bytecode(src)
        importlib.reload(sys.modules[name])
    _LOADED[module] = (current, now)
    return True


def commit_id(repo: Path = REPO_ROOT) -> str:
    """The code's commit (short), ``-dirty`` with uncommitted changes to tracked files; ``unknown`` outside git."""
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("-dirty" if dirty else "")
