"""Build script: everything else is in pyproject.toml.

The package is pure Python. Where mypyc (a build requirement, from PyPI) and a C compiler are
available, the build also compiles the simulator's and the router's hot modules
(`repro.native.MODULES`) to C extensions from the *same* source files: same code, same floats,
same journals (the golden journal tests run against whichever is installed), 2-3x faster
simulations. Python imports an extension module before a ``.py`` of the same name, so nothing else
changes.

A machine without a compiler still installs: the extensions are optional, and a failed compile
leaves the pure-Python modules in use (``repro native`` says which are in use). ``REPRO_PURE_PYTHON=1``
at install time skips the compile; at run time it makes `repro` import the sources instead.

The build records each compiled source's sha256 in ``repro/native_build.json``. At import, `repro.native`
compares them with the sources on disk: after an edit to one of them in an editable install (or a
``git pull``), the stale extensions are bypassed, with a warning, until ``pip install -e .`` rebuilds.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
# repro/native.py (standard library only) has the list of compiled modules and the manifest's format
_spec = importlib.util.spec_from_file_location("repro_native_build", ROOT / "repro" / "native.py")
native = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(native)
MANIFEST = ROOT / "repro" / native.MANIFEST_NAME
# the commands that build extensions (metadata-only runs of this script need no compile)
BUILDS = {"build", "build_ext", "bdist_wheel", "editable_wheel", "develop", "install"}


class BuildNative(build_ext):
    """build_ext that records, after building, the sources of the compiled modules whose extensions
    were built (`repro.native` trusts only those): in the source tree for an in-place (editable)
    build, in the build folder for a wheel."""

    def run(self) -> None:
        self.built_names: set[str] = set()
        # an in-place build that compiles replaces the manifest (a wheel built from this tree leaves an editable
        # install's alone; so does a build that compiles nothing, e.g. the real-vLLM tier's pure-Python install of
        # this tree into its own environment, which must not make the main environment's extensions stale)
        if self.inplace and self.extensions:
            MANIFEST.unlink(missing_ok=True)
        super().run()
        # a module works only with its own extension and the group's shared library ("...__mypyc")
        names = {ext.name for ext in self.extensions}
        if not self.built_names.issuperset(n for n in names if n.endswith("__mypyc")):
            return
        built = {native.module_name(p): native.source_sha(ROOT / p) for p in native.MODULES
                 if native.module_name(p) in self.built_names}
        if built:
            text = json.dumps({"compiler": "mypyc", "modules": built}, indent=1) + "\n"
            where = MANIFEST if self.inplace else Path(self.build_lib) / "repro" / native.MANIFEST_NAME
            where.parent.mkdir(parents=True, exist_ok=True)
            where.write_text(text)

    def build_extension(self, ext: Extension) -> None:
        super().build_extension(ext)  # raises when it fails (an optional one is then skipped)
        self.built_names.add(ext.name)


def native_extensions() -> list:
    """mypyc's extensions for the native modules (optional: a failed compile falls back to the
    sources), or none where mypyc is missing, ``$REPRO_PURE_PYTHON`` is set or nothing is built."""
    if native.pure_requested():
        print(f"repro: {native.PURE_ENV} is set: pure-Python build", file=sys.stderr)
        return []
    if not BUILDS.intersection(sys.argv[1:]):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        print("repro: mypyc is not installed: pure-Python build", file=sys.stderr)
        return []
    try:
        # the other modules are type-checked only for what these use from them (errors there are not
        # this build's business); third-party packages without stubs are Any
        flags = ["--ignore-missing-imports", "--follow-imports=silent"]
        extensions = mypycify([*flags, *native.MODULES], opt_level="3", debug_level="0", group_name="repro_native")
    except SystemExit:  # mypy found an error in those modules: the sources still work as Python
        print("repro: mypyc could not compile the native modules (see above): pure-Python build", file=sys.stderr)
        return []
    for ext in extensions:
        ext.optional = True  # no compiler: build_ext warns and the sources are used
    return extensions


setup(ext_modules=native_extensions(), cmdclass={"build_ext": BuildNative})
