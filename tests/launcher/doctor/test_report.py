"""launcher.doctor.report: the doctor's text for people. Each finding once (grouped by cause, shared
ones as numbered notes), each of symm-mem's reasons once, one item per line below 100 columns, and
the suggested command on a line of its own."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from helpers_doctor import file_args, files, healthy_root, stub_probe
from rich.console import Console
from rich.text import Text

from launcher.doctor import causes, diagnose, report
from launcher.profiles.loader import available_names

REPO = Path(__file__).resolve().parents[3]
PROTO = "NCCL_PROTO=LL keeps Simple off"
P2P_LEVEL = "NCCL_P2P_LEVEL=SYS turns on GPU peer-to-peer"
P2P_BROKEN = "needs GPU peer-to-peer access; P2P is not OK between"


def fresh(tmp_path: Path) -> Path:
    """A new folder for one fake root: a test may build several."""
    return Path(tempfile.mkdtemp(dir=tmp_path))


def text_of(host: str, width: int, tmp_path: Path) -> str:
    """The report as a pipe (not a terminal) of `width` columns would get it."""
    r = diagnose.run(stub_probe(fresh(tmp_path)), files(host))
    out = io.StringIO()
    report.render(r, Console(file=out, width=width, force_terminal=False, color_system=None))
    return out.getvalue()


def doctor_subprocess(host: str, columns: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {"PATH": os.path.dirname(sys.executable), "PYTHONPATH": str(REPO), "HOME": str(tmp_path), "COLUMNS": columns}
    args = [sys.executable, "-m", "launcher", "doctor", *file_args(host), "--root", str(healthy_root(fresh(tmp_path))),
            "--nccl-version", "2.31.2"]
    return subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)


# --- grouped by cause ---------------------------------------------------------------------------


@pytest.mark.parametrize("width", [80, 160])
def test_a_warning_shared_by_several_profiles_is_printed_once_as_a_note(tmp_path, width):
    """On a dual-socket PCIe host two warnings apply to 7 and 8 profiles: once each, with the profiles."""
    text = text_of("pcie8", width, tmp_path)
    flat = " ".join(text.split())  # words as read, whatever the wrapping
    assert flat.count(PROTO) == 1 and flat.count(P2P_LEVEL) == 1, text
    assert "[1] warning: " + PROTO in flat and "[2] warning: " + P2P_LEVEL in flat
    assert "for: custom-ar, ep, ep-deepep, fused, mscclpp, nccl-graph-mixing-off, nccl-tuned [2]" in flat
    assert "for: custom-ar, ep, ep-deepep, fused, mscclpp, nccl-graph-mixing-off, nccl-tuned, nccl-tuned-simple doctor:" in flat
    assert flat.count("see [1] [2]") == 7 and flat.count("see [2]") == 1
    # a warning only one profile has stays with it
    assert flat.count("DeepEP warns that PCIe peer connections") == 1
    assert len(text.splitlines()) < 110, text


def test_a_refusal_shared_by_several_profiles_is_one_note(tmp_path):
    flat = " ".join(text_of("pcie8-broken", 80, tmp_path).split())
    assert flat.count(P2P_BROKEN) == 1
    assert flat.count("no (experimental); see [1]") == 8


def test_notes_number_only_what_profiles_share(tmp_path):
    r = diagnose.run(stub_probe(tmp_path), files("pcie8"))
    pn = report.profile_notes(r)
    assert [(n, names) for n, _, names in pn.notes] == [
        (1, ["custom-ar", "ep", "ep-deepep", "fused", "mscclpp", "nccl-graph-mixing-off", "nccl-tuned"]),
        (2, ["custom-ar", "ep", "ep-deepep", "fused", "mscclpp", "nccl-graph-mixing-off", "nccl-tuned", "nccl-tuned-simple"]),
    ]
    assert pn.refs["baseline"] == [] and pn.own["baseline"] == []
    assert pn.refs["nccl-tuned-simple"] == [2]
    assert [t.split(":")[0] for t in pn.own["ep-deepep"]] == ["warning"]


def test_no_gpu_facts_is_one_note_for_every_profile(tmp_path):
    r = diagnose.run(stub_probe(tmp_path), {"topo": None, "p2p": None, "gpus": None})
    pn = report.profile_notes(r)
    assert len(pn.notes) == 1 and pn.notes[0][2] == available_names()
    assert "no GPU facts" in pn.notes[0][1]


# --- symm-mem: each reason once -----------------------------------------------------------------


def test_symm_mem_gives_each_reason_once(tmp_path):
    """Its [requires] (sm, interconnect, nvlink_multicast) refuses the host on the same facts as the
    symm-mem rule; the rule's text (why, and what to do) is kept, the restatement left out."""
    r = diagnose.run(stub_probe(tmp_path), files("pcie8"))
    symm = r.eligibility["symm-mem"]
    assert symm.messages == [
        "torch symm-mem needs SM 9.x/10.x, this host has SM 12.0; pick another profile",
        "torch symm-mem needs NVLink multicast, this host is PCIe-only; pick another profile",
    ]
    assert "requires.sm" not in symm.reason and "host has 12.0" not in symm.reason
    assert "findings" not in symm.to_dict()
    flat = " ".join(text_of("pcie8", 80, tmp_path).split())
    assert flat.count("needs SM") == 1 and flat.count("NVLink multicast, which this host lacks") == 0
    assert flat.count("needs NVLink") == 1


def test_a_requires_refusal_no_other_rule_makes_is_kept(tmp_path):
    """P2P is refused only by [requires]: it stays (custom-ar on the broken host)."""
    r = diagnose.run(stub_probe(tmp_path), files("pcie8-broken"))
    assert any(P2P_BROKEN in m for m in r.eligibility["custom-ar"].messages)


def test_drop_restated_matches_the_fact_not_the_profile():
    from launcher.profiles.rules.context import Finding

    sm = Finding("ineligible", "host_requirements", "requires.sm", "needs SM 9.0, host has 12.0")
    p2p = Finding("ineligible", "host_requirements", "requires.p2p", "needs GPU peer-to-peer access; P2P is not OK")
    rule = Finding("ineligible", "some_backend", "server.x", "backend needs SM 9.x, this host has SM 12.0")
    assert causes.drop_restated([sm, p2p, rule]) == [p2p, rule]
    assert causes.drop_restated([sm, p2p]) == [sm, p2p]  # nothing restates them


# --- narrow: one item per line --------------------------------------------------------------------


def test_below_100_columns_the_report_is_one_item_per_line(tmp_path):
    text = text_of("pcie8", 80, tmp_path)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "┃" not in text and "│" not in text  # no bordered table whose cells wrap into strips
    for name in available_names():
        assert sum(line.startswith(f"  {name}: ") for line in lines) == 1, name
    assert "  symm-mem: no (experimental)" in lines
    assert any(line.startswith("  WARN topology: GPUs span NUMA nodes") for line in lines)
    assert any(line.startswith("       fix: nothing to change in software") for line in lines)
    assert "  NUMA split: GPU 0,1,2,3 (CPUs 0-47,96-143); GPU 4,5,6,7 (CPUs 48-95,144-191)" in lines


def test_at_100_columns_and_more_the_tables_stay(tmp_path):
    text = text_of("pcie8", 120, tmp_path)
    assert "┃ check" in text and "┃ profile" in text
    assert " ".join(text.split()).count(PROTO) == 1


@pytest.mark.parametrize("width", [60, 80, 160])
def test_the_suggested_command_is_a_line_of_its_own(tmp_path, width):
    lines = text_of("pcie8", width, tmp_path).splitlines()
    assert lines[-2] == "save these facts for `launcher show/check --host-facts`:"
    assert lines[-1] == "  launcher doctor --out host-facts.json"


@pytest.mark.stack
def test_a_pipe_of_80_columns_gets_lines_and_the_whole_command(tmp_path):
    """`COLUMNS=80 launcher doctor | less`: the case the tables wrapped worst."""
    proc = doctor_subprocess("pcie8", "80", tmp_path)
    assert proc.returncode in (0, 1), proc.stderr
    lines = proc.stdout.splitlines()
    assert "  launcher doctor --out host-facts.json" in lines
    assert "┃" not in proc.stdout and max(len(line) for line in lines) <= 80
    assert " ".join(proc.stdout.split()).count(PROTO) == 1
    wide = doctor_subprocess("pcie8", "160", tmp_path)
    assert "┃ profile" in wide.stdout and "  launcher doctor --out host-facts.json" in wide.stdout.splitlines()


def test_narrow_threshold():
    assert causes.narrow(80) and causes.narrow(99) and not causes.narrow(100)


@pytest.mark.parametrize("width", [40, 60, 80])
def test_a_command_in_backticks_is_never_split(tmp_path, width):
    """Fix texts quote their commands in backticks; lines mode moves one whole to the next line."""
    text = text_of("pcie8", width, tmp_path)
    assert all(line.count("`") % 2 == 0 for line in text.splitlines()), text
    assert "`nvidia-ctk runtime configure --runtime=docker`" in text


def test_fix_texts_quote_their_commands():
    from launcher.doctor import checks

    assert checks.uvm_hmm(True, "N").fix.startswith("`echo 'options nvidia_uvm uvm_disable_hmm=1' > /etc/modprobe.d/")
    assert "`export KIT_TP_SIZE=4`" in checks.gpu_count(4, 8).fix
    assert "`--ulimit memlock=-1`" in checks.memlock(8192 * 1024, infinity=-1).fix
    assert "`NCCL_P2P_DISABLE=1 NCCL_CUMEM_ENABLE=0`" in checks.kernel_cmdline("intel_iommu=on", []).fix


def test_a_command_longer_than_the_line_stands_whole_on_its_own():
    text = Text("fix: run `a-very-long-command --with --many --options --that --do --not --fit` now")
    out = io.StringIO()
    Console(file=out, width=40, color_system=None).print(report._hanging(text, 40, 2, 6), soft_wrap=True)
    lines = out.getvalue().splitlines()
    assert "      `a-very-long-command --with --many --options --that --do --not --fit`" in lines, lines


# --- power limits ---------------------------------------------------------------------------------


@pytest.mark.parametrize("width", [80, 160])
def test_power_limits_are_a_line_per_gpu_and_a_cap_is_a_warning(tmp_path, width):
    from helpers_doctor import FIX

    r = diagnose.run(stub_probe(fresh(tmp_path)), {**files("pcie8"), "power": FIX / "pcie8_power_capped.csv"})
    out = io.StringIO()
    report.render(r, Console(file=out, width=width, force_terminal=False, color_system=None))
    flat = " ".join(out.getvalue().split())
    assert "GPU 0: power limit 600 W (default 600 W, range 150-600 W)" in flat
    assert "GPU 3: power limit 450 W (default 600 W, range 150-600 W) (power-capped)" in flat
    [check] = [c for c in r.checks if c.name == "power-limit"]
    assert check.status == "warn" and not r.failed and "power-limit" in flat
    assert check.detail.startswith("power-capped: GPU 3 at 450 W (default 600 W), GPU 5 at 400 W (default 600 W)")
    assert r.to_json()["power"]["limits"][5]["limit_w"] == 400.0


def test_power_limits_not_read_say_why_and_add_no_check(tmp_path):
    r = diagnose.run(stub_probe(fresh(tmp_path)), files("pcie8"))
    text = " ".join(text_of("pcie8", 80, tmp_path).split())
    assert "power limits: unknown (not read: the GPU facts came from a file; pass --power-file, saved beside it)" in text
    assert "power-limit" not in {c.name for c in r.checks}
    assert r.to_json()["power"] == {"unknown": "not read: the GPU facts came from a file; pass --power-file, saved beside it"}
