"""SIMULATED SGLang stand-in: a test double and demo backend that speaks SGLang's HTTP API subset.

Run it in place of ``python -m sglang.launch_server`` (through ``KIT_SERVER_CMD``) with the same
argv. Timing, accept length and faults come from ``settings``; the truth a client should measure
comes from the pure functions in ``simulation`` (``expected_counts``, ``chunk_token_counts``,
``chunk_offsets_s``, ``generated_text``). Every response carries ``X-Simulated: true``.
"""

from testsupport.standin.settings import StandinSettings, load_settings
from testsupport.standin.simulation import (
    chunk_offsets_s,
    chunk_token_counts,
    effective_accept_length,
    expected_counts,
    generated_text,
)

__all__ = [
    "StandinSettings",
    "chunk_offsets_s",
    "chunk_token_counts",
    "effective_accept_length",
    "expected_counts",
    "generated_text",
    "load_settings",
]
