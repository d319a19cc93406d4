import json
import stat

from launcher.runtime import state as runtime_state
from launcher.runtime import supervisor_conf
from launcher.runtime.switch import running_requests


def test_server_url_from_flags():
    assert runtime_state.server_url(["--host", "0.0.0.0", "--port", "31000"]) == "http://127.0.0.1:31000"
    assert runtime_state.server_url(["--host", "10.1.2.3", "--port", "1"]) == "http://10.1.2.3:1"
    assert runtime_state.server_url(["--model-path", "/m"]) == "http://127.0.0.1:30000"


def test_history_keeps_last_entries_and_skips_torn_lines(tmp_path):
    for i in range(25):
        runtime_state.append_history(tmp_path, {"i": i})
    with open(tmp_path / runtime_state.HISTORY, "a") as fh:
        fh.write('{"torn": ')
    hist = runtime_state.history(tmp_path, 20)
    assert [h["i"] for h in hist] == list(range(6, 25))  # last 20 lines, the torn one dropped


def test_commit_is_atomic_json(tmp_path):
    runtime_state.commit(tmp_path, {"name": "fused", "spec": "eagle3"})
    data = json.loads((tmp_path / runtime_state.COMMITTED).read_text())
    assert data["plan"]["name"] == "fused"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_tail_reads_last_lines(tmp_path):
    log = tmp_path / "x.log"
    log.write_text("".join(f"line {i}\n" for i in range(200)))
    assert runtime_state.tail(log, 3) == ["line 197", "line 198", "line 199"]
    assert runtime_state.tail(tmp_path / "missing.log") == []


def test_running_requests_sums_labelled_series_and_ignores_comments():
    text = (
        "# HELP sglang:num_running_reqs The number of running requests.\n"
        'sglang:num_running_reqs{tp_rank="0"} 2.0\n'
        'sglang:num_running_reqs{tp_rank="1"} 1.0\n'
        'sglang:num_queue_reqs{tp_rank="0"} 5.0\n'
    )
    assert running_requests(text) == 3.0
    assert running_requests("") == 0.0


def test_supervisord_conf(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/a%b")
    paths = supervisor_conf.Paths(tmp_path)
    conf = supervisor_conf.render(paths, stop_wait_s=7, start_secs=2, start_retries=4)
    text = conf.read_text()
    assert stat.S_IMODE(conf.stat().st_mode) == 0o600
    assert f"file={paths.socket}\nchmod=0700" in text
    assert "[inet_http_server]" not in text  # never TCP
    sglang = text.split("[program:sglang]")[1].split("[program:")[0]
    for line in ("stopasgroup=true", "killasgroup=true", "stopwaitsecs=7", "startsecs=2", "startretries=4",
                 "autorestart=true", f"stdout_logfile={paths.server_log}", "stdout_logfile_backups=5"):
        assert line in sglang, line
    assert "/a%%b" in sglang  # supervisord %-expansion escaped
    assert "[program:control]" in text and "launcher.runtime.control_api" in text
