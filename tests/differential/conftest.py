"""The differential tests share one `Results`: every case rewritten and run once per session."""

from __future__ import annotations

import pytest

from tests.differential.cases import Results, all_cases


@pytest.fixture(scope="session")
def results() -> Results:
    return Results(all_cases())
