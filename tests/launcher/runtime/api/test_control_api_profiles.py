"""The profiles as the control API serves and checks them, through the real stack (`launcher serve`: real
supervisord, real control API, the stand-in server): hostile profile files and hostile `adaptive_tiers` are
refused with 400 naming them, in the words the CLI uses, and never take GET /profiles, /check or /switch down
(launcher/profiles/listing.py describe_all, launcher/profiles/adaptive_tiers.py: one parser for every form)."""

from __future__ import annotations

import re

import httpx
import pytest

from launcher.errors import UserError
from launcher.profiles import adaptive_tiers as at
from testsupport.net import until
from testsupport.stack import KitStack

LONG_KEY = "1" * 5000  # past Python's int-string limit: int() raised ValueError, the API answered 500


def _post(stack: KitStack, route: str, body: dict) -> httpx.Response:
    return httpx.post(f"{stack.control_url}{route}", json=body, headers={"Authorization": f"Bearer {stack.token}"},
                      timeout=120)


def _problem(message: str) -> str:
    found = re.search(r": ((?:tier |no tier |every tier ).*?); give ", message)
    assert found, message
    return found.group(1)


def _serving_still(stack: KitStack, entries: int) -> None:
    """The server serves baseline as it did, and history holds the `entries` it held: nothing was switched."""
    until(lambda: stack.status()["state"] == "serving" and stack.status()["health"] == "ok", 20, "serving")
    assert stack.status()["profile"] == "baseline" and len(stack.history()) == entries


@pytest.mark.stack
def test_bug_5_a_hostile_tier_key_is_400_from_check_and_switch_in_the_clis_words(kit_stack):
    """Defect 5: a tier key of 4301+ digits made /check and /switch answer 500 `internal error: ValueError`;
    '²' and '١' were refused by the API and not by the CLI (or crashed it). Now 400 naming `adaptive_tiers`, the
    problem in the words `launcher check --adaptive-tiers` prints, and nothing switched."""
    stack = kit_stack()
    entries = len(stack.history())
    for text, key in ((f"{LONG_KEY}:1", LONG_KEY), ("²:1", "²"), ("١:1", "١"), ("65537:1", "65537")):
        cli = stack.cli("check", "baseline", "--adaptive-tiers", text)
        assert cli.returncode == 2 and "Traceback" not in cli.stderr, cli.stderr
        for route in ("/check", "/switch"):
            r = _post(stack, route, {"profile": "baseline", "spec": "eagle3-adaptive", "adaptive_tiers": {key: [1]}})
            assert r.status_code == 400, (route, key[:8], r.text[:300])
            error = r.json()["error"]
            assert error.startswith("adaptive_tiers: ") and len(error) < 400
            assert _problem(error) == _problem(cli.stderr) == f"tier {at._shown(key)} is no batch size from 1 to 65536"
    _serving_still(stack, entries)


@pytest.mark.stack
def test_bug_6_a_damaged_user_profile_is_listed_invalid_and_the_others_list_check_and_switch(kit_stack):
    """Defect 6: one user profile with a 5000-digit [adaptive_tiers] key made GET /profiles and /check answer 500
    (and a 5000-deep array a RecursionError); now it is listed `invalid` with its reason in one short line, /check
    and /switch refuse it with 400, and every other profile still lists, checks and switches."""
    stack = kit_stack()
    entries = len(stack.history())
    d = stack.profiles_dir
    (d / "bigkey.toml").write_text('description = "k"\nextends = "baseline"\n[adaptive_tiers]\n"' + LONG_KEY + '" = [1]\n')
    (d / "deep.toml").write_text('description = "d"\n[env]\nA = ' + "[" * 5000 + "]" * 5000 + "\n")
    (d / "self.toml").write_text('description = "s"\nextends = "self"\n')
    (d / "huge.toml").write_text('description = "' + "d" * 5_000_000 + '"\n')
    (d / "Ünï.toml").write_text('description = "u"\n')
    (d / "good.toml").write_text('description = "fine"\nstatus = "experimental"\nextends = "baseline"\n')
    r = httpx.get(f"{stack.control_url}/profiles", timeout=30)
    assert r.status_code == 200, r.text[:300]
    rows = {row["name"]: row for row in r.json()}
    for name in ("bigkey", "deep", "self", "huge", "Ünï"):
        assert rows[name]["status"] == "invalid" and len(rows[name]["error"]) <= 300, rows[name]
    assert "no batch size" in rows["bigkey"]["error"] and "nested too deeply" in rows["deep"]["error"]
    assert rows["good"]["status"] == "experimental" and rows["baseline"]["status"] == "stable"
    assert len(r.content) < 20_000  # the 5 MB description is not served
    for name, spec in (("bigkey", "eagle3-adaptive"), ("deep", "off"), ("self", "off"), ("huge", "off")):
        for route in ("/check", "/switch"):
            r = _post(stack, route, {"profile": name, "spec": spec})
            assert r.status_code == 400 and f"{name}.toml" in r.json()["error"], (route, name, r.text[:300])
    _serving_still(stack, entries)
    assert _post(stack, "/check", {"profile": "good", "spec": "off"}).status_code == 200
    r = _post(stack, "/switch", {"profile": "good", "spec": "off"})
    assert r.status_code == 200 and r.json()["outcome"] == "switched", r.text[:500]
    until(lambda: stack.debug_env()["env"].get("KIT_ACTIVE_PROFILE") == "good", 20, "the server running `good`")


@pytest.mark.parametrize("steps", [["3"], [True], [1.0]])
def test_bug_5_the_apis_steps_are_as_strict_as_the_clis(steps):
    """Defect 5: `["3"]`, `[true]`, `[1.0]` were coerced to ints by the body's schema before the parser saw them.
    The body's field is launcher.profiles.adaptive_tiers.ApiTiers: the raw JSON goes to the one parser."""
    from launcher.runtime.api import control_api

    for model in (control_api.CheckRequest, control_api.SwitchRequest):
        with pytest.raises(UserError, match="^adaptive_tiers: tier 1: candidate steps must be whole numbers"):
            model.model_validate({"profile": "baseline", "adaptive_tiers": {"1": steps}})
