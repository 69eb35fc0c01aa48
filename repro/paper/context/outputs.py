"""What a notebook writes and shows: tables, figures, its headline rows, its Findings, checked output.

Tables go to ``<results_dir>/<name>.csv`` (`SectionOutputs.write_results`), figures to
``<figures_dir>/<name>.png`` and ``.pdf`` (`save`), both byte-identical on rerun
(`repro.paper.figures`); the judged headline rows to ``<results_dir>/<NN>_headline.csv``
(`write_headline`), which `findings` shows with how the numbers were measured (`measured`).
`expected_output` compares a block's printed values with its golden file (`repro.paper.golden`).
Values keep the units of their columns (times in s, rates in req/s, goodput a fraction).
Part of `repro.paper.section.Section`.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from repro.errors import ConfigError
from repro.paper import figures
from repro.paper.golden import expected_output

if TYPE_CHECKING:
    from IPython.display import Markdown
    from matplotlib.figure import Figure

    from repro.paper.context.runs import LiveRun
    from repro.paper.headline import HeadlineRow


class SectionOutputs:
    """A `Section`'s outputs. Reads the fields below."""

    notebook: str
    backend: str
    scale: str
    seeds: tuple[int, ...]
    n_requests: int
    results_dir: Path
    figures_dir: Path
    live_runs: list[LiveRun]
    preempted: dict[str, float]

    if TYPE_CHECKING:  # from repro.paper.context.setup
        @property
        def testbed(self) -> str: ...

    def write_results(self, df: pd.DataFrame, name: str) -> pd.DataFrame:
        """Write ``df`` to ``<results_dir>/<name>.csv`` (deterministic, `repro.paper.figures.write_results`)
        and return it, so that a notebook can write and show a table in one go."""
        figures.write_results(df, name, self.results_dir)
        return df

    def save(self, fig: Figure, name: str) -> list[Path]:
        """``<figures_dir>/<name>.png`` and ``.pdf``, byte-identical on rerun (`repro.paper.figures.save`)."""
        return figures.save(fig, name, self.figures_dir)

    def measured(self) -> str:
        """How this section's numbers were measured, for its headline rows: ``sim``, or the backend,
        the number of live runs, whether all were valid (`repro.live.validity`) and the time scales."""
        if not self.live_runs:
            return "sim" if self.backend == "sim" else f"{self.backend}: no live run"
        by_id = {r["run_id"]: r for r in self.live_runs}
        bad = [i for i, r in by_id.items() if not r["valid"]]
        ks = sorted({float(r["time_scale_used"]) for r in by_id.values()})
        k = f"K={ks[0]:g}" if len(ks) == 1 else f"K={ks[0]:g}-{ks[-1]:g}"
        verdict = "all valid" if not bad else f"{len(bad)} INVALID"
        return f"{self.backend}, {len(by_id)} live runs, {verdict}, {k}"

    def write_headline(self, rows: list[HeadlineRow]) -> None:
        """Judge the section's headline rows and write ``<results_dir>/<NN>_headline.csv``, the numbers
        `repro paper` summarises and `findings` shows (`repro.paper.headline.write_headline`)."""
        from repro.paper.headline import kv_budget_note, write_headline

        for row in rows:
            if "kv_budget" not in row:
                row["kv_budget"] = kv_budget_note([self.preempted.get(r, float("nan")) for r in row.get("runs") or ()])
        write_headline(rows, self.notebook, self.results_dir, measured=self.measured(), testbed=self.testbed)

    def findings(self, title: str = "") -> Markdown | str:
        """The notebook's **Findings** (`repro.paper.findings`): the verdict table of the rows `write_headline`
        wrote, with the caveats of this backend, scale and validity. Markdown in a notebook (shown as the
        cell's output), plain text elsewhere."""
        from repro.paper.findings import findings_markdown

        nn = self.notebook.split("_", 1)[0]
        path = self.results_dir / f"{nn}_headline.csv"
        if not path.exists():
            raise ConfigError(f"{self.notebook}: no {path.name} yet: call ctx.write_headline(...) first")
        head = pd.read_csv(path, keep_default_na=True)
        text = findings_markdown(head, title=title or self.notebook, backend=self.backend, scale=self.scale,
                                 traces=len(self.seeds), requests=self.n_requests, measured=self.measured())
        try:
            from IPython.display import Markdown
        except ImportError:  # pragma: no cover - IPython comes with the notebooks extra
            return text
        return Markdown(text)

    def expected_output(self, index: int) -> AbstractContextManager[None]:
        """Print what the block prints; in the test run compare it with ``notebooks/expected/<notebook>-<index>.txt``
        (`repro.paper.golden.expected_output`)."""
        return expected_output(self.notebook, index)
