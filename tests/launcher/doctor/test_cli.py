"""launcher.doctor.cli: `launcher doctor` end to end, the JSON contract, exit codes, and real subprocesses with and without nvidia-smi."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from helpers_doctor import FIX, HOSTS, file_args, files, healthy_root

from launcher.doctor.cli import main
from launcher.profiles.hostfacts import HostFacts, load_host_facts
from launcher.profiles.loader import available_names
from launcher.profiles.plan import build_plan

REPO = Path(__file__).resolve().parents[3]
ENTRY = "from launcher.doctor.cli import main; raise SystemExit(main())"


def run_subprocess(args: list[str], path_dirs: list[Path], extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {
        "PATH": os.pathsep.join(map(str, path_dirs)),
        "PYTHONPATH": str(REPO),
        "HOME": os.environ.get("HOME", "/tmp"),
        "COLUMNS": "160",
        **(extra_env or {}),
    }
    return subprocess.run([sys.executable, "-c", ENTRY, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)


# --- JSON contract ------------------------------------------------------------------------------


@pytest.mark.stack
def test_json_validates_as_host_facts_and_feeds_build_plan(tmp_path, capsys):
    out = tmp_path / "facts.json"
    rc = main([*file_args("pcie8"), "--json", "--out", str(out), "--root", str(healthy_root(tmp_path)), "--nccl-version", "2.31.2"])
    printed = capsys.readouterr().out
    data = json.loads(printed)
    assert json.loads(out.read_text()) == data
    assert rc == (1 if any(c["status"] == "fail" for c in data["checks"]) else 0)
    for key in ("gpus", "interconnect", "numa_nodes", "p2p_ok", "checks", "eligibility"):
        assert key in data
    assert isinstance(data["p2p_ok"], bool)
    assert data["numa_nodes"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert all(set(c) == {"name", "status", "detail", "fix"} and c["status"] in ("pass", "warn", "fail") for c in data["checks"])
    assert set(data["eligibility"]) == set(available_names())
    assert all({"ok", "reason"} <= set(v) for v in data["eligibility"].values())
    assert data["gpus"][3] == {
        "index": 3,
        "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        "compute_cap": "12.0",
        "driver_version": "580.95.05",
        "bus_id": "00000000:61:00.0",
    }

    facts = load_host_facts(out)
    assert isinstance(facts, HostFacts)
    assert facts.interconnect == "pcie-cross-socket" and facts.nccl_version == "2.31.2"
    plan = build_plan("fused", host_facts=facts, environ={"MODEL_PATH": "/m", "DRAFT_MODEL_PATH": "/d"})
    assert "--flashinfer-allreduce-fusion-backend" in plan.argv
    assert "sm120-allreduce-fusion" in plan.patches


@pytest.mark.stack
def test_json_of_broken_p2p_host_blocks_custom_ar_in_build_plan(tmp_path, capsys):
    from launcher.errors import UserError

    out = tmp_path / "facts.json"
    main([*file_args("pcie8-broken"), "--out", str(out), "--root", str(healthy_root(tmp_path)), "--nccl-version", "2.31.2"])
    text = " ".join(capsys.readouterr().out.split())  # words as read, however the report wraps them
    assert "Profiles on this host" in text and "GPU2 and GPU5" in text
    facts = load_host_facts(out)
    with pytest.raises(UserError, match="GPU2 and GPU5"):
        build_plan("custom-ar", host_facts=facts, environ={"MODEL_PATH": "/m", "DRAFT_MODEL_PATH": "/d"})


@pytest.mark.stack
def test_single_gpu_json_keeps_interconnect_null(tmp_path, capsys):
    main([*file_args("h200x1"), "--json", "--root", str(healthy_root(tmp_path)), "--nccl-version", "2.31.2"])
    data = json.loads(capsys.readouterr().out)
    assert data["interconnect"] is None and data["p2p_ok"] is None
    assert HostFacts.model_validate(data).gpus[0].name == "NVIDIA H200"


@pytest.mark.stack
def test_power_file_puts_the_limits_in_the_json(tmp_path, capsys):
    args = [*file_args("pcie8"), "--power-file", str(FIX / "pcie8_power_capped.csv"), "--json"]
    rc = main([*args, "--root", str(healthy_root(tmp_path)), "--nccl-version", "2.31.2"])
    data = json.loads(capsys.readouterr().out)
    assert rc == (1 if any(c["status"] == "fail" for c in data["checks"]) else 0)
    assert [p["limit_w"] for p in data["power"]["limits"]] == [600.0, 600.0, 600.0, 450.0, 600.0, 400.0, 600.0, 600.0]
    assert data["sources"]["power"] == str(FIX / "pcie8_power_capped.csv")
    assert {c["name"]: c["status"] for c in data["checks"]}["power-limit"] == "warn"
    HostFacts.model_validate(data)


# --- bad input -> exit 2 with the line ------------------------------------------------------------


def test_unknown_topology_format_exits_2_quoting_the_line(tmp_path, capsys):
    bad = tmp_path / "topo.txt"
    text = (FIX / "switch4_topo.txt").read_text().replace("GPU2\tPXB\tPXB\t X \tPIX", "GPU2\tPXB\tPXB\t X \tQPI")
    bad.write_text(text)
    args = ["--topo-file", str(bad), "--p2p-file", str(files("switch4")["p2p"]), "--gpus-file", str(files("switch4")["gpus"])]
    rc = main([*args, "--json", "--nccl-version", "2.31.2"])
    err = capsys.readouterr().err
    assert rc == 2
    assert f"{bad}:4: unknown link type 'QPI'" in err
    assert "GPU2  PXB  PXB   X   QPI" in err  # the line itself, tabs shown as spaces


def test_mismatched_files_exit_2(tmp_path, capsys):
    args = ["--topo-file", str(files("pcie8")["topo"]), "--p2p-file", str(files("switch4")["p2p"]), "--gpus-file", str(files("pcie8")["gpus"])]
    assert main([*args, "--nccl-version", "2.31.2"]) == 2
    assert "disagree" in capsys.readouterr().err


@pytest.mark.stack
@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--topo-file", "/nonexistent/topo.txt"], "/nonexistent/topo.txt: cannot read"),
        (["--nccl-version", "latest"], "--nccl-version 'latest'"),
        (["--spec", "medusa"], "unknown speculation mode"),
        (["--root", "/nonexistent-root"], "not a directory"),
        (["--gpus-file", str(FIX / "pcie8_gpus.csv"), "--nccl-version", "2.31.2", "--out", "/proc/doctor.json"], "--out /proc/doctor.json: cannot write"),
    ],
)
def test_bad_options_exit_2(args, needle, capsys):
    assert main(args) == 2
    assert needle in capsys.readouterr().err


# --- real subprocesses ---------------------------------------------------------------------------


@pytest.mark.stack
def test_subprocess_with_saved_files(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    proc = run_subprocess([*file_args("nvlink8"), "--json", "--root", str(healthy_root(tmp_path)), "--nccl-version", "2.31.2"], [empty])
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["interconnect"] == "nvlink" and data["nvlink_multicast"] is True
    assert data["eligibility"]["symm-mem"]["ok"] is True
    assert proc.stderr == ""


@pytest.mark.stack
def test_subprocess_without_nvidia_smi_says_so_cleanly(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    root = str(healthy_root(tmp_path))
    proc = run_subprocess(["--json", "--root", root, "--nccl-version", "2.31.2"], [empty])
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    data = json.loads(proc.stdout)
    smi = next(c for c in data["checks"] if c["name"] == "nvidia-smi")
    assert smi["status"] == "fail"
    assert smi["detail"].startswith("nvidia-smi not found: install the NVIDIA driver")
    assert data["gpus"] == [] and data["interconnect"] is None
    assert all(v["ok"] is False and "nvidia-smi" in v["reason"] for v in data["eligibility"].values())
    HostFacts.model_validate(data)

    tables = run_subprocess(["--root", root, "--nccl-version", "2.31.2"], [empty])
    assert tables.returncode == 1
    assert "nvidia-smi not found: install the NVIDIA driver" in tables.stdout
    assert "Traceback" not in tables.stderr


def _fake_nvidia_smi(bindir: Path, topo: str, p2p: str, gpus: str, fail: str | None = None) -> None:
    bindir.mkdir(exist_ok=True)
    script = bindir / "nvidia-smi"
    if fail:
        body = f"echo {shlex.quote(fail)} >&2\nexit 9\n"
    else:
        body = (
            'case "$*" in\n'
            f'  "topo -m") exec /bin/cat "{FIX / topo}" ;;\n'
            f'  "topo -p2p r") exec /bin/cat "{FIX / p2p}" ;;\n'
            f'  --query-gpu=*) exec /bin/cat "{FIX / gpus}" ;;\n'
            '  *) echo "unexpected arguments: $*" >&2; exit 2 ;;\n'
            "esac\n"
        )
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)


@pytest.mark.stack
def test_subprocess_runs_nvidia_smi_from_path(tmp_path):
    bindir = tmp_path / "bin"
    _fake_nvidia_smi(bindir, *HOSTS["pcie8-broken"])
    root = healthy_root(tmp_path)
    (root / ".dockerenv").write_text("")  # as under `make doctor`, inside the server container
    proc = run_subprocess(["--json", "--root", str(root), "--nccl-version", "2.31.2"], [bindir])
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    status = {c["name"]: c["status"] for c in data["checks"]}
    assert status["docker"] == "pass" and status["nvidia-container"] == "pass"
    assert data["sources"] == {"topo": "nvidia-smi", "p2p": "nvidia-smi", "gpus": "nvidia-smi"}
    assert data["interconnect"] == "pcie-cross-socket"
    assert data["p2p_bad_pairs"] == [[0, 7], [2, 5]]
    assert data["eligibility"]["custom-ar"]["ok"] is False


@pytest.mark.stack
def test_subprocess_failing_nvidia_smi_is_a_failed_check(tmp_path):
    bindir = tmp_path / "bin"
    msg = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    _fake_nvidia_smi(bindir, "", "", "", fail=msg)
    proc = run_subprocess(["--json", "--root", str(healthy_root(tmp_path)), "--nccl-version", "2.31.2"], [bindir])
    assert proc.returncode == 1
    data = json.loads(proc.stdout)
    failed = [c for c in data["checks"] if c["status"] == "fail"]
    assert failed and all(c["name"] == "nvidia-smi" for c in failed)
    assert msg in failed[0]["detail"]


@pytest.mark.stack
def test_launcher_entry_point_dispatches_to_the_doctor(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {"PATH": str(empty), "PYTHONPATH": str(REPO), "COLUMNS": "160"}
    args = [sys.executable, "-m", "launcher", "doctor", *file_args("switch4"), "--root", str(healthy_root(tmp_path)), "--nccl-version", "2.26.2"]
    proc = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1  # NCCL 2.26.2 is a known-bad release
    assert "nccl#2418" in proc.stdout and "pcie-switch" in proc.stdout


def test_bad_kit_tp_size_exits_2_naming_the_setting(tmp_path, monkeypatch, capsys):
    """KIT_TP_SIZE="x" used to be read as the default 8; it is now a setting error."""
    monkeypatch.setenv("KIT_TP_SIZE", "x")
    rc = main([*file_args("switch4"), "--json", "--root", str(healthy_root(tmp_path)), "--nccl-version", "2.31.2"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert "KIT_TP_SIZE='x' is not a whole number >= 1" in err


@pytest.mark.stack
def test_text_report_loses_nothing_at_80_columns(tmp_path):
    """Fix texts are commands to copy: at 80 columns they wrap whole, never end in '…'."""
    proc = run_subprocess([*file_args("pcie8-broken"), "--root", str(healthy_root(tmp_path))], [Path(sys.executable).parent],
                          {"COLUMNS": "80"})
    assert proc.stdout, proc.stderr
    assert "…" not in proc.stdout
    assert max(len(line) for line in proc.stdout.splitlines()) <= 80
    joined = "".join(line.strip("│ ") for line in proc.stdout.splitlines())
    assert "p2p" in proc.stdout and "Resizable BAR" in joined.replace("│", "")


# --- where the facts went, and the one recipe for them ----------------------------------------------


@pytest.mark.stack
def test_out_says_where_it_wrote_and_asks_for_no_other_file(tmp_path, capsys):
    """`--out f.json` names f.json and the command that reads it; it never asks the user to run the doctor again."""
    out = tmp_path / "my facts.json"
    main([*file_args("pcie8"), "--out", str(out), "--root", str(healthy_root(tmp_path)), "--nccl-version", "2.31.2"])
    lines = capsys.readouterr().out.splitlines()
    assert out.is_file()
    assert lines[-3:] == [f"host facts written to {out}", "use them with `launcher show/check --host-facts`:",
                          f"  launcher check --all --host-facts '{out}'"]
    assert not any("launcher doctor --out" in line for line in lines)


@pytest.mark.stack
def test_json_out_names_the_file_on_stderr_and_keeps_stdout_json(tmp_path, capsys):
    out = tmp_path / "facts.json"
    main([*file_args("pcie8"), "--json", "--out", str(out), "--root", str(healthy_root(tmp_path)), "--nccl-version", "2.31.2"])
    captured = capsys.readouterr()
    assert json.loads(captured.out) == json.loads(out.read_text())
    assert captured.err == f"launcher doctor: host facts written to {out}\n"


@pytest.mark.stack
def test_without_out_the_report_gives_the_one_recipe(tmp_path, capsys):
    main([*file_args("pcie8"), "--root", str(healthy_root(tmp_path)), "--nccl-version", "2.31.2"])
    assert capsys.readouterr().out.splitlines()[-1] == "  launcher doctor --out host-facts.json"


def test_a_missing_or_broken_facts_file_names_the_same_recipe(tmp_path):
    from launcher.errors import UserError

    missing = tmp_path / "gone.json"
    with pytest.raises(UserError, match=re.escape(f"create it on the GPU host with `launcher doctor --out {missing}`")):
        load_host_facts(missing)
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(UserError, match=re.escape(f"regenerate it with `launcher doctor --out {broken}`")):
        load_host_facts(broken)


def test_no_hint_gives_another_recipe_for_a_facts_file():
    """Every message and document that tells the user how to make a host-facts file gives `launcher doctor --out`,
    never a redirect of `--json`."""
    files_ = [*(REPO / "launcher").rglob("*.py"), *(REPO / "bench").rglob("*.py"), *(REPO / "docs").glob("*.md"), REPO / "README.md"]
    offenders = [f"{p.relative_to(REPO)}:{n}" for p in files_
                 for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if re.search(r"doctor --json\s*>", line)]
    assert offenders == []
