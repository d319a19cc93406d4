"""bench.compare: what differs between two runs' fingerprints, and per-cell deltas against the spread."""

from __future__ import annotations

from helpers_bench import cell, manifest

from bench import compare


def test_fingerprint_differences_list_every_mismatch():
    a = compare.fingerprint(manifest(), [cell("fused", "eagle3", 80, 1)])
    b = compare.fingerprint(manifest(gpu="H200", driver="590.0"), [cell("fused", "eagle3", 80, 1, digest="d2")])
    diffs = compare.differences(a, b)
    assert any(d.startswith("GPU names") for d in diffs)
    assert any(d.startswith("driver") for d in diffs)
    assert any("plan digest of fused__eagle3" in d for d in diffs)
    assert compare.differences(a, a) == []


def test_deltas_mark_beyond_spread():
    rows = compare.deltas([cell("fused", "eagle3", 80.0, 1.0)], [cell("fused", "eagle3", 90.0, 1.0)])
    tps = next(r for r in rows if r["metric"] == "tok/s")
    assert tps["delta"] == 10.0 and tps["beyond_spread"] is True
    rows = compare.deltas([cell("fused", "eagle3", 80.0, 3.0)], [cell("fused", "eagle3", 82.0, 3.0)])
    assert next(r for r in rows if r["metric"] == "tok/s")["beyond_spread"] is False
    rows = compare.deltas([cell("fused", "eagle3", 80.0, 0.0, repeats=1)], [cell("fused", "eagle3", 82.0, 0.0)])
    assert next(r for r in rows if r["metric"] == "tok/s")["beyond_spread"] is None
    rows = compare.deltas([cell("fused", "eagle3", 80.0, 1.0)], [cell("fused", "eagle3", 82.0, 1.0, valid=False)])
    assert next(r for r in rows if r["metric"] == "tok/s")["note"] == "invalid in B"
