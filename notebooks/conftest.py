"""nbval over the notebooks: the overview (00) reads what the sections wrote, so it runs last."""

from __future__ import annotations

import pytest

OVERVIEW = "00_overview.ipynb"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.path.name == OVERVIEW)
