"""Root pytest configuration: the notebooks' checked cells compare their printed values with the
golden files in notebooks/expected/ (see `repro.paper.expected_output`). nbval's kernels inherit
this environment. Set REPRO_CHECK_OUTPUTS=update yourself to rewrite the golden files."""

import os

os.environ.setdefault("REPRO_CHECK_OUTPUTS", "1")
