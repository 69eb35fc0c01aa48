"""The compiled hot modules (`repro.native`, built by setup.py with mypyc): the build compiles them
where it can, a stale build is never used, and the compiled code gives the sources' journals."""

from __future__ import annotations

import importlib.machinery
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from repro import native

ROOT = Path(__file__).resolve().parents[1]


def _python(code: str, **env: str) -> str:
    """Run ``code`` in a fresh interpreter (the import-time guard runs once per process)."""
    full = {**os.environ, **env}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env=full, cwd=ROOT).stdout


def _compiler() -> str | None:
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(cc)


def test_the_build_compiled_them_where_it_could():
    """Where a C compiler exists, ``pip install -e .`` (build isolation brings mypyc) compiles every
    module of `native.MODULES`: a type error in one of them would silently give the slow path."""
    if native.pure_requested():
        pytest.skip(f"${native.PURE_ENV} is set: the sources are in use on purpose")
    if _compiler() is None:
        pytest.skip("no C compiler on this machine: the pure-Python build is expected")
    status = json.loads(_python("import json, repro.native as n; print(json.dumps(n.status()))"))
    assert status == {native.module_name(p): "compiled" for p in native.MODULES}, (
        f"{status}: reinstall with `pip install -e .` and read the build's 'repro:' lines (mypyc's errors)")
    assert set(native.manifest()) == set(status)


def test_pure_env_imports_the_sources():
    out = _python("import json, repro.native as n; print(json.dumps(n.status()))", **{native.PURE_ENV: "1"})
    assert set(json.loads(out).values()) == {"source"}


def _tree(tmp_path: Path, sha: str | None) -> Path:
    """A fake project: one native module's source, an extension file beside it, a manifest."""
    pkg = tmp_path / "repro"
    (pkg / "sim").mkdir(parents=True)
    (pkg / "sim" / "simulator.py").write_text("X = 1\n")
    (pkg / "sim" / ("simulator" + importlib.machinery.EXTENSION_SUFFIXES[0])).write_bytes(b"")
    if sha is not None:
        (pkg / native.MANIFEST_NAME).write_text(json.dumps({"modules": {"repro.sim.simulator": sha}}))
    return pkg


@pytest.mark.parametrize("case", ["fresh", "edited", "no manifest", "one not built", "none built"])
def test_stale_extensions_are_detected(tmp_path, monkeypatch, case):
    pkg = _tree(tmp_path, None if case == "no manifest" else "0" * 64)
    src = pkg / "sim" / "simulator.py"
    if case not in ("edited", "no manifest"):
        (pkg / native.MANIFEST_NAME).write_text(
            json.dumps({"modules": {"repro.sim.simulator": native.source_sha(src)}}))
    modules = ("repro/sim/simulator.py",)
    if case == "one not built":  # a module added since the build: no extension of its own
        (pkg / "other.py").write_text("Y = 2\n")
        modules += ("repro/other.py",)
    if case == "none built":  # a pure-Python install: nothing to guard
        for f in (pkg / "sim").glob("simulator.*"):
            if f.suffix != ".py":
                f.unlink()
    monkeypatch.setattr(native, "ROOT", tmp_path)
    monkeypatch.setattr(native, "PACKAGE_DIR", pkg)
    monkeypatch.setattr(native, "MODULES", modules)
    expected = {"fresh": [], "none built": [], "edited": ["repro.sim.simulator"],
                "no manifest": ["repro.sim.simulator"], "one not built": ["repro.other"]}[case]
    assert native.stale_modules() == expected


def test_source_finder_loads_the_py(tmp_path):
    src = tmp_path / "mod.py"
    src.write_text("VALUE = 42\n")
    finder = native.SourceFinder({"some_native_mod": src}, "test")
    spec = finder.find_spec("some_native_mod")
    assert spec is not None and spec.origin == str(src)
    assert finder.find_spec("another") is None


@pytest.mark.slow
def test_compiled_and_source_journals_are_identical():
    """The golden journals (frozen from the pure-Python simulator) pass in the other mode too: with
    the compiled modules in use here, the subprocess runs them from the sources, and vice versa."""
    pure = "0" if native.pure_requested() else "1"
    here = set(native.status().values())
    there = set(json.loads(_python("import json, repro.native as n; print(json.dumps(n.status()))",
                                   **{native.PURE_ENV: pure})).values())
    if here == {"compiled"}:  # the subprocess must really run the other mode, or this compares nothing
        assert there == {"source"}
    keys = "round_robin or least_loaded or marginal_cost or serial_mc or oracle_mc or big_8p24d_mc or mc_guard"
    res = subprocess.run([sys.executable, "-m", "pytest", "-o", "addopts=", "-q", "-p", "no:cacheprovider", "-k", keys,
                          str(ROOT / "tests" / "test_journal_golden.py")],
                         capture_output=True, text=True, cwd=ROOT, env={**os.environ, native.PURE_ENV: pure})
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    passed = re.search(r"(\d+) passed", res.stdout)
    assert passed and int(passed.group(1)) >= 8 and "skipped" not in res.stdout, res.stdout[-500:]


def test_guard_falls_back_to_sources_with_a_warning(tmp_path, monkeypatch):
    pkg = _tree(tmp_path, "0" * 64)  # the manifest vouches for another source: stale
    monkeypatch.setattr(native, "ROOT", tmp_path)
    monkeypatch.setattr(native, "PACKAGE_DIR", pkg)
    monkeypatch.setattr(native, "MODULES", ("repro/sim/simulator.py",))
    monkeypatch.setattr(native, "_GUARD", None)
    monkeypatch.delenv(native.PURE_ENV, raising=False)
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    with pytest.warns(RuntimeWarning, match="not built from these sources"):
        reason = native.install_guard()
    assert "repro.sim.simulator" in reason
    finder = sys.meta_path[0]
    assert isinstance(finder, native.SourceFinder)
    assert finder.find_spec("repro.sim.simulator").origin == str(pkg / "sim" / "simulator.py")
    assert native.install_guard() == reason  # once per process


def test_cli_native_names_every_module():
    from typer.testing import CliRunner

    from repro.cli import app

    res = CliRunner().invoke(app, ["native"])
    assert res.exit_code == 0, res.output
    for p in native.MODULES:
        assert native.module_name(p) in res.output
