"""launcher/fleet/fleetfile.py: the fleet file's schema; every bad file exits 2 naming the file and key."""

from __future__ import annotations

import pytest
from helpers_profiles import run_launcher

from launcher.errors import UserError
from launcher.fleet import fleetfile

GOOD = '''[router]
url = "http://127.0.0.1:30080/"

[[host]]
name = "gpu-a"
server = "http://10.0.0.11:30000"
control = "http://10.0.0.11:30100"

[[host]]
name = "gpu-b"
server = "http://10.0.0.12:30000/"
control = "http://10.0.0.12:30100"
token_env = "TOKEN_B"
'''


def test_a_good_file_loads_with_urls_in_one_spelling(tmp_path):
    path = tmp_path / "fleet.toml"
    path.write_text(GOOD)
    fleet = fleetfile.load(path)
    assert fleet.router.url == "http://127.0.0.1:30080" and fleet.router.prometheus == "127.0.0.1:29000"
    assert [h.server for h in fleet.host] == ["http://10.0.0.11:30000", "http://10.0.0.12:30000"]
    assert [h.token_env for h in fleet.host] == ["KIT_CONTROL_TOKEN", "TOKEN_B"]


@pytest.mark.stack
@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[router]\nurl = 'http://127.0.0.1:1'\n", "key 'host'"),
        (GOOD.replace('name = "gpu-a"', 'name = "GPU A"'), "key 'host.0.name'"),
        (GOOD.replace('server = "http://10.0.0.11:30000"', 'server = "10.0.0.11:30000"'), "key 'host.0.server'"),
        (GOOD.replace('server = "http://10.0.0.11:30000"', 'server = "http://10.0.0.11:30000/v1"'), "path"),
        (GOOD.replace('name = "gpu-b"', 'name = "gpu-a"'), "appears twice"),
        (GOOD.replace('server = "http://10.0.0.12:30000/"', 'server = "http://10.0.0.11:30000"'), "appears twice"),
        (GOOD.replace('token_env = "TOKEN_B"', 'token_env = "TOKEN-B"'), "key 'host.1.token_env'"),
        (GOOD.replace('[router]', '[router]\nport = 1'), "key 'router.port'"),
        (GOOD + "\n[extra]\n", "key 'extra'"),
        (GOOD.replace('url = "http://127.0.0.1:30080/"', 'url = "http://127.0.0.1:30080"\nprometheus = "29000"'),
         "key 'router.prometheus'"),
        ("[router\n", "TOML syntax error"),
    ],
)
def test_bad_files_exit_2_naming_file_and_key(tmp_path, text, needle):
    path = tmp_path / "fleet.toml"
    path.write_text(text)
    with pytest.raises(UserError) as exc:
        fleetfile.load(path)
    assert str(path) in str(exc.value) and needle in str(exc.value)
    proc = run_launcher("fleet", "status", "--fleet", str(path))
    assert proc.returncode == 2 and needle in proc.stderr and "Traceback" not in proc.stderr


def test_missing_file_and_missing_token_are_user_errors(tmp_path, monkeypatch):
    with pytest.raises(UserError, match="fleet file not found"):
        fleetfile.load(tmp_path / "nope.toml")
    path = tmp_path / "fleet.toml"
    path.write_text(GOOD)
    fleet = fleetfile.load(path)
    monkeypatch.delenv("KIT_CONTROL_TOKEN", raising=False)
    monkeypatch.setenv("TOKEN_B", "b")
    with pytest.raises(UserError, match="KIT_CONTROL_TOKEN not set.*gpu-a"):
        fleetfile.require_tokens(fleet)


@pytest.mark.stack
def test_router_command_line_is_loopback_round_robin_with_every_server(tmp_path):
    path = tmp_path / "fleet.toml"
    path.write_text(GOOD)
    proc = run_launcher("fleet", "router", "--fleet", str(path), "--print")
    assert proc.returncode == 0, proc.stderr
    args = proc.stdout.split()
    assert args[args.index("--host") + 1] == "127.0.0.1" and args[args.index("--port") + 1] == "30080"
    assert args[args.index("--prometheus-host") + 1] == "127.0.0.1"
    assert args[args.index("--policy") + 1] == "round_robin"
    assert args[args.index("--worker-urls") + 1 :] == ["http://10.0.0.11:30000", "http://10.0.0.12:30000"]


@pytest.mark.stack
def test_router_refuses_a_taken_port_in_one_line(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        path = tmp_path / "fleet.toml"
        path.write_text(GOOD.replace("30080/", f"{port}"))
        proc = run_launcher("fleet", "router", "--fleet", str(path))
    assert proc.returncode == 1
    assert f"key 'router.url': 127.0.0.1:{port} is not free" in proc.stderr and "Traceback" not in proc.stderr
