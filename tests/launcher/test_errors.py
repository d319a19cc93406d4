"""launcher/errors.py: a file that does not fit its schema is one UserError (exit 2) naming the file, key and fix."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict

from launcher.errors import UserError, validated


class Tiny(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    size: int = 1


def test_validated_returns_the_model():
    assert validated(Tiny, {"name": "a", "size": 3}, "f.toml", {}, "fix it") == Tiny(name="a", size=3)


def test_a_wrong_type_names_the_file_the_key_and_the_default_fix():
    with pytest.raises(UserError) as err:
        validated(Tiny, {"name": "a", "size": "big"}, "f.toml", {}, "see docs/x.md")
    assert str(err.value).startswith("f.toml: key 'size': ") and str(err.value).endswith("; see docs/x.md")
    assert err.value.exit_code == 2


def test_a_hint_for_the_error_type_wins_over_the_default():
    with pytest.raises(UserError, match=r"key 'colour': .*; remove it$"):
        validated(Tiny, {"name": "a", "colour": "red"}, "f.toml", {"extra_forbidden": "remove it"}, "see docs/x.md")
