"""Fixtures of the report's plot tests."""

from __future__ import annotations

import pytest

from bench.report import plots


@pytest.fixture
def figures(monkeypatch):
    """Every figure the plot modules close, kept for inspection (they share matplotlib's pyplot)."""
    kept = []
    real_close = plots.plt.close
    monkeypatch.setattr(plots.plt, "close", lambda fig: kept.append(fig))
    yield kept
    for fig in kept:
        real_close(fig)
