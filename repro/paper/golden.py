"""Checked outputs: a notebook block's printed values compared with a golden file.

A notebook cell wraps the values a change must not move silently in
``with ctx.expected_output(i):`` (`repro.paper.section.Section.expected_output`); `expected_output`
prints them and, when ``$REPRO_CHECK_OUTPUTS`` is set (the test run sets it, the root
``conftest.py``), compares them with ``notebooks/expected/<notebook>-<index>.txt``. The notebooks
stay stripped of outputs in git; these small text files hold the numbers. `repro.paper.runner`
finds the checked cells by `CHECK_MARKER`. No units: the files hold what the block prints.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import os
import sys
from collections.abc import Iterator

from repro.paths import NOTEBOOK_DIR

CHECK_ENV = "REPRO_CHECK_OUTPUTS"  # "1": compare checked cells with their golden files; "update": rewrite them
EXPECTED_DIR = NOTEBOOK_DIR / "expected"
CHECK_MARKER = "expected_output("


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
