"""bench/tune/space.py: candidate labels, the default EAGLE-3 points, and the space from the launcher's own
eligibility (the points' parsing and validity are launcher/profiles/spec_params.py's:
tests/launcher/profiles/test_spec_params_agreement.py)."""

from __future__ import annotations

import pytest
from helpers_profiles import clean_env, facts

from bench.control.production import PlanRef
from bench.tune.space import (
    DEFAULT_POINTS,
    ELIGIBLE,
    Candidate,
    build_space,
    eligibility_by_spec,
    parse_profiles,
    parse_specs,
)
from launcher.doctor.eligibility import Eligibility
from launcher.errors import UserError
from launcher.profiles.spec_params import SpecParams, parse_list, point_problems


def P(steps: int, topk: int, draft_tokens: int) -> SpecParams:  # noqa: N802 - reads like the S,K,D it builds
    return SpecParams(steps=steps, topk=topk, draft_tokens=draft_tokens)


def test_tune_points_parse_in_order_and_drop_duplicates():
    assert parse_list("1,1,2; 3,1,4;1,1,2", "--eagle3") == [P(1, 1, 2), P(3, 1, 4)]
    assert parse_list("2,4,8", "--eagle3") == [P(2, 4, 8)]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("1,1,2;3,1", "--eagle3 '3,1': give steps, top-k and draft tokens as S,K,D"),
        ("x,1,2", "--eagle3 'x,1,2': give steps"),
        ("", "--eagle3 is empty"),
        ("3,1,5", "give 3,1,4"),  # SGLang rewrites D to S+1 under topk 1
        ("0,1,1", "whole numbers from 1 to 1024"),
        ("1,4,6", "the draft tree holds 4 candidates"),
        ("1,1,2;2,1,3;1025,1,1026", "--eagle3 '1025,1,1026'"),
    ],
)
def test_a_bad_point_is_exit_2_and_named(text, needle):
    with pytest.raises(UserError) as exc:
        parse_list(text, "--eagle3")
    assert exc.value.exit_code == 2
    assert needle in str(exc.value)


def test_the_tuner_has_no_bound_of_its_own_on_a_point():
    """Beyond 16 steps or top-k: a point SGLang runs is a point the tune may measure."""
    assert parse_list("20,1,21;2,17,3", "--eagle3") == [P(20, 1, 21), P(2, 17, 3)]
    cands, _ = build_space(["fused"], ["eagle3"], (P(20, 1, 21),))
    assert [c.label for c in cands] == ["fused+eagle3(20,1,21)"]


def test_default_points_are_valid_topk1_chains_around_sglangs_autopick():
    assert all(not point_problems(p) and p.topk == 1 for p in DEFAULT_POINTS)
    assert P(3, 1, 4) in DEFAULT_POINTS  # profiles/spec/eagle3.toml's point
    assert tuple(parse_list(";".join(p.text() for p in DEFAULT_POINTS), "--eagle3")) == DEFAULT_POINTS


def test_candidate_labels_are_stable_and_round_trip():
    c = Candidate("fused", "eagle3", P(1, 1, 2))
    assert c.label == "fused+eagle3(1,1,2)"
    assert Candidate("baseline", "off").label == "baseline+off"
    for cand in (c, Candidate("nccl-tuned", "ngram"), Candidate("baseline", "off")):
        assert Candidate.parse(cand.label) == cand
    assert c.switch_point() == P(1, 1, 2)
    plan = {"name": "fused", "spec": "eagle3", "spec_params": {"steps": 1, "topk": 1, "draft_tokens": 2}}
    assert Candidate.of_plan(PlanRef.from_json(plan)) == c
    with pytest.raises(ValueError):
        Candidate("fused", "off", P(1, 1, 2))
    with pytest.raises(UserError):
        Candidate.parse("fused+off(1,1,2)")
    with pytest.raises(UserError):
        Candidate.parse("../x+off")
    with pytest.raises(UserError, match="replaces draft tokens"):
        Candidate.parse("fused+eagle3(3,1,5)")


def test_specs_and_profiles_parse():
    assert parse_specs("eagle3,off,eagle3") == ("eagle3", "off")
    with pytest.raises(UserError, match="unknown mode 'medusa'"):
        parse_specs("off,medusa")
    assert parse_profiles("eligible", ["a"]) == ELIGIBLE
    assert parse_profiles("b,a", ["a", "b"]) == ("b", "a")
    with pytest.raises(UserError, match="unknown profile 'c'"):
        parse_profiles("a,c", ["a", "b"])


def test_space_expands_eagle3_points_and_drops_ineligible_with_reason():
    elig = {
        "off": {"a": Eligibility(ok=True, reason=""), "b": Eligibility(ok=False, reason="needs NVLink")},
        "eagle3": {"a": Eligibility(ok=True, reason=""), "b": Eligibility(ok=True, reason="")},
    }
    pts = (P(1, 1, 2), P(2, 1, 3))
    cands, excluded = build_space(ELIGIBLE, ["off", "eagle3"], pts, elig)
    assert [c.label for c in cands] == ["a+off", "a+eagle3(1,1,2)", "a+eagle3(2,1,3)", "b+eagle3(1,1,2)",
                                        "b+eagle3(2,1,3)"]
    assert [(e.profile, e.spec, e.reason) for e in excluded] == [("b", "off", "needs NVLink")]
    # named profiles without facts: no filtering
    cands, excluded = build_space(["b"], ["off", "ngram"])
    assert [c.label for c in cands] == ["b+off", "b+ngram"] and not excluded
    with pytest.raises(UserError, match="needs host facts"):
        build_space(ELIGIBLE, ["off"])


def test_eligible_uses_the_launchers_rules_on_a_pcie_host(monkeypatch):
    clean_env(monkeypatch)
    pcie = facts("pcie-switch", "12.0", p2p_ok=True, nvlink_multicast=False)
    elig = eligibility_by_spec(pcie, ["off"])
    cands, excluded = build_space(ELIGIBLE, ["off"], eligibility=elig)
    names = {c.profile for c in cands}
    assert "baseline" in names and "nccl-tuned" in names
    # symm-mem needs NVLink multicast: the rules say so, and the reason travels
    symm = [e for e in excluded if e.profile == "symm-mem"]
    assert symm and "multicast" in symm[0].reason.lower()
