"""The outside-client tier: `bench run --request-rate` held against AIPerf 0.13.0, a benchmark client that is not the
kit's, both against one SIMULATED stand-in with a known schedule.

Run by `make test-outside` with the kit's .venv; AIPerf runs as a command out of its own venv (`.venv-aiperf`, or
AIPERF_VENV), fully offline (testsupport/aiperf_client.py). Never collected by `make test`.
"""

from __future__ import annotations

import pytest

from testsupport import aiperf_client


def pytest_configure(config):
    if not aiperf_client.aiperf_command().is_file():
        raise pytest.UsageError(
            f"tests_outside/ runs AIPerf from {aiperf_client.aiperf_command()}, which is not there: run "
            f"`make test-outside` (it builds .venv-aiperf), or set {aiperf_client.VENV_ENV} to a venv with aiperf==0.13.0"
        )
