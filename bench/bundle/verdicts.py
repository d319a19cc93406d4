"""The correctness gate's verdicts as a cell's record keeps them (bench/bundle/schema.py `Correctness.status`):
the gate (bench/run/logprob_gate.py, bench/run/correctness.py) writes them, `bench report` and `bench tune`
read them. Standard library only, like the gate's statistics."""

from __future__ import annotations

PASS = "PASS"
FAIL = "FAIL"
NOT_ENOUGH = "not enough evidence"
