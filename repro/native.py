"""The compiled hot modules: which modules the build compiles, which are in use, and the guard that
keeps a stale compiled module out.

Where mypyc and a C compiler are available, the build (``setup.py``) compiles `MODULES` to C
extensions from their own sources; Python then imports the extension before the ``.py``. Same
code, same results (the golden journals hold for both); only speed differs. The build records
each compiled source's sha256 in ``native_build.json`` next to this file, and `install_guard`
(run by ``import repro``) makes Python import the *sources* of all of `MODULES` instead when

- ``$REPRO_PURE_PYTHON`` is set (to anything but ``0``/``false``/``no``): the reference path, e.g.
  to profile in Python or to check the compiled modules against it; or
- any compiled module is stale: its source changed since the build (an edit in an editable
  install, a ``git pull``), the manifest does not vouch for it, or one of `MODULES` has no
  extension while others have (a module added since the build). A `RuntimeWarning` says so;
  ``pip install -e .`` rebuilds.

All or none: the compiled modules call each other natively (one extension group), so a compiled
simulator cannot drive a source-built router.

This module uses only the standard library: ``setup.py`` loads it by path for `MODULES`,
`PURE_ENV`, `MANIFEST_NAME` and `source_sha`.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
import warnings
from pathlib import Path

# the compiled modules, as paths under the project root (the build's input, in this order)
MODULES = ("repro/sim/simulator.py", "repro/sim/engines.py", "repro/engine/links.py", "repro/routing/ledger.py",
           "repro/routing/router.py", "repro/routing/policies/pricing.py", "repro/routing/policies/view.py")
PURE_ENV = "REPRO_PURE_PYTHON"
MANIFEST_NAME = "native_build.json"
PACKAGE_DIR = Path(__file__).resolve().parent
ROOT = PACKAGE_DIR.parent


def module_name(path: str) -> str:
    """``repro/sim/simulator.py`` -> ``repro.sim.simulator``."""
    return path.removesuffix(".py").replace("/", ".")


def source_sha(path: Path) -> str:
    """sha256 (hex) of a source file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def pure_requested() -> bool:
    """``$REPRO_PURE_PYTHON`` asks for the sources."""
    return os.environ.get(PURE_ENV, "").strip().lower() not in ("", "0", "false", "no")


def extension_files(path: str) -> list[Path]:
    """The compiled extension files present for a module (any ABI suffix Python would import)."""
    src = ROOT / path
    return [src.with_name(src.stem + suffix) for suffix in importlib.machinery.EXTENSION_SUFFIXES
            if src.with_name(src.stem + suffix).exists()]


def manifest() -> dict[str, str]:
    """module name -> sha256 of the source the build compiled (empty: no compiled build here)."""
    try:
        return dict(json.loads((PACKAGE_DIR / MANIFEST_NAME).read_text())["modules"])
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def stale_modules() -> list[str]:
    """Where any of `MODULES` has an extension file: those whose extension is missing or was built
    from another source than the one on disk (empty: all compiled from these sources, or none)."""
    present = {p: bool(extension_files(p)) for p in MODULES}
    if not any(present.values()):
        return []
    built = manifest()
    return [module_name(p) for p in MODULES
            if not present[p] or built.get(module_name(p)) != source_sha(ROOT / p)]


class SourceFinder:
    """A meta-path finder that imports the given modules from their ``.py`` sources; ``reason``
    says why (empty: it imports nothing, the extensions are used where built)."""

    def __init__(self, sources: dict[str, Path], reason: str) -> None:
        self.sources = sources
        self.reason = reason

    def find_spec(self, name: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        src = self.sources.get(name)
        if src is None:
            return None
        return importlib.util.spec_from_file_location(name, src)


_GUARD: SourceFinder | None = None


def install_guard() -> str:
    """Decide, once per process, whether `MODULES` come from their extensions or their sources;
    returns why the sources are used (``""``: the extensions, where built). Must run before any of
    `MODULES` is imported (``import repro`` runs it)."""
    global _GUARD
    if _GUARD is not None:
        return _GUARD.reason
    reason = ""
    if pure_requested():
        reason = f"${PURE_ENV} is set"
    else:
        stale = stale_modules()
        if stale:
            reason = (f"the compiled modules were not built from these sources ({', '.join(stale)}: edited or "
                      "added since the build); run `pip install -e .` to rebuild")
            warnings.warn(f"repro: using the Python sources: {reason}", RuntimeWarning, stacklevel=3)
    finder = SourceFinder({module_name(p): ROOT / p for p in MODULES} if reason else {}, reason)
    _GUARD = finder
    if reason:
        sys.meta_path.insert(0, finder)
    return reason


def status() -> dict[str, str]:
    """module name -> ``"compiled"`` or ``"source"``: what this process imports (imports them)."""
    out = {}
    for p in MODULES:
        name = module_name(p)
        mod = importlib.import_module(name)
        out[name] = "compiled" if Path(mod.__file__ or "").suffix in (".so", ".pyd") else "source"
    return out


def describe() -> list[tuple[str, str, str]]:
    """(module, ``"compiled"`` or ``"source"``, why) for each of `MODULES`, as this process imports them."""
    reason = install_guard()
    built = manifest()
    rows = []
    for name, state in status().items():
        if state == "compiled":
            why = "mypyc extension built from this source"
        elif reason:
            why = reason
        elif name not in built:
            why = ("no extension was built: the install had no C compiler or mypyc, or had "
                   f"${PURE_ENV} set (`pip install -e .` builds it)")
        else:
            why = "its extension could not be imported"
        rows.append((name, state, why))
    return rows
