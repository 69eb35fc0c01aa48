"""Which code runs a spec of each backend: ``sim`` is this package's own (`repro.experiment.runner`); a live
backend (``emulated``, ``vllm``) is a plugin, found by its name among the package entry points of the group
`GROUP` (``pyproject.toml``: `repro.live.run.run_live_valid`, the real proxy and load generator over HTTP).

So `repro.experiment` never imports `repro.live`: the live harness depends on the experiment (its spec,
journal and manifest), never the other way round, as vLLM finds its platforms (``vllm.platform_plugins``).
"""

from __future__ import annotations

import functools
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from repro.errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd

    from repro.experiment.manifest import LiveOutcome
    from repro.experiment.spec import RunSpec

GROUP = "repro.backends"
"""The entry-point group of the live backends: name = the spec's ``backend``, value = a `LiveHarness`."""

OnInvalid = Literal["retry", "keep"]
"""What a live run does when the machine could not keep up with it (`repro.live.validity`):
``retry`` it at lower time scales and raise `RunInvalid` if no attempt is valid (the default);
``keep`` it, marked ``valid: false`` (for experiments about validity itself)."""


class LiveHarness(Protocol):
    """Runs one live spec into ``run_dir`` until an attempt is valid (`OnInvalid`); returns its journal and what
    the manifest adds (`repro.experiment.manifest.LiveOutcome`). Writes ``validity.json`` and ``attempts.jsonl``
    there; the caller writes the manifest."""

    def __call__(self, spec: RunSpec, run_dir: Path, on_invalid: OnInvalid = "retry",
                 ) -> tuple[pd.DataFrame, LiveOutcome]: ...


@functools.cache
def live_harness(backend: str) -> LiveHarness:
    """The `LiveHarness` registered for ``backend`` (loaded once). A name no installed package registers is a
    `ConfigError` naming the ones that are."""
    found = {ep.name: ep for ep in entry_points(group=GROUP)}
    if backend not in found:
        raise ConfigError(f"backend {backend!r}: no live harness registered for it (entry points of group "
                          f"{GROUP!r}: {sorted(found) or 'none: is the project installed? pip install -e .'})")
    harness: LiveHarness = found[backend].load()
    return harness
