"""launcher.runtime.api.metrics and the control API's GET /metrics: names and types, one source with
/status, counters that survive a control API restart, absent (never made-up) series, no secrets, 200
on damaged state, and promtool's verdict on real output. Real supervisord, control API and stand-in."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import threading
import time
from types import SimpleNamespace

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from launcher.runtime.api import metrics
from launcher.runtime.api.metrics import KitCollector
from launcher.runtime.core.states import State
from launcher.runtime.process.supervisor_rpc import Supervisor
from launcher.runtime.records.switch_counts import OTHER, SWITCH_OUTCOMES, SwitchCounts
from launcher.state_layout import StatePaths
from testsupport.net import until
from testsupport.stack import KitStack

# family name as the parser reports it (a counter's `_total` is stripped) -> type
FAMILIES = {
    "kit_build_info": "gauge",
    "kit_plan_info": "gauge",
    "kit_server_state": "gauge",
    "kit_switch": "counter",
    "kit_switch_duration_seconds": "histogram",
    "kit_backend_active": "gauge",
    "kit_server_restarts": "counter",
    "kit_health_age_seconds": "gauge",
    "kit_history_skipped_lines": "gauge",
    "kit_server_changed_timestamp_seconds": "gauge",
}


def scrape(stack: KitStack, headers: dict | None = None) -> str:
    r = httpx.get(f"{stack.control_url}/metrics", headers=headers, timeout=10)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    return r.text


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    return {(s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def value(text: str, name: str, **labels: str) -> float | None:
    return samples(text).get((name, frozenset(labels.items())))


def series(text: str, name: str) -> dict[frozenset, float]:
    return {labels: v for (n, labels), v in samples(text).items() if n == name}


def promtool_check(text: str) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: apt-get install prometheus (.ci/run installs it)"
    out = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and not out.stdout.strip() and not out.stderr.strip(), out.stdout + out.stderr


def restart_control_api(stack: KitStack) -> None:
    """Kill the control API once supervisord holds it RUNNING (a program killed before its startsecs counts as a
    failed start, and a few of those in a row leave it FATAL), then wait until a new one answers."""
    sup = Supervisor(StatePaths(stack.state_dir).socket)
    until(lambda: sup.info("control")["statename"] == "RUNNING", 30, "control API RUNNING in supervisord")
    old = stack.control_pid()
    os.kill(old, signal.SIGKILL)  # supervisord starts it again

    def back() -> bool:
        try:
            return stack.control_pid() != old and bool(stack.status()["state"])
        except AssertionError:  # no control API process yet
            return False

    until(back, 30, "control API back")


def switch_counts(text: str) -> dict[str, float]:
    return {dict(labels)["outcome"]: v for labels, v in series(text, "kit_switch_total").items()}


# ----- real stack --------------------------------------------------------------------------------------
@pytest.mark.stack
def test_counters_move_agree_with_status_survive_a_restart_and_show_no_secret(kit_stack):
    stack = kit_stack(start=False)
    stack.token = "tok-" + "9f3c" * 10
    stack.env["KIT_CONTROL_TOKEN"] = stack.token
    (stack.profiles_dir / "leaky.toml").write_text(
        'description = "test: an env value"\nstatus = "experimental"\nextends = "baseline"\n'
        '[env]\nNCCL_SOCKET_IFNAME = "envvalue-7c1e5a"\n')
    stack.start()
    text = scrape(stack)
    got = {f.name: f.type for f in text_string_to_metric_families(text)}
    assert got == FAMILIES
    build = series(text, "kit_build_info")
    assert len(build) == 1 and dict(next(iter(build)))["version"] == metrics.build_info()["version"]
    assert set(switch_counts(text).values()) == {0}
    assert series(text, "kit_server_changed_timestamp_seconds") == {}  # not changed by this control API yet

    assert stack.switch("leaky").json()["outcome"] == "switched"
    before_rollback = time.time()
    assert stack.switch("crashy").json()["outcome"] == "rolled_back"
    text = scrape(stack)
    # the rollback's start of the previous plan is the last change
    assert before_rollback <= value(text, "kit_server_changed_timestamp_seconds") <= time.time()
    counts = switch_counts(text)
    assert counts["switched"] == 1 and counts["rolled_back"] == 1 and counts["failed"] == 0
    for outcome in ("switched", "rolled_back"):
        assert value(text, "kit_switch_duration_seconds_count", outcome=outcome) == 1
        assert value(text, "kit_switch_duration_seconds_bucket", outcome=outcome, le="+Inf") == 1
        total_s = [h for h in stack.history() if h["outcome"] == outcome][-1]["durations"]["total_s"]
        assert math.isclose(value(text, "kit_switch_duration_seconds_sum", outcome=outcome), total_s)
    st = stack.status()
    assert st["switches"]["outcomes"] == {k: int(v) for k, v in counts.items()}  # one source
    [(plan_labels, one)] = series(text, "kit_plan_info").items()
    assert one == 1 and dict(plan_labels).items() >= {"profile": "leaky", "spec": "off", "digest": st["digest"]}.items()
    state = series(text, "kit_server_state")
    assert {dict(k)["state"] for k in state} == {s.value for s in State}
    assert sum(state.values()) == 1 and state[frozenset({("state", st["state"])})] == 1
    assert value(text, "kit_server_restarts_total", reason="crash") == st["restarts"]
    assert value(text, "kit_server_restarts_total", reason="retry") == st["retry"]["attempts"]
    assert value(text, "kit_history_skipped_lines") == st["history_skipped"] == 0
    assert 0 <= value(text, "kit_health_age_seconds") < 5
    for secret in (stack.token, "envvalue-7c1e5a", "/models", "models/sim", "models/draft", "NCCL_SOCKET_IFNAME"):
        assert secret not in text, secret
    promtool_check(text)

    restart_control_api(stack)  # the counts come back from history.jsonl
    text = scrape(stack)
    assert switch_counts(text) == counts
    assert series(text, "kit_server_changed_timestamp_seconds") == {}  # the server kept running
    assert value(text, "kit_switch_duration_seconds_count", outcome="rolled_back") == 1
    assert stack.switch("baseline").json()["outcome"] == "switched"
    assert switch_counts(scrape(stack))["switched"] == 2


@pytest.mark.stack
def test_backend_gauge_is_1_0_or_absent_while_unknown(kit_stack):
    stack = kit_stack(extra_env={"KIT_ACTIVATION_FAILURE": "degraded"})
    assert series(scrape(stack), "kit_backend_active") == {}  # baseline expects no backend
    assert stack.switch("custom-ar").json()["outcome"] == "switched"
    assert series(scrape(stack), "kit_backend_active") == {frozenset({("backend", "pcie-ipc")}): 1}
    assert stack.switch("ipc-quiet").json()["outcome"] == "degraded"
    text = scrape(stack)
    assert series(text, "kit_backend_active") == {frozenset({("backend", "pcie-ipc")}): 0}
    assert value(text, "kit_server_state", state="degraded") == 1
    assert switch_counts(text)["degraded"] == 1
    assert stack.switch("ep-deepep").json()["outcome"] == "switched"
    assert [b["active"] for b in stack.status()["backends"]] == [None]
    assert series(scrape(stack), "kit_backend_active") == {}  # deepep's verdict is unknown: absent, not 0


@pytest.mark.stack
def test_scrapes_during_a_switch_and_a_crash_loop_answer_200(kit_stack, tmp_path):
    flag = tmp_path / "crash"
    stack = kit_stack(extra_env={"STANDIN_CRASH_WHILE": str(flag), "KIT_RETRY_BACKOFF_S": "1", "KIT_START_SECS": "10"})
    seen: list[str] = []
    codes: list[int] = []
    stop = threading.Event()

    def scraper():
        while not stop.is_set():
            try:
                r = httpx.get(f"{stack.control_url}/metrics", timeout=5)
            except httpx.HTTPError:
                continue
            codes.append(r.status_code)
            if r.status_code == 200:
                seen.extend(dict(k)["state"] for k, v in series(r.text, "kit_server_state").items() if v == 1)
            stop.wait(0.1)

    t = threading.Thread(target=scraper, daemon=True)
    t.start()
    try:
        assert stack.switch("hangs", timeout_s=2).json()["outcome"] == "rolled_back"
        assert "switching" in seen
        flag.write_text("1")
        os.kill(stack.debug_env()["pid"], signal.SIGKILL)
        until(lambda: "failed" in seen, 120, "failed seen by a scrape during the crash loop")
        flag.unlink()
        until(lambda: stack.status()["state"] == "serving" and stack.status()["health"] == "ok", 60, "serving again")
    finally:
        stop.set()
        t.join(10)
    assert codes and set(codes) == {200}
    text = scrape(stack)
    st = stack.status()
    assert value(text, "kit_server_restarts_total", reason="crash") == st["restarts"] >= 1
    assert value(text, "kit_server_restarts_total", reason="retry") == st["retry"]["attempts"] >= 1
    promtool_check(text)


@pytest.mark.stack
def test_damaged_state_answers_200_with_what_is_known(kit_stack):
    stack = kit_stack(extra_env={"KIT_METRICS_AUTH": "1"})
    auth = {"Authorization": f"Bearer {stack.token}"}
    assert httpx.get(f"{stack.control_url}/metrics", timeout=10).status_code == 401
    assert httpx.get(f"{stack.control_url}/metrics", headers={"Authorization": "Bearer nope"}, timeout=10).status_code == 401
    paths = StatePaths(stack.state_dir)
    assert stack.switch("nccl-tuned").json()["outcome"] == "switched"
    with open(paths.history, "ab") as fh:  # not UTF-8, not an object, a torn line
        fh.write(b"\xff\xfe broken\n[1, 2]\n{\"outcome\": \"switched\", \"durat")
    text = scrape(stack, auth)
    assert value(text, "kit_history_skipped_lines") == stack.status()["history_skipped"] == 3
    assert switch_counts(text)["switched"] == 1

    paths.journal.write_bytes(b"{not json")  # a damaged journal: the next start resolves it
    restart_control_api(stack)
    text = scrape(stack, auth)
    assert switch_counts(text)["switched"] == 1  # the broken lines are skipped, not counted
    until(lambda: switch_counts(scrape(stack, auth))["interrupted"] == 1, 30, "the damaged journal recorded")
    assert stack.status()["switches"]["outcomes"]["interrupted"] == 1

    paths.history.unlink()  # history as a FIFO, profile.json and committed.json gone: unknown, not 0
    os.mkfifo(paths.history)
    paths.profile_json.unlink()
    paths.committed.unlink()
    restart_control_api(stack)
    text = scrape(stack, auth)
    assert series(text, "kit_switch_total") == {} and series(text, "kit_switch_duration_seconds_count") == {}
    assert series(text, "kit_plan_info") == {}
    st = stack.status()
    assert st["switches"] is None and st["profile"] is None
    assert value(text, "kit_history_skipped_lines") == st["history_skipped"] == 1
    assert sum(series(text, "kit_server_state").values()) == 1
    promtool_check(text)


@pytest.mark.stack
def test_a_start_keeps_lines_appended_while_the_control_api_was_stopped(kit_stack):
    """history.jsonl gains a line while the control API is stopped: the next start counts it and keeps it in
    switch-counts.json at once, without waiting for a switch."""
    stack = kit_stack()
    paths = StatePaths(stack.state_dir)
    assert stack.switch("nccl-tuned").json()["outcome"] == "switched"
    sup = Supervisor(paths.socket)
    sup.stop("control")  # waits until it has stopped
    with open(paths.history, "a") as fh:
        fh.write(_line("failed", 7.0) + "\n")
    size = paths.history.stat().st_size
    sup.start("control")

    def kept() -> dict | None:
        data = json.loads(paths.switch_counts.read_text())
        return data if data["history_bytes"] == size else None

    data = until(kept, 60, "switch-counts.json covering the appended line")
    assert (data["totals"]["switched"], data["totals"]["failed"]) == (1, 1)

    def scraped() -> str | None:
        text = scrape(stack)
        return text if switch_counts(text).get("failed") == 1 else None

    text = until(scraped, 30, "the appended line scraped")
    assert switch_counts(text)["switched"] == 1 and value(text, "kit_switch_duration_seconds_sum", outcome="failed") == 7.0


def _damage_counts(path, damage: str) -> None:
    if path.exists() or path.is_symlink():
        path.unlink()
    if damage == "fifo":
        os.mkfifo(path)
    elif damage == "/dev/zero":
        path.symlink_to("/dev/zero")
    elif damage == "300 MB":
        with open(path, "wb") as fh:
            fh.truncate(300 << 20)  # sparse
    else:
        path.write_text(damage)


COUNTS_DAMAGE = {
    "a string count": '{"v": 1, "history_bytes": 0, "totals": {}, "buckets": {}, "sums": {}, "skipped": "x"}',
    "5000 outcome keys": json.dumps({"v": 1, "history_bytes": 0, "totals": {f"made-up-{i}": 1 for i in range(5000)},
                                     "buckets": {}, "sums": {}}),
    "NaN and negative sums": '{"v": 1, "history_bytes": 0, "totals": {"switched": 3}, "buckets": {}, '
                             '"sums": {"switched": NaN, "failed": -5}}',
    "a FIFO": "fifo",
    "a link to /dev/zero": "/dev/zero",
    "300 MB": "300 MB",
}


@pytest.mark.stack
def test_a_damaged_counts_file_never_stops_or_blocks_the_control_api(kit_stack):
    """switch-counts.json damaged while the control API is down (defects 1, 2, 7 of "one damaged state file must never
    take the control API down"): it starts and answers at once, counts from history.jsonl alone, serves only the known
    outcome series with finite, non-negative sums, logs one line naming the file and why, and keeps the counts
    as a regular file again. (A FIFO hung its start; a link to /dev/zero read without end; a 300 MB file was read whole;
    5000 made-up outcomes were 5000 series.)"""
    stack = kit_stack()
    paths = StatePaths(stack.state_dir)
    assert stack.switch("nccl-tuned").json()["outcome"] == "switched"
    known = {*SWITCH_OUTCOMES, OTHER}
    for name, damage in COUNTS_DAMAGE.items():
        _damage_counts(paths.switch_counts, damage)
        logged = stack.log.read_text(errors="replace").count(f"warning: ignoring {paths.switch_counts}")
        restart_control_api(stack)
        st = stack.status()
        assert st["switches"]["outcomes"] == {**dict.fromkeys(SWITCH_OUTCOMES, 0), "switched": 1}, name
        text = scrape(stack)
        counts = switch_counts(text)
        assert set(counts) <= known and counts["switched"] == 1 and sum(counts.values()) == 1, name
        sums = series(text, "kit_switch_duration_seconds_sum")
        assert sums and all(math.isfinite(v) and v >= 0 for v in sums.values()), (name, sums)
        assert {dict(k)["outcome"] for k in sums} <= known
        promtool_check(text)
        until(lambda: paths.switch_counts.is_file() and not paths.switch_counts.is_symlink(), 30, f"{name}: kept again")
        assert json.loads(paths.switch_counts.read_text())["totals"]["switched"] == 1
        lines = [ln for ln in stack.log.read_text(errors="replace").splitlines()
                 if f"warning: ignoring {paths.switch_counts}" in ln]
        assert len(lines) == logged + 1, (name, lines[logged:])


# ----- units -------------------------------------------------------------------------------------------
def _line(outcome: str, total_s: float | None = 1.5) -> str:
    return json.dumps({"outcome": outcome, "durations": {} if total_s is None else {"total_s": total_s}})


def test_switch_counts_from_history(tmp_path):
    sd = tmp_path
    assert SwitchCounts.from_history(sd).totals == dict.fromkeys(SWITCH_OUTCOMES, 0)  # none yet: 0
    hist = StatePaths(sd).history
    hist.write_text("\n".join([_line("started", None), _line("switched", 0.4), _line("switched", 4000),
                               _line("rolled_back", None), _line("hacked-" + "x" * 200, 3), "[1]", "{bad",
                               _line("failed", float("nan"))[:-1] + "}", ""]) + "\n")
    c = SwitchCounts.from_history(sd)
    assert c.totals["switched"] == 2 and c.totals["rolled_back"] == 1 and c.totals[metrics.OTHER] == 1
    assert c.skipped == 3 and not c.truncated  # NaN is no JSON: a broken line, as /status's history_skipped counts it
    assert c.totals["failed"] == 0
    assert c.buckets["switched"][0] == 1 and c.buckets["switched"][-1] == 1  # <= 1 s, and above an hour
    assert sum(c.buckets["rolled_back"]) == 0  # counted, not timed
    assert c.sums["switched"] == 4000.4
    small = SwitchCounts.from_history(sd, max_bytes=60)  # only the end: older lines are not counted
    assert small.truncated and sum(small.totals.values()) < sum(c.totals.values())
    hist.unlink()
    os.mkfifo(hist)
    assert SwitchCounts.from_history(sd) is None  # unreadable: unknown, never blocks


def test_switch_counts_never_go_down_across_a_restart_with_a_history_longer_than_the_window(tmp_path):
    """1000 rollbacks, then a control API restart reading a 16 MiB window (60 bytes here): the kept counts plus
    what history gained since, never fewer (Prometheus would read fewer as a counter reset, and alert)."""
    sd = tmp_path
    hist = StatePaths(sd).history
    hist.write_text("".join(_line("rolled_back", 2.0) + "\n" for _ in range(1000)))
    first = SwitchCounts.from_history(sd)  # no kept counts yet: the whole (small) history
    assert first.totals["rolled_back"] == 1000
    first.save(sd)
    with hist.open("a") as fh:  # appended after the counts were kept (a crash before the next save)
        fh.write(_line("switched", 1.0) + "\n")
    again = SwitchCounts.from_history(sd, max_bytes=60)
    assert again.totals["rolled_back"] == 1000 and again.totals["switched"] == 1 and not again.truncated
    assert sum(again.buckets["rolled_back"]) == 1000 and again.sums["rolled_back"] == 2000.0
    StatePaths(sd).switch_counts.write_text('{"v": 1, "totals": {"switched": -5}}')  # damaged: not trusted
    assert SwitchCounts.from_history(sd, max_bytes=60).truncated


def test_a_line_appended_between_the_count_and_the_save_is_counted_by_the_next_read(tmp_path):
    """The kept size is the size counted, never the file's size at save time: a line another process appends
    in between is left to the next read, not marked covered and lost."""
    sd, paths = tmp_path, StatePaths(tmp_path)
    paths.history.write_text(_line("switched") + "\n" + _line("switched") + "\n")
    counted = paths.history.stat().st_size
    c = SwitchCounts.from_history(sd)
    assert c.offset == counted and c.unsaved
    with paths.history.open("a") as fh:  # between the count and the save
        fh.write(_line("failed") + "\n")
    c.save(sd)
    assert json.loads(paths.switch_counts.read_text())["history_bytes"] == counted and not c.unsaved
    again = SwitchCounts.from_history(sd)
    assert again.totals["switched"] == 2 and again.totals["failed"] == 1
    assert again.offset == paths.history.stat().st_size and again.unsaved


def test_a_last_line_without_its_line_break_is_counted_once_complete(tmp_path):
    sd, hist = tmp_path, StatePaths(tmp_path).history
    hist.write_text(_line("switched") + "\n" + _line("failed"))  # the last write not finished yet
    c = SwitchCounts.from_history(sd)
    assert c.totals["switched"] == 1 and c.totals["failed"] == 0 and c.skipped == 0
    assert c.offset == len(_line("switched")) + 1
    c.save(sd)
    with hist.open("a") as fh:
        fh.write("\n" + _line("aborted") + "\n")
    for counts in (SwitchCounts.from_history(sd), c if c.catch_up(sd) else None):  # a restart, or this process
        assert (counts.totals["switched"], counts.totals["failed"], counts.totals["aborted"]) == (1, 1, 1)
        assert counts.offset == hist.stat().st_size


@pytest.mark.parametrize("kept", [
    "[1, 2]", "{bad", b"\xff\xfe", '{"v": 2}',
    '{"v": 1, "history_bytes": 10, "totals": {"hacked-label": 5}, "buckets": {}, "sums": {}}',
    '{"v": 1, "history_bytes": 10, "totals": {}, "buckets": {}, "sums": {}, "skipped": "x"}',
    '{"v": 1, "history_bytes": 10, "totals": {"switched": true}, "buckets": {}, "sums": {}}',
    '{"v": 1, "history_bytes": 10, "totals": {}, "buckets": {}, "sums": {"switched": NaN}}',
    '{"v": 1, "history_bytes": 10, "totals": {}, "buckets": {"switched": [1]}, "sums": {}}',
    '{"v": 1, "history_bytes": -1, "totals": {}, "buckets": {}, "sums": {}}',
    '{"v": 1, "history_bytes": 10, "totals": [], "buckets": {}, "sums": {}}',
])
def test_a_damaged_or_foreign_counts_file_is_not_trusted(tmp_path, kept):
    paths = StatePaths(tmp_path)
    paths.history.write_text(_line("switched") + "\n")
    if isinstance(kept, bytes):
        paths.switch_counts.write_bytes(kept)
    else:
        paths.switch_counts.write_text(kept)
    assert SwitchCounts.saved(tmp_path) is None
    c = SwitchCounts.from_history(tmp_path)  # from the history alone
    assert c.totals == {**dict.fromkeys(SWITCH_OUTCOMES, 0), "switched": 1} and c.unsaved


def test_labels_are_bounded_and_build_info_reads_the_image_patch_set(tmp_path, monkeypatch):
    assert metrics.bounded("fused", metrics.NAME_RE) == "fused"
    for bad in ("/models/x", "A" * 3, "x" * 65, "a b", None, 3):
        assert metrics.bounded(bad, metrics.NAME_RE) == metrics.OTHER
    f = tmp_path / "patches.sha256"
    monkeypatch.setattr(metrics, "IMAGE_PATCH_SET_FILE", f)
    metrics.build_info.cache_clear()
    try:
        assert metrics.build_info()["patch_set"] == "unknown"
        f.write_text("ab" * 32 + "\n")
        metrics.build_info.cache_clear()
        assert metrics.build_info()["patch_set"] == "ab" * 6
        f.write_text("not a hash")
        metrics.build_info.cache_clear()
        assert metrics.build_info()["patch_set"] == "unknown"
    finally:
        metrics.build_info.cache_clear()


class _FakeLifecycle:
    switcher = SimpleNamespace(server_changed_at=0.0)  # never stopped or started the server: absent
    current = None
    state = State.STARTING
    backends = [{"name": "pcie-ipc", "active": None}, {"name": "../etc", "active": True}]
    restarts = retries = 0

    def switch_counts_now(self):
        raise RuntimeError("broken family")

    def health_age_s(self):
        return None

    def history_view(self):
        return [], 0


def test_a_family_that_fails_is_left_out_and_unknowns_are_absent():
    reg = CollectorRegistry(auto_describe=False)
    reg.register(KitCollector(_FakeLifecycle()))
    text = generate_latest(reg).decode()
    names = {f.name for f in text_string_to_metric_families(text) if f.samples}
    assert names == {"kit_build_info", "kit_server_state", "kit_backend_active", "kit_server_restarts",
                     "kit_history_skipped_lines"}
    assert series(text, "kit_backend_active") == {frozenset({("backend", metrics.OTHER)}): 1}


def test_server_changed_timestamp_is_the_switchers_last_stop_or_start():
    fake = _FakeLifecycle()
    fake.switcher = SimpleNamespace(server_changed_at=1_700_000_123.5)
    [fam] = KitCollector(fake)._server_changed()
    assert [(s.name, s.labels, s.value) for s in fam.samples] == [
        ("kit_server_changed_timestamp_seconds", {}, 1_700_000_123.5)]
    for unknown in (0.0, math.nan, None, True):
        fake.switcher = SimpleNamespace(server_changed_at=unknown)
        assert KitCollector(fake)._server_changed()[0].samples == []


@pytest.mark.parametrize("params", ["no field", None, {"steps": 3, "topk": 1, "draft_tokens": 4}])
def test_plan_info_carries_speculation_parameters_where_the_plan_has_them(params):
    class P:
        name, spec = "fused", "eagle3"

        def digest(self):
            return "0123456789abcdef"

    plan = P()
    if params != "no field":
        plan.spec_params = params
    fake = _FakeLifecycle()
    fake.current = plan
    fams = KitCollector(fake)._plan()
    [sample] = fams[0].samples
    want = {"profile": "fused", "spec": "eagle3", "digest": "0123456789abcdef"}
    if params is None:
        want.update(steps="none", topk="none", draft_tokens="none")
    elif params != "no field":
        want.update(steps="3", topk="1", draft_tokens="4")
    assert sample.labels == want
