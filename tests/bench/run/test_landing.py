"""bench/run/landing.py `target`: where production goes after `bench run` (the stack tests in
test_bench_run_production.py put it there through the real control API)."""

from __future__ import annotations

from bench.bundle.schema import Cell, Correctness
from bench.control.production import PlanRef
from bench.run import landing
from launcher.profiles.spec_params import SpecParams

START_JSON = {"name": "fast", "spec": "eagle3", "spec_params": {"steps": 3, "topk": 1, "draft_tokens": 4},
              "digest": "d-fast", "adaptive_tiers": None}
START = PlanRef.from_json(START_JSON)


def cell(profile: str, spec: str = "eagle3", status: str = "PASS", digest: str | None = None, valid: bool = True,
         point: SpecParams | None = None) -> Cell:
    return Cell(profile=profile, spec=spec, valid=valid, plan_digest=digest or f"d-{profile}", spec_params=point,
                invalid_reason=None if valid else "server not healthy", correctness=Correctness(status=status))


def cells(*cs: Cell) -> dict[str, Cell]:
    return {c.key: c for c in cs}


def test_back_on_the_plan_found_by_default():
    t = landing.target(START, cells(cell("baseline"), cell("fast"), cell("wrong", status="FAIL")), None, whole=True)
    assert t.plan.to_json() == START_JSON and t.rc == 0 and t.verb == "back on" and not t.note


def test_leave_on_a_passed_cell_keeps_its_point_and_digest():
    point = SpecParams(steps=1, topk=1, draft_tokens=2)
    run = cells(cell("baseline"), cell("fused", point=point, digest="d-fused-112"))
    t = landing.target(START, run, "fused+eagle3(1,1,2)", whole=True)
    assert (t.plan.name, t.plan.spec, t.plan.spec_params, t.plan.digest) == (
        "fused", "eagle3", point, "d-fused-112")
    assert t.verb == "left on" and t.rc == 0


def test_leave_on_a_cell_that_did_not_pass_goes_back_with_exit_2():
    run = cells(cell("baseline"), cell("wrong", status="FAIL"), cell("mute", status="not enough evidence"),
                cell("dead", valid=False))
    for label, said in (("wrong+eagle3", "it is FAIL"), ("mute+eagle3", "it is not enough evidence"),
                        ("dead+eagle3", "it is INVALID (server not healthy)")):
        t = landing.target(START, run, label, whole=True)
        assert t.plan.to_json() == START_JSON and t.rc == landing.LEAVE_ON_REFUSED, label
        assert said in t.note, t.note


def test_an_unfinished_run_leaves_no_cell_on_and_adds_no_exit_code():
    t = landing.target(START, cells(cell("baseline"), cell("fused")), "fused+eagle3", whole=False)
    assert t.plan.to_json() == START_JSON and t.rc == 0 and "did not finish" in t.note


def test_a_plan_found_wrong_goes_to_the_reference_never_back():
    run = cells(cell("baseline", digest="d-base"), cell("fast", status="FAIL", digest="d-fast"))
    t = landing.target(START, run, None, whole=True)
    assert (t.plan.name, t.plan.spec, t.plan.digest) == ("baseline", "eagle3", "d-base")
    assert t.rc == landing.START_WRONG and "FAILed the correctness gate" in t.note
    # the same profile under another digest (another point, edited files) is not the plan found
    other = cells(cell("baseline"), cell("fast", status="FAIL", digest="d-fast-other"))
    assert landing.target(START, other, None, whole=True).plan.to_json() == START_JSON


def test_a_wrong_plan_found_wins_over_a_refused_leave_on_and_keeps_its_exit_code():
    run = cells(cell("baseline", digest="d-base"), cell("fast", status="FAIL", digest="d-fast"))
    t = landing.target(START, run, "fast+eagle3", whole=True)
    assert t.plan.name == "baseline" and t.rc == landing.LEAVE_ON_REFUSED
    assert "--leave-on fast+eagle3" in t.note and "FAILed" in t.note


def _landing(monkeypatch, answer):
    from bench.run.settings import RunSettings

    said: list[tuple[str, str | None]] = []
    put: list[dict] = []

    def put_back(control, token, connect_timeout, switch_timeout, plan):
        put.append(plan.to_json())
        if isinstance(answer, BaseException):
            raise answer
        return answer

    monkeypatch.setattr(landing.production, "put_back", put_back)
    s = RunSettings(url="http://s", out="o", control="http://c:9000")
    return landing.Landing(s, "t", START, lambda text, style=None: said.append((text, style))), said, put


def test_land_says_where_production_is(monkeypatch):
    land, said, put = _landing(monkeypatch, (None, "fast+eagle3"))
    assert land.land(cells(cell("baseline"), cell("fast")), whole=True) == 0
    assert put == [START_JSON] and said == [("production back on fast+eagle3(3,1,4), the plan it found", None)]


def test_a_restore_that_fails_is_exit_1_naming_what_runs_and_the_command(monkeypatch):
    land, said, _ = _landing(monkeypatch, ("HTTP 200 rolled_back: boom", "wrong+eagle3 (serving, digest d-w)"))
    assert land.land(cells(cell("baseline")), whole=True) == 1
    text, style = said[-1]
    assert style == "bold red" and "could not put production on fast+eagle3(3,1,4)" in text
    assert "production now runs wrong+eagle3 (serving, digest d-w)" in text
    assert "launcher switch fast --spec eagle3 --url http://c:9000 --spec-params 3,1,4" in text


def test_a_second_interrupt_while_putting_back_says_how_to_finish(monkeypatch):
    land, said, _ = _landing(monkeypatch, KeyboardInterrupt())
    assert land.land(cells(), whole=False) == 130
    assert "interrupted while putting production on fast+eagle3(3,1,4)" in said[-1][0]
    assert "launcher switch fast --spec eagle3" in said[-1][0]
