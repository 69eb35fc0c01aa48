"""Root pytest configuration: the notebooks' checked cells compare their printed values with the
golden files in notebooks/expected/ (see `repro.paper.golden.expected_output`). nbval's kernels inherit
this environment. Set REPRO_CHECK_OUTPUTS=update yourself to rewrite the golden files."""

import os
import sys

import pytest

os.environ.setdefault("REPRO_CHECK_OUTPUTS", "1")

# Bytecode is cached during the tests even where $PYTHONDONTWRITEBYTECODE asks otherwise (CI's machines set it):
# the tests start hundreds of Python processes (proxies, emulated engines, load generators, notebook kernels, the
# command line), and without a cache every one of them compiled the package's modules again, and every pytest
# worker re-rewrote every test module: ~40 s of the README's tests on a 2-core machine. The cache lands in
# __pycache__ folders beside the sources (git ignores them), as Python's default does.
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
    sys.dont_write_bytecode = False

# Property tests are derandomized by default so that CI on a clean clone is reproducible (a
# random search once found a real bug there, after the tests had passed here: see the @example
# in tests/test_tokenizer.py). To search for new counterexamples, run with
# HYPOTHESIS_PROFILE=explore (random seeds, 10x examples).
from hypothesis import settings  # noqa: E402

settings.register_profile("repro", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, max_examples=1000, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repro"))


# The notebooks run through nbval in the slow tier (`python3 -m pytest -m slow`, which .ci/run runs after the
# README's tests), except these two cheap ones, kept in the README's tests as a smoke test of the notebooks.
FAST_NOTEBOOKS = ("01_calibration.ipynb", "04_mixed_goodput.ipynb")


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by mark
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = str(item.fspath)
        if path.endswith(".ipynb") and not path.endswith(FAST_NOTEBOOKS):
            item.add_marker(pytest.mark.slow)
