"""bench/gate/cli.py's results, without a server: the records `bench gate` builds, as `--json` prints them and as
a person reads them (tests/bench/gate/test_cli.py runs the command against real stand-in servers)."""

from __future__ import annotations

import io

from rich.console import Console

from bench.gate import cli as gate
from bench.run import correctness
from tests.bench.run.test_correctness import T, lps, ref, side


def servers_result(shift: float) -> gate.ServersResult:
    cand, base = side("candidate", {1: lps(shift), 8: lps(shift)}), ref()
    verdict = correctness.judge_levels(cand, base, T)
    texts = correctness.compare_outputs(cand.texts, base.texts)
    return gate.ServersResult(gate.Server("http://ref", {"version": "0.5"}), gate.Server("http://cand", {}), 5, 60,
                              T, texts.exact_match_rate, verdict)


def printed(result: gate.ServersResult | gate.BundleResult, monkeypatch) -> str:
    out = io.StringIO()
    monkeypatch.setattr(gate, "Console", lambda **kw: Console(file=out, width=160))
    gate.render(result)
    return out.getvalue()


def test_the_json_of_two_servers_is_what_was_asked_then_the_verdict(monkeypatch):
    ok, bad = servers_result(0.0), servers_result(0.6)
    data = ok.to_json()
    assert list(data)[:7] == ["mode", "reference", "candidate", "prompts", "max_tokens", "thresholds", "exact_match_rate"]
    assert data["reference"] == {"url": "http://ref", "version": "0.5"} and data["candidate"] == {"url": "http://cand"}
    assert {k: data[k] for k in correctness.LevelsJson.__annotations__} == ok.verdict.to_json()
    assert (ok.status, bad.status, gate.EXIT[bad.status]) == ("PASS", "FAIL", 1)
    assert data["logprobs"] == ok.verdict.levels["1"].stats.as_dict()  # the lowest level's statistics
    text = printed(bad, monkeypatch)
    assert "candidate http://cand against reference http://ref: FAIL" in text and "concurrency 8: FAIL" in text


def test_a_bundle_cell_keeps_the_verdicts_keys_and_renders_without_levels(monkeypatch):
    cell = gate.BundleCell("fused__off", "n/a (no baseline)", ["no reference"], "baseline+off", None, None, None)
    result = gate.BundleResult("/b", T, "not enough evidence", {"fused+off": cell})
    assert result.to_json()["cells"] == {"fused+off": {"status": "n/a (no baseline)", "reasons": ["no reference"],
                                                       "baseline": "baseline+off", "levels": None, "tolerance": None,
                                                       "notes": None, "key": "fused__off"}}
    text = printed(result, monkeypatch)
    assert "fused+off (against baseline+off): n/a (no baseline)" in text and "- no reference" in text
