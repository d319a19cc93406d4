"""bench/run/selection.py: which cells `bench run` measures, from what the server says."""

from __future__ import annotations

import pytest

from bench.run.selection import (
    no_switch_label,
    resolve_profiles,
    resolve_specs,
    single_name,
    spec_from_server_info,
)
from launcher.errors import UserError
from launcher.profiles.listing import ProfileRow


def row(name: str, status: str = "experimental") -> ProfileRow:
    return ProfileRow(name=name, description="", status=status, path="")


SERVER = [row("baseline", "stable"), row("fused", "stable"), row("mscclpp")]


def test_keywords_and_names_resolve_against_the_server_list():
    assert resolve_profiles("stable", SERVER, "srv") == ["baseline", "fused"]
    assert resolve_profiles("all", SERVER, "srv") == ["baseline", "fused", "mscclpp"]
    assert resolve_profiles("fused, baseline,fused", SERVER, "srv") == ["fused", "baseline"]


def test_unknown_or_empty_names_are_user_errors_listing_what_the_server_knows():
    with pytest.raises(UserError, match="unknown profile 'warp' in --profiles; srv knows: baseline, fused, mscclpp"):
        resolve_profiles("baseline,warp", SERVER, "srv")
    with pytest.raises(UserError, match="--profiles is empty"):
        resolve_profiles(" , ", SERVER, "srv")
    with pytest.raises(UserError, match="lists no such profile"):
        resolve_profiles("stable", [row("x")], "srv")
    with pytest.raises(UserError, match="unknown spec mode 'medusa'"):
        resolve_specs("eagle3,medusa", ["eagle3", "off"], "srv")
    assert resolve_specs("off,eagle3,off", ["eagle3", "off"], "srv") == ["off", "eagle3"]


def test_no_switch_flags_name_one_thing():
    assert single_name("--profiles", None) is None
    assert single_name("--profiles", " fused ") == "fused"
    for bad in ("a,b", "stable", "all", ""):
        with pytest.raises(UserError, match="with --no-switch"):
            single_name("--profiles", bad)


def test_no_switch_label_prefers_the_server_then_the_flags_then_current():
    info = {"speculative_algorithm": "EAGLE3"}
    assert no_switch_label(None, None, {"profile": "fused", "spec": "off"}, info) == ("fused", "off")
    assert no_switch_label("fused", None, None, info) == ("fused", "eagle3")
    assert no_switch_label(None, None, None, {}) == ("current", "current")
    assert no_switch_label(None, "ngram", None, {}) == ("current", "ngram")
    with pytest.raises(UserError, match="--profiles baseline with --no-switch, but the control API's /status says it runs fused"):
        no_switch_label("baseline", None, {"profile": "fused", "spec": "off"}, info)
    with pytest.raises(UserError, match="--spec off with --no-switch, but the server says it runs eagle3"):
        no_switch_label(None, "off", None, info)


def test_spec_from_server_info():
    assert spec_from_server_info({"speculative_algorithm": "EAGLE3"}) == "eagle3"
    assert spec_from_server_info({"speculative_algorithm": "EAGLE3", "speculative_adaptive": False}) == "eagle3"
    assert spec_from_server_info({"speculative_algorithm": "EAGLE3", "speculative_adaptive": True}) == "eagle3-adaptive"
    assert spec_from_server_info({"speculative_algorithm": None}) == "off"
    assert spec_from_server_info({"speculative_algorithm": "NGRAM"}) == "ngram"
    assert spec_from_server_info({}) is None
