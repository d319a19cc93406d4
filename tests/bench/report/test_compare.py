"""bench.report.compare: what differs between two runs' fingerprints (setups, not host-local values), and per-cell deltas."""

from __future__ import annotations

import csv
import io
import json
import math
import re
import subprocess
import sys
from dataclasses import asdict

import numpy as np
import pytest
from helpers_bench import cell, manifest

from bench.bundle import summary_stats
from bench.bundle.schema import Cell, Manifest
from bench.report import compare, compare_render, deltas, fingerprints, gate_sides, stats
from testsupport.stack import REPO


def test_fingerprint_differences_list_every_mismatch():
    a = fingerprints.fingerprint(Manifest.model_validate(manifest()), [Cell.model_validate(cell("fused", "eagle3", 80, 1))])
    b = fingerprints.fingerprint(Manifest.model_validate(manifest(gpu="H200", driver="590.0")), [Cell.model_validate(cell("fused", "eagle3", 80, 1, digest="d2"))])
    diffs = fingerprints.differences(a, b)
    assert any(d.startswith("GPU names") for d in diffs)
    assert any(d.startswith("driver") for d in diffs)
    assert any("plan digest of fused__eagle3" in d for d in diffs)
    assert fingerprints.differences(a, a) == []


def _row(rows, metric="tok/s", profile=None):
    return next(r for r in rows if r.metric == metric and (profile is None or r.profile == profile))


def test_deltas_carry_welchs_p_value_and_benjamini_hochberg_significance():
    rows = deltas.deltas([Cell.model_validate(cell("fused", "eagle3", 80.0, 1.0))], [Cell.model_validate(cell("fused", "eagle3", 90.0, 1.0))])
    tps = _row(rows)
    assert tps.delta == 10.0 and tps.a_n == tps.b_n == 3
    assert tps.t == pytest.approx(10.0 / math.sqrt(2 / 3)) and tps.df == pytest.approx(4.0)
    assert tps.p_value == pytest.approx(stats.t_two_sided_p(tps.t, 4.0)) and tps.p_value < 1e-3
    # four rows tested (TPOT, TTFT equal: p 1; accept length has no spread and is equal: p 1, noted)
    assert tps.p_adjusted == pytest.approx(tps.p_value * 4) and tps.significant is True
    assert _row(rows, "TPOT ms").p_value == 1.0 and _row(rows, "TPOT ms").significant is False
    accept = _row(rows, "accept length")
    assert accept.p_value == 1.0 and accept.t is None and accept.note == "no spread on either side"
    assert "beyond_spread" not in tps.to_json()  # the rule before the t-test (|B - A| > 2 sd) is gone

    rows = deltas.deltas([Cell.model_validate(cell("fused", "eagle3", 80.0, 3.0))], [Cell.model_validate(cell("fused", "eagle3", 82.0, 3.0))])
    assert 0.4 < _row(rows).p_value < 0.5 and _row(rows).significant is False

    rows = deltas.deltas([Cell.model_validate(cell("fused", "eagle3", 80.0, 0.0, repeats=1))], [Cell.model_validate(cell("fused", "eagle3", 82.0, 0.0))])
    one = _row(rows)
    assert one.p_value is None and one.significant is False and one.p_adjusted is None
    assert one.note == "no p-value: fewer than 2 repeats in A (1)"
    rows = deltas.deltas([Cell.model_validate(cell("fused", "eagle3", 80.0, 1.0))], [Cell.model_validate(cell("fused", "eagle3", 82.0, 1.0, valid=False))])
    assert _row(rows).note == "invalid in B" and _row(rows).significant is False


def _sampled_cell(rng, profile: str, means: dict[str, float], repeats: int, noise: float = 0.02) -> dict:
    """A cell whose every metric at concurrency 1 and 8 is the mean and sample sd of `repeats` draws with a
    relative sd of `noise`, as `bench run --repeats` aggregates them."""
    levels = {}
    for level in ("1", "8"):
        agg = {"repeats_valid": repeats}
        for key, mu in means.items():
            mu = mu * (1.0 if level == "1" else 3.0)
            agg[f"{key}_mean"], agg[f"{key}_sd"] = summary_stats.mean_sd(rng.normal(mu, noise * mu, repeats).tolist())
        levels[level] = agg
    return {"profile": profile, "spec": "eagle3", "valid": True, "plan_digest": "d1", "by_concurrency": levels,
            "correctness": {"status": "PASS"}}


PROFILES = ("baseline", "fused", "custom-ar", "nccl-tuned", "mscclpp", "pcie-ipc")
MEANS = {"output_throughput": 80.0, "mean_tpot_ms": 12.0, "mean_ttft_ms": 40.0, "accept_length": 2.4}


def _bundles(seed: int, repeats: int = 2, noise: float = 0.02, shifted: str | None = None,
             shift: float = 0.2) -> tuple[list[Cell], list[Cell]]:
    """Bundles A and B of every profile in PROFILES; in B the `shifted` profile really got faster: tok/s
    `shift` higher, TPOT as much shorter."""
    rng = np.random.default_rng(seed)
    a = [Cell.model_validate(_sampled_cell(rng, p, MEANS, repeats, noise)) for p in PROFILES]
    b = []
    for p in PROFILES:
        means = dict(MEANS)
        if p == shifted:
            means.update(output_throughput=MEANS["output_throughput"] * (1 + shift),
                         mean_tpot_ms=MEANS["mean_tpot_ms"] / (1 + shift))
        b.append(Cell.model_validate(_sampled_cell(rng, p, means, repeats, noise)))
    return a, b


def _flagged(rows) -> set[tuple[str, int, str]]:
    return {(r.profile, r.concurrency, r.metric) for r in rows if r.significant}


SHIFTED = {("custom-ar", level, metric) for level in (1, 8) for metric in ("tok/s", "TPOT ms")}


def test_two_runs_of_one_distribution_with_2_repeats_flag_nothing_and_a_clear_shift_is_flagged():
    rows = deltas.deltas(*_bundles(seed=20261203))
    assert len(rows) == len(PROFILES) * 2 * 4 and all(r.p_value is not None for r in rows)
    assert _flagged(rows) == set()
    # the rule this replaced (|delta| > 2·sqrt(sdA² + sdB²)) flags some of these same rows: with 2 repeats
    # an sd is one difference, often far below the true spread
    assert any(abs(r.delta) > 2 * math.hypot(r.a_sd, r.b_sd) for r in rows)

    # 2 repeats a side leave Welch's t 1 to 2 degrees of freedom: a shift is clear to it only when it is
    # large against the run-to-run spread (here 50% against 0.1%) ...
    clear = _bundles(seed=20261203, noise=0.001, shifted="custom-ar", shift=0.5)
    assert _flagged(deltas.deltas(*clear)) == SHIFTED
    # ... while 20% against 2% is not told apart from noise
    assert _flagged(deltas.deltas(*_bundles(seed=20261203, shifted="custom-ar"))) < SHIFTED
    # 3 repeats a side: 20% against 1% is
    assert _flagged(deltas.deltas(*_bundles(seed=20261203, repeats=3, noise=0.01, shifted="custom-ar"))) == SHIFTED


def test_with_no_difference_a_comparison_flags_anything_at_most_at_the_false_discovery_rate():
    """Benjamini-Hochberg under no difference at all: P(any row flagged) <= 5% (here 200 comparisons)."""
    any_flagged = sum(bool(_flagged(deltas.deltas(*_bundles(seed)))) for seed in range(200))
    assert any_flagged <= 16  # 10 expected at 5%; binomial(200, 0.05) exceeds 16 with probability < 3%


def test_csv_and_summary_carry_the_test():
    a, b = _bundles(seed=7, repeats=3, noise=0.01, shifted="fused")
    rows = deltas.deltas(a, b)
    lines = list(csv.DictReader(io.StringIO(compare_render.csv_text(rows))))
    assert len(lines) == len(rows) and list(lines[0]) == list(deltas.CSV_FIELDS)
    assert {(x["profile"], x["metric"], x["significant"]) for x in lines if x["significant"] == "True"} == {
        ("fused", "tok/s", "True"), ("fused", "TPOT ms", "True")}
    assert float(lines[0]["p_value"]) == pytest.approx(rows[0].p_value)
    summary = deltas.significance_summary(rows)
    assert summary["rows"] == summary["rows_tested"] == len(rows) and summary["rows_significant"] == 4
    assert summary["fdr"] == 0.05


def test_same_setup_with_other_local_values_is_comparable_and_the_local_values_are_listed():
    a = cell("fused", "eagle3", 80, 1, digest="d1")
    b = cell("fused", "eagle3", 80, 1, digest="d2")  # another model path or port: another plan digest
    a.update(setup_digest="s1", local={"model-path": "/models/k2", "port": "30000"})
    b.update(setup_digest="s1", local={"model-path": "/data/k2", "port": "31000"})
    fa, fb = fingerprints.fingerprint(Manifest.model_validate(manifest()), [Cell.model_validate(a)]), fingerprints.fingerprint(Manifest.model_validate(manifest()), [Cell.model_validate(b)])
    assert fingerprints.differences(fa, fb) == []
    assert fingerprints.local_differences(fa, fb) == [
        "model-path of fused__eagle3: A=/models/k2 B=/data/k2", "port of fused__eagle3: A=30000 B=31000"]
    b["setup_digest"] = "s2"
    assert fingerprints.differences(fa, fingerprints.fingerprint(Manifest.model_validate(manifest()), [Cell.model_validate(b)])) == [
        "setup digest of fused__eagle3: A=s1 B=s2"]


def test_host_local_values_shared_by_every_cell_are_one_line_on_stderr(tmp_path, capsys):
    """Two `make demo` runs: each of 10 cells ran on another port. `bench compare` prints its table, not 10
    lines of ports: one line on stderr says the port differs in every cell."""
    def bundle(side: str, port: str):
        d = tmp_path / side
        d.mkdir()
        (d / "manifest.json").write_text(json.dumps(manifest()))
        for p in ("baseline", "nccl-tuned", "fused", "custom-ar", "ep"):
            for spec in ("eagle3", "off"):
                body = {**cell(p, spec, 80, 1, digest=f"{p}-{spec}-{port}"), "setup_digest": f"{p}-{spec}",
                        "local": {"port": port}}
                (d / f"{p}__{spec}.json").write_text(json.dumps(body))
        return d

    a, b = bundle("a", "18572"), bundle("b", "17376")
    assert compare.compare(dir_a=str(a), dir_b=str(b)) == 0
    out, err = capsys.readouterr()
    assert "18572" not in out and not re.search(r"\bport\b", out)
    assert err.splitlines() == ["host-local values differ, compared without them: port A=18572 B=17376 (every cell)"]


def test_a_bundle_without_setup_digests_falls_back_to_plan_digests():
    old = cell("fused", "eagle3", 80, 1, digest="d1")
    new = {**cell("fused", "eagle3", 80, 1, digest="d2"), "setup_digest": "s1"}
    diffs = fingerprints.differences(fingerprints.fingerprint(Manifest.model_validate(manifest()), [Cell.model_validate(old)]), fingerprints.fingerprint(Manifest.model_validate(manifest()), [Cell.model_validate(new)]))
    assert diffs == ["plan digest of fused__eagle3: A=d1 B=d2"]


@pytest.mark.stack
def test_two_real_runs_of_one_setup_on_other_ports_and_model_paths_compare_without_force(kit_stack, tmp_path):
    """As two `make demo` runs (random ports) or two hosts (models stored elsewhere): comparable as they are."""
    bundles = []
    for side in ("a", "b"):
        model = tmp_path / side / "Kimi-K2"
        model.mkdir(parents=True)
        (model / "config.json").write_text('{"hidden_size": 7168}')
        stack = kit_stack("baseline", "off", extra_env={"MODEL_PATH": str(model)}, start=False).start()
        r = subprocess.run(
            [sys.executable, "-m", "bench", "run", "--url", stack.server_url, "--control", stack.control_url,
             "--no-switch", "--repeats", "1", "--num-prompts", "2", "--max-tokens", "8", "--warmup", "0",
             "--out", str(tmp_path / f"out-{side}")],
            cwd=REPO, env=stack.env, capture_output=True, text=True, timeout=120,
        )
        assert r.returncode == 0, r.stderr[-3000:]
        stack.stop()
        run_dir = next((tmp_path / f"out-{side}").iterdir())
        saved = json.loads((run_dir / "baseline__off.json").read_text())
        assert saved["setup_digest"] and saved["local"]["port"] == str(stack.server_port)
        bundles.append((run_dir, saved))
    (a, cell_a), (b, cell_b) = bundles
    assert cell_a["plan_digest"] != cell_b["plan_digest"] and cell_a["setup_digest"] == cell_b["setup_digest"]

    def cmp(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "bench", "compare", str(a), str(b), *args], cwd=REPO,
                              capture_output=True, text=True, timeout=60)

    shown = cmp()
    assert shown.returncode == 0, shown.stderr
    # the host-local values are one line on stderr, never a line per cell on stdout
    assert not re.search(r"\b(port|model-path)\b", shown.stdout), shown.stdout
    [local] = [line for line in shown.stderr.splitlines() if "host-local" in line]
    assert f"port A={cell_a['local']['port']} B={cell_b['local']['port']} (every cell)" in local and "model-path A=" in local
    assert "fewer than 2 repeats" in shown.stdout and "Benjamini-Hochberg" in shown.stdout
    data = json.loads(cmp("--json").stdout)
    assert data["differences"] == [] and len(data["local_differences"]) == 2
    assert data["rows"] and all(r["p_value"] is None and r["significant"] is False for r in data["rows"])
    assert data["rows"][0]["note"] == "no p-value: fewer than 2 repeats in A (1) and B (1)"
    assert data["test"]["rows_tested"] == 0
    table = list(csv.DictReader(io.StringIO(cmp("--csv").stdout)))
    assert len(table) == len(data["rows"]) and table[0]["p_value"] == "" and table[0]["significant"] == "False"


def test_gate_statistics_of_two_hosts_are_reported_never_refused():
    a, b = cell("fused", "off", 90.0, 1.0), cell("fused", "off", 91.0, 1.0)
    a["correctness"] = {"status": "PASS", "exact_match_rate": 0.75, "reasons": [],
                        "logprobs": {"tokens": 255, "p99_delta": 0.012, "max_delta": 0.02, "max_flip_gap": 0.004}}
    b["correctness"] = {"status": "FAIL", "exact_match_rate": 0.5, "reasons": ["max delta 1.2 > 0.33"],
                        "logprobs": {"tokens": 180, "p99_delta": 0.9, "max_delta": 1.2, "max_flip_gap": None}}
    rows = gate_sides.gate_rows([Cell.model_validate(a)], [Cell.model_validate(b)])
    assert [asdict(r) for r in rows] == [{"profile": "fused", "spec": "off", "same_verdict": False,
                     "a": {"status": "PASS", "exact_match_rate": 0.75, "tokens": 255, "mean_delta": None, "p99_delta": 0.012,
                           "max_delta": 0.02, "max_flip_gap": 0.004},
                     "b": {"status": "FAIL", "exact_match_rate": 0.5, "tokens": 180, "mean_delta": None, "p99_delta": 0.9,
                           "max_delta": 1.2, "max_flip_gap": None}}]
    old = Cell.model_validate(cell("fused", "off", 90.0, 1.0))  # an older bundle: a verdict, no statistics
    assert gate_sides.gate_rows([old], [old])[0].a.tokens is None
    ma, mb = (Manifest.model_validate({**manifest(), "gate": {"max_delta": 0.33, "min_tokens": 200}}),
              Manifest.model_validate({**manifest(), "gate": {"max_delta": 0.5, "min_tokens": 200}}))
    assert gate_sides.gate_setting_differences(ma, mb) == ["gate max_delta: A=0.33 B=0.5"]
    assert fingerprints.differences(fingerprints.fingerprint(ma, []), fingerprints.fingerprint(mb, [])) == []  # no refusal


def _capped(spec: str, cap: int | None, level: str = "64") -> Cell:
    data = cell("fused", spec, 80.0, 1.0)
    data["by_concurrency"] = {level: data["by_concurrency"]["1"]}
    return Cell.model_validate({**data, "max_running_requests": cap} if cap is not None else data)


def test_rows_that_ran_different_loads_say_so():
    """Each side runs min(level, its server's max_running_requests) at once and queues the rest."""
    same = deltas.deltas([_capped("eagle3", 64)], [_capped("eagle3", 2048)])
    assert all(r.load_note is None for r in same)
    rows = deltas.deltas([_capped("eagle3", 48)], [_capped("eagle3", 64)])
    note = _row(rows).load_note
    assert note.startswith("different loads") and "A ran at most 48 at once (max_running_requests 48)" in note
    both = _row(deltas.deltas([_capped("eagle3", 48)], [_capped("eagle3", 48)])).load_note
    assert "both ran 48 at once, not 64" in both and "on A and B" in both
    older = _row(deltas.deltas([_capped("eagle3", None)], [_capped("eagle3", 64)])).load_note
    assert "loads may differ" in older and "A's running cap is unknown" in older
    assert _row(deltas.deltas([_capped("off", None, "1")], [_capped("off", 2048, "1")])).load_note is None
    lines = list(csv.DictReader(io.StringIO(compare_render.csv_text(rows))))
    assert lines[0]["load_note"] == note
