"""Root pytest configuration: the notebooks' checked cells compare their printed values with the
golden files in notebooks/expected/ (see `repro.paper.golden.expected_output`). nbval's kernels inherit
this environment. Set REPRO_CHECK_OUTPUTS=update yourself to rewrite the golden files."""

import os

import pytest

os.environ.setdefault("REPRO_CHECK_OUTPUTS", "1")

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
