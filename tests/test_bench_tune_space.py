"""bench/tune/space.py: EAGLE-3 points, candidate labels, and the space from the launcher's own eligibility."""

from __future__ import annotations

import pytest

from bench.tune.space import (
    DEFAULT_POINTS,
    ELIGIBLE,
    Candidate,
    Eagle3Point,
    build_space,
    eligibility_by_spec,
    parse_points,
    parse_profiles,
    parse_specs,
)
from launcher.doctor.eligibility import Eligibility
from launcher.errors import UserError
from tests.helpers_profiles import clean_env, facts


def test_points_parse_in_order_and_drop_duplicates():
    assert parse_points("1,1,2; 3,1,4;1,1,2") == (Eagle3Point(1, 1, 2), Eagle3Point(3, 1, 4))
    assert parse_points("2,4,8") == (Eagle3Point(2, 4, 8),)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("1,1,2;3,1", "2nd point '3,1' is not S,K,D"),
        ("x,1,2", "1st point 'x,1,2' is not S,K,D"),
        ("", "1st point '' is not S,K,D"),
        ("3,1,5", "write 3,1,4"),  # SGLang rewrites D to S+1 under topk 1
        ("0,1,1", "steps must be 1..16"),
        ("2,0,3", "topk must be 1..16"),
        ("1,2,1", "at least 2"),
        ("1,4,6", "exceed the 5 the draft tree offers"),
        ("1,1,2;2,1,3;17,1,18", "3rd point '17,1,18': steps must be 1..16"),
    ],
)
def test_a_bad_point_is_exit_2_and_named(text, needle):
    with pytest.raises(UserError) as exc:
        parse_points(text)
    assert exc.value.exit_code == 2
    assert needle in str(exc.value)


def test_default_points_are_valid_topk1_chains_around_sglangs_autopick():
    assert all(p.problem() is None and p.topk == 1 for p in DEFAULT_POINTS)
    assert Eagle3Point(3, 1, 4) in DEFAULT_POINTS  # profiles/spec/eagle3.toml's point
    assert parse_points(";".join(p.text for p in DEFAULT_POINTS)) == DEFAULT_POINTS


def test_candidate_labels_are_stable_and_round_trip():
    c = Candidate("fused", "eagle3", Eagle3Point(1, 1, 2))
    assert c.label == "fused+eagle3(1,1,2)"
    assert Candidate("baseline", "off").label == "baseline+off"
    for cand in (c, Candidate("nccl-tuned", "ngram"), Candidate("baseline", "off")):
        assert Candidate.parse(cand.label) == cand
    assert c.spec_params == {"speculative-num-steps": 1, "speculative-eagle-topk": 1,
                             "speculative-num-draft-tokens": 2}
    with pytest.raises(ValueError):
        Candidate("fused", "off", Eagle3Point(1, 1, 2))
    with pytest.raises(UserError):
        Candidate.parse("fused+off(1,1,2)")
    with pytest.raises(UserError):
        Candidate.parse("../x+off")


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
    pts = (Eagle3Point(1, 1, 2), Eagle3Point(2, 1, 3))
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
