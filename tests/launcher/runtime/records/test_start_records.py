"""launcher/runtime/records/start_records.py: the follower keeps each server start's record across log rotation
and control API restarts."""

from __future__ import annotations

import json

from helpers_profiles import ENV

from launcher.profiles import plan as plans
from launcher.runtime import activation
from launcher.runtime.process.server_exec import START_MARKER
from launcher.runtime.records import start_records
from testsupport.standin.activation import startup_lines
from testsupport.standin.server_args import parse_server_argv


def _lines(plan):
    return startup_lines(parse_server_argv(plan.flags), plan.env, set(), frozenset())


def test_follower_keeps_each_start_across_rotation_and_restarts(tmp_path):
    log, starts = tmp_path / "logs" / "sglang.log", tmp_path / "starts"
    log.parent.mkdir()
    plan = plans.build_plan("custom-ar", "off", environ=ENV)
    marker = f"{START_MARKER}custom-ar spec off digest {plan.digest()} pid 7 start 5: x\n"
    log.write_text(f"{START_MARKER}old spec off digest a pid 6 start 4: x\n{_lines(plan)[1]}\n{marker}")
    follower = start_records.Follower(log, starts)
    follower.poll()
    assert follower.record_for(7)["seen"] == {} and follower.record_for(6) is None  # read from the last start on
    with log.open("a") as fh:
        fh.write("\n".join(_lines(plan)[:9]))  # the last line not yet complete
    follower.poll()
    log.rename(log.with_name("sglang.log.1"))  # supervisord rotates
    log.write_text("\n".join(_lines(plan)[9:]) + "\n" + "filler\n" * 1000)
    follower.poll()
    assert activation.assess(plan, follower.record_for(7))[0][0]["active"] is True
    # a new control API finds the start line in the backup and reads on from there
    assert activation.assess(plan, start_records.Follower(log, starts).record_for(7) or {})[0][0]["active"] is True
    fresh = start_records.Follower(log, starts)
    fresh.poll()
    assert activation.assess(plan, fresh.record_for(7))[0][0]["active"] is True
    # ... and once the logs are gone, the record the state dir kept
    for f in log.parent.iterdir():
        f.unlink()
    later = start_records.Follower(log, starts)
    later.poll()
    assert activation.assess(plan, later.record_for(7))[0][0]["active"] is True
    assert json.loads((starts / "5-7.json").read_text())["pid"] == 7
