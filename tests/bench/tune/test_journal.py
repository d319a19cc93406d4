"""bench/tune/journal.py: finished cells survive a kill, nothing is measured twice, stale cells are dropped."""

from __future__ import annotations

import json
import random

from bench.tune import journal
from bench.tune.objective import Repeat, RequestTiming
from bench.tune.order import CellState, Halving, next_batch
from bench.tune.space import Candidate
from launcher.profiles.spec_params import SpecParams

SETTINGS = journal.settings_digest({"concurrency": 1, "num_prompts": 16, "max_tokens": 256})


class Killed(Exception):
    """Stands in for SIGKILL: the process stops between two statements."""


def _profiles(tmp_path, names):
    folder = tmp_path / "profiles"
    folder.mkdir(exist_ok=True)
    for n in names:
        (folder / f"{n}.toml").write_text(f'description = "{n}"\n')
    return folder


def _hashes(folder, names):
    return {n: journal.profile_hash([folder / f"{n}.toml"]) for n in names}


def _tune(out, cands, hashes, *, kill_after=None, fail=(), seed=0):
    """The CLI's loop in miniature: resume, plan, measure, journal; returns the cells it measured."""
    measured: list[tuple[str, int]] = []
    rng = random.Random(seed)
    while True:
        resumed = journal.resume(out, profile_hashes=hashes, settings_digest=SETTINGS)
        nb = next_batch(cands, resumed.states(), remaining_s=1e9, switch_s=1, repeat_s=1, halving=Halving())
        if nb.done:
            return measured, resumed, nb
        for c, n in nb.batch:
            if kill_after is not None and len(measured) >= kill_after:
                raise Killed  # mid-cell: measuring started, nothing journalled
            measured.append((c.label, len(resumed.states().get(c.label, CellState()).tokps)))
            common = dict(plan_digest=f"d-{c.label}", profile_hash=hashes[c.profile], settings_digest=SETTINGS,
                          round=nb.round)
            if c.label in fail:
                journal.record(out, journal.failed_entry(c.label, c.profile, "rolled back", **common))
            else:
                reps = [Repeat(rng.gauss(80 + 5 * int(c.profile[1:]), 1), 10.0) for _ in range(n)]
                journal.record(out, journal.ok_entry(c.label, c.profile, reps, **common))


def test_resume_after_a_kill_measures_nothing_twice(tmp_path):
    names = [f"p{i}" for i in range(6)]
    hashes = _hashes(_profiles(tmp_path, names), names)
    cands = [Candidate(n, "off") for n in names]
    out = tmp_path / "out"
    try:
        _tune(out, cands, hashes, kill_after=4)
    except Killed:
        pass
    first = [json.loads(line)["label"] for line in (out / journal.JOURNAL).read_text().splitlines()]
    assert len(first) == 4
    measured, resumed, nb = _tune(out, cands, hashes)
    # every (label, repeats already held) pair is measured once over both runs
    assert not set(first) & {label for label, held in measured if held == 0}
    assert len(measured) == len(set(measured))
    assert nb.reason == "finalists" and resumed.torn == 0
    # a third run finds nothing to do
    again, _, _ = _tune(out, cands, hashes)
    assert again == []


def test_a_torn_last_line_is_skipped_and_counted_and_the_next_append_is_whole(tmp_path):
    hashes = _hashes(_profiles(tmp_path, ["p1"]), ["p1"])
    out = tmp_path / "out"
    entry = journal.ok_entry("p1+off", "p1", [Repeat(90.0, 10.0)], plan_digest="d", profile_hash=hashes["p1"],
                             settings_digest=SETTINGS)
    journal.record(out, entry)
    line = json.dumps(entry.to_json())
    with open(out / journal.JOURNAL, "a") as fh:
        fh.write(line[: len(line) // 2])  # killed mid-write
    r = journal.resume(out, profile_hashes=hashes, settings_digest=SETTINGS)
    assert r.torn == 1 and r.states() == {"p1+off": CellState((90.0,))}
    journal.record(out, entry)  # append_line starts a fresh line after the torn one
    r = journal.resume(out, profile_hashes=hashes, settings_digest=SETTINGS)
    assert r.torn == 1 and r.states() == {"p1+off": CellState((90.0, 90.0))}


def test_a_changed_profile_file_invalidates_only_its_cells(tmp_path):
    names = ["p1", "p2"]
    folder = _profiles(tmp_path, names)
    hashes = _hashes(folder, names)
    cands = [Candidate(n, "off") for n in names]
    out = tmp_path / "out"
    measured, _, _ = _tune(out, cands, hashes)
    assert {label for label, _ in measured} == {"p1+off", "p2+off"}
    (folder / "p2.toml").write_text('description = "p2"\n[env]\nNCCL_MAX_NCHANNELS = 2\n')
    new = _hashes(folder, names)
    assert new["p2"] != hashes["p2"] and new["p1"] == hashes["p1"]
    r = journal.resume(out, profile_hashes=new, settings_digest=SETTINGS)
    assert {label for label, _ in r.invalidated} == {"p2+off"}
    assert "changed" in r.invalidated[0][1]
    measured, _, _ = _tune(out, cands, new)
    assert {label for label, _ in measured} == {"p2+off"}  # p1 reused, p2 measured again


def test_failed_cells_are_recorded_and_never_retried(tmp_path):
    names = ["p1", "p2", "p3"]
    hashes = _hashes(_profiles(tmp_path, names), names)
    cands = [Candidate(n, "off") for n in names]
    out = tmp_path / "out"
    measured, resumed, nb = _tune(out, cands, hashes, fail={"p2+off"})
    assert measured.count(("p2+off", 0)) == 1
    assert resumed.failed() == {"p2+off": "rolled back"}
    assert resumed.states()["p2+off"].failed == "rolled back"
    assert nb.dropped["p2+off"] == "failed: rolled back"
    again, _, _ = _tune(out, cands, hashes, fail={"p2+off"})
    assert again == []


def test_other_settings_plan_digests_and_foreign_profiles_invalidate(tmp_path):
    hashes = _hashes(_profiles(tmp_path, ["p1"]), ["p1"])
    out = tmp_path / "out"
    journal.record(out, journal.ok_entry("p1+off", "p1", [Repeat(90.0, 10.0)], plan_digest="aaa",
                                         profile_hash=hashes["p1"], settings_digest=SETTINGS))
    assert journal.resume(out, profile_hashes=hashes, settings_digest="other").invalidated[0][1] == \
        "measured with other settings"
    r = journal.resume(out, profile_hashes=hashes, settings_digest=SETTINGS, plan_digests={"p1+off": "bbb"})
    assert "plan digest aaa" in r.invalidated[0][1]
    assert journal.resume(out, profile_hashes={}, settings_digest=SETTINGS).invalidated[0][1].endswith(
        "not in this tune")
    assert journal.resume(tmp_path / "none", profile_hashes=hashes, settings_digest=SETTINGS).entries == []


def test_entries_round_trip_with_request_timings_and_final_phase(tmp_path):
    hashes = _hashes(_profiles(tmp_path, ["p1"]), ["p1"])
    out = tmp_path / "out"
    rep = Repeat(88.0, 12.5, (RequestTiming(True, 30.0, 9.5, 256), RequestTiming(False, None, None, 0)))
    journal.record(out, journal.ok_entry("p1+off", "p1", [rep], plan_digest="d", profile_hash=hashes["p1"],
                                         settings_digest=SETTINGS, phase="final", round=2))
    (out / journal.JOURNAL).open("a").write('{"v": 1, "label": "x"}\n[1, 2]\n"\\u00ff"\n')
    r = journal.resume(out, profile_hashes=hashes, settings_digest=SETTINGS)
    assert r.torn == 3
    assert r.repeats("final") == {"p1+off": [rep]}
    assert r.states(("screen",)) == {} and r.states(None) == {"p1+off": CellState((88.0,))}
    assert r.entries[0].finished_at > 0 and r.entries[0].round == 2


def test_reference_entries_keep_their_spec_point_and_detail_and_count_toward_screening(tmp_path):
    detail = {"rows": [{"prompt_id": "p1", "text": " alpha", "ok": True}], "cell": {"profile": "baseline", "spec": "eagle3", "per_repeat": []}}
    ref = journal.Entry(label="baseline+eagle3", profile="baseline", status="ok", plan_digest="d", profile_hash="h",
                        settings_digest="s", phase="reference", spec="eagle3",
                        spec_params={"steps": 3, "topk": 1, "draft_tokens": 4}, detail=detail,
                        repeats=(Repeat(50.0, 1.0),))
    journal.record(tmp_path, ref)
    path = tmp_path / journal.JOURNAL
    with path.open("a") as fh:  # a line whose detail is not an object is not an entry
        fh.write(json.dumps({**json.loads(path.read_text()), "detail": "x"}) + "\n")
    r = journal.resume(tmp_path, profile_hashes={"baseline": "h"}, settings_digest="s")
    assert r.torn == 1 and len(r.entries) == 1
    back = r.entries[0]
    assert (back.phase, back.spec, back.spec_params, back.detail) == ("reference", "eagle3", ref.spec_params, ref.detail)
    assert back.spec_params == SpecParams(steps=3, topk=1, draft_tokens=4)  # the point as its model, from its JSON
    line = path.read_text().splitlines()[0]
    assert json.loads(line)["spec_params"] == {"steps": 3, "topk": 1, "draft_tokens": 4}
    assert json.dumps(back.to_json(), sort_keys=True, ensure_ascii=False) == line  # written back the same
    assert back.detail.rows[0].text == " alpha" and back.detail.cell is not None and back.detail.cell.spec == "eagle3"
    assert r.states() == {"baseline+eagle3": CellState((50.0,))}
    assert r.states(("screen",)) == {}
