"""bench/tune/production.py `apply`: production on exactly the chosen plan, checked by digest, or back on the
plan the tune started from (a fake control client: the switch's answers are the input here; the stack tests in
test_bench_tune_runner_resume.py run it against the real control API)."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
from rich.console import Console

from bench.control.production import PlanRef
from bench.tune import journal, production
from bench.tune.ledger import Ledger
from bench.tune.space import Candidate
from bench.tune.tune_file import TuneFile
from launcher.profiles.listing import ProfileRow
from launcher.runtime.api.bodies import CheckAnswer, ServerStatus, SwitchAnswer


class FakeControl:
    def __init__(self, *, names=(), check=(200, {"digest": "d-win"}), switch=(200, {"outcome": "switched"}),
                 running="d-win"):
        self.names, self.check_answer, self.switch_answer, self.running = names, check, switch, running
        self.switches: list[tuple[str, str, object]] = []

    def profiles(self):
        return [ProfileRow(name=n, description="", status="experimental", path="") for n in self.names]

    def check(self, profile, spec, spec_params=None):
        return CheckAnswer.of(*self.check_answer)  # as the control client parses (HTTP status, body)

    def switch(self, profile, spec, timeout_s, spec_params=None, adaptive_tiers=None):
        assert adaptive_tiers is None  # static winners here: no tiers sent
        self.switches.append((profile, spec, spec_params))
        code, body = self.switch_answer
        to = {"profile": profile, "spec": spec, "digest": self.running}
        return SwitchAnswer.of(code, {**body, "to": to} if body.get("outcome") == "switched" else body)

    def status(self):
        return ServerStatus(digest=self.running)


def _run(fake, monkeypatch):
    monkeypatch.setattr(production, "SyncControlClient", lambda *a, **k: fake)
    restored: list[bool] = []
    monkeypatch.setattr(production, "restore", lambda run: restored.append(True))
    cells = Ledger(thresholds=None)
    cells.entries.append(journal.Entry(label="fast+off", profile="fast", status="ok", plan_digest="d-win",
                                       profile_hash="h", settings_digest="s", phase="final"))
    out = io.StringIO()
    run = SimpleNamespace(
        s=SimpleNamespace(control="http://c", connect_timeout=1, switch_timeout=1, profile_name="tuned"),
        token="t", cells=cells, plan_digests={}, start_plan=PlanRef("baseline", "off"),
        incumbent=Candidate("baseline", "off"),
        console=Console(file=out, width=200), switched=True)
    return run, restored, out


WINNER = Candidate("fast", "off")


def test_the_written_profile_is_applied_by_name_when_the_server_runs_the_same_plan_under_it(monkeypatch):
    fake = FakeControl(names=("tuned",))
    run, restored, out = _run(fake, monkeypatch)
    assert production.apply(run, WINNER, TuneFile(profile_file="/p/tuned.toml")) == 0
    assert fake.switches == [("tuned", "off", None)] and not restored and run.switched is False
    assert "applied: production runs profile tuned (/p/tuned.toml) + off" in out.getvalue()


def test_an_older_file_under_the_name_is_not_run_the_winner_is(monkeypatch):
    fake = FakeControl(names=("tuned",), check=(200, {"digest": "d-old"}))
    run, restored, out = _run(fake, monkeypatch)
    assert production.apply(run, WINNER, TuneFile(profile_file="/p/tuned.toml")) == 0
    assert fake.switches == [("fast", "off", None)] and not restored
    assert "is not the plan the tune chose" in out.getvalue()


@pytest.mark.parametrize("answer,running", [((200, {"outcome": "rolled_back", "error": "boom"}), "d-start"),
                                            ((200, {"outcome": "switched"}), "d-other")])
def test_a_failed_or_wrong_apply_puts_production_back_naming_both(monkeypatch, answer, running):
    fake = FakeControl(switch=answer, running=running)
    run, restored, out = _run(fake, monkeypatch)
    assert production.apply(run, WINNER, TuneFile()) == 1
    assert restored == [True] and run.switched is True
    text = out.getvalue()
    assert "the switch to fast+off did not take" in text and "putting production on baseline+off" in text


def test_fleet_rolls_an_adaptive_winner_with_its_tiers_and_starting_point(monkeypatch, tmp_path):
    from launcher.profiles.adaptive_tiers import parse

    winner = Candidate("fast", "eagle3-adaptive", tiers=parse("1:3,4:1,16:0"))
    calls: list[tuple[tuple, dict]] = []
    monkeypatch.setattr(production.fleetfile, "load", lambda path: "the fleet")
    monkeypatch.setattr(production.rolling, "switch", lambda *a, **k: calls.append((a, k)) or 0)
    run = SimpleNamespace(s=SimpleNamespace(fleet=str(tmp_path / "fleet.toml"), switch_timeout=7),
                          console=Console(file=io.StringIO()))
    assert production.roll(run, winner) == 0
    (args, kwargs), = calls
    assert args[:3] == ("the fleet", "fast", "eagle3-adaptive")
    assert kwargs["adaptive_tiers"] == winner.tiers and kwargs["timeout_s"] == 7
    assert kwargs["spec_params"].model_dump() == {"steps": 3, "topk": 1, "draft_tokens": 4}  # where the tune measured it


class WrongStart:
    """The ledger of a tune that measured its running plan WRONG; the reference ran digest d-ref."""

    def wrong(self, label):
        return label == "wrong+eagle3"

    def entries_of(self, label, phases=None):
        ok = SimpleNamespace(status="ok", plan_digest="d-ref")
        return [ok] if label == "baseline+eagle3" else []


def test_a_start_plan_measured_wrong_is_never_put_back_the_reference_is(monkeypatch):
    put: list[dict] = []
    monkeypatch.setattr(production.production, "put_back",
                        lambda control, token, ct, st, plan: put.append(plan) or (None, "baseline+eagle3"))
    out = io.StringIO()
    run = SimpleNamespace(s=SimpleNamespace(control="http://c", connect_timeout=1, switch_timeout=1), token="t",
                          cells=WrongStart(), plan_digests={}, incumbent=Candidate("wrong", "eagle3"),
                          start_plan=PlanRef("wrong", "eagle3", digest="d-wrong"),
                          console=Console(file=out, width=300), switched=False)
    production.restore(run)  # also when the tune never switched: the wrong plan is what runs
    assert [(p.name, p.spec, p.digest) for p in put] == [("baseline", "eagle3", "d-ref")]
    text = out.getvalue()
    assert "wrong+eagle3, FAILed the correctness gate: production goes to baseline+eagle3" in text
    assert "production now on baseline+eagle3" in text and run.switched is False


def test_a_correct_start_plan_never_switched_is_left_alone(monkeypatch):
    monkeypatch.setattr(production.production, "put_back", lambda *a: pytest.fail("nothing to put back"))
    run = SimpleNamespace(cells=WrongStart(), incumbent=Candidate("fast", "eagle3"), switched=False,
                          start_plan=PlanRef("fast", "eagle3"), console=Console(file=io.StringIO()))
    production.restore(run)
