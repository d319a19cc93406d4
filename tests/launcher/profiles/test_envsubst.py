"""launcher.profiles.envsubst: `${NAME}` / `${NAME:-default}` expansion in profile values."""

from __future__ import annotations

import pytest

from launcher.errors import UserError
from launcher.profiles.envsubst import Placeholders, expand

WHERE = "profiles/x.toml: key 'env.A'"


def test_set_variable_expands():
    assert expand("${MODEL_PATH}", {"MODEL_PATH": "/models/t"}, WHERE) == "/models/t"


def test_several_references_and_literal_text():
    env = {"A": "1", "B": "two"}
    assert expand("x-${A}-y-${B}-${C:-3}", env, WHERE) == "x-1-y-two-3"


def test_default_used_when_unset_or_empty():
    assert expand("${PORT:-30000}", {}, WHERE) == "30000"
    assert expand("${PORT:-30000}", {"PORT": ""}, WHERE) == "30000"
    assert expand("${PORT:-30000}", {"PORT": "8080"}, WHERE) == "8080"


def test_empty_default_is_allowed():
    assert expand("a${X:-}b", {}, WHERE) == "ab"


def test_text_without_braces_is_left_alone():
    assert expand("$HOME and ${", {"HOME": "/root"}, WHERE) == "$HOME and ${"


def test_unset_without_default_names_variable_and_place():
    with pytest.raises(UserError) as exc:
        expand("${DRAFT_MODEL_PATH}", {}, WHERE)
    msg = str(exc.value)
    assert "DRAFT_MODEL_PATH" in msg
    assert WHERE in msg
    assert "export DRAFT_MODEL_PATH=" in msg


def test_empty_value_without_default_counts_as_unset():
    with pytest.raises(UserError, match="MODEL_PATH"):
        expand("${MODEL_PATH}", {"MODEL_PATH": ""}, WHERE)


def test_placeholders_stand_in_for_unset_and_record_them():
    env = Placeholders({"SET": "v"})
    assert expand("${SET}/${UNSET}/${D:-dflt}", env, WHERE) == "v/<UNSET>/dflt"
    assert env.used == {"UNSET"}
    assert "UNSET" not in env  # membership does not invent values
