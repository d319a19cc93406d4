"""bench.bundle.names: a cell's name, label and files, from its profile, spec and EAGLE-3 point."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from bench.bundle import names as bundle_names
from launcher.errors import RuntimeFailure
from launcher.profiles.spec_params import SpecParams

POINT = SpecParams(steps=3, topk=1, draft_tokens=4)


def test_names_and_labels_with_and_without_a_point():
    assert bundle_names.cell_name("fused", "eagle3", POINT) == "fused__eagle3__3-1-4"
    assert bundle_names.cell_label("fused", "eagle3", POINT) == "fused+eagle3(3,1,4)"
    assert bundle_names.point_text(POINT) == "(3,1,4)"
    assert bundle_names.cell_name("fused", "off") == "fused__off" and bundle_names.point_text(None) == ""
    assert bundle_names.requests_file("fused", "eagle3", POINT) == "fused__eagle3__3-1-4.requests.jsonl"


def test_run_ids_are_utc_stamps_that_never_collide():
    a, b = bundle_names.make_run_id(0.0), bundle_names.make_run_id(0.0)
    assert re.fullmatch(r"19700101T000000Z-[0-9a-f]{6}", a) and a != b


@pytest.mark.parametrize(("profile", "spec", "point", "words"), [
    ("../x", "off", None, "profile name"),
    ("fused", "a/b", None, "spec name"),
])
def test_a_file_is_named_only_by_good_names(tmp_path, profile, spec, point, words):
    with pytest.raises(RuntimeFailure, match=words):
        bundle_names.cell_file(tmp_path, profile, spec, bundle_names.SUFFIX, point)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("point", [{"steps": 0, "topk": 1, "draft_tokens": 2},
                                   {"steps": True, "topk": 1, "draft_tokens": 2},
                                   {"steps": "1", "topk": 1, "draft_tokens": 2}])
def test_a_point_that_is_not_three_whole_numbers_never_reaches_a_file_name(point):
    with pytest.raises(ValidationError):
        SpecParams.model_validate(point)


def test_inside_keeps_a_name_in_the_folder(tmp_path):
    assert bundle_names.inside(tmp_path, "manifest.json") == tmp_path / "manifest.json"
    for name in ("..", "a/b", ""):
        with pytest.raises(RuntimeFailure, match="outside the bundle folder"):
            bundle_names.inside(tmp_path, name)
