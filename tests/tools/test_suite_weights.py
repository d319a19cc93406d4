"""tools/suite_weights.py and the order tests/conftest.py gives `make test`'s files from its output."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("suite_weights", ROOT / "tools" / "suite_weights.py")
suite_weights = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(suite_weights)

REPORT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="tests.test_a" name="test_one" time="4.5"/>
<testcase classname="tests.test_a.TestGroup" name="test_two" time="1.5"/>
<testcase classname="tests.test_b" name="test_three" time="{b}"/>
<testcase classname="tests.test_c" name="test_four" time="0.2"/>
</testsuite></testsuites>
"""


def test_a_report_gives_seconds_per_file_with_its_classes(tmp_path):
    (tmp_path / "r.xml").write_text(REPORT.format(b=30))
    assert suite_weights.file_seconds(tmp_path / "r.xml") == Counter(
        {"tests/test_a.py": 6.0, "tests/test_b.py": 30.0, "tests/test_c.py": 0.2})


def test_weights_are_medians_heaviest_first_without_the_light_files():
    runs = [Counter({"tests/test_a.py": 6.0, "tests/test_b.py": 30.0, "tests/test_c.py": 0.2}),
            Counter({"tests/test_a.py": 8.0, "tests/test_b.py": 10.0}),
            Counter({"tests/test_a.py": 7.0, "tests/test_b.py": 20.0})]
    assert list(suite_weights.weights(runs).items()) == [("tests/test_b.py", 20.0), ("tests/test_a.py", 7.0)]


def test_main_writes_the_table_and_refuses_a_file_that_is_no_report(tmp_path, capsys):
    (tmp_path / "r1.xml").write_text(REPORT.format(b=30))
    (tmp_path / "r2.xml").write_text(REPORT.format(b=10))
    out = tmp_path / "w.json"
    assert suite_weights.main([str(tmp_path / "r1.xml"), str(tmp_path / "r2.xml"), "--out", str(out)]) == 0
    assert json.loads(out.read_text()) == {"tests/test_b.py": 20.0, "tests/test_a.py": 6.0}
    (tmp_path / "bad.xml").write_text("not xml")
    assert suite_weights.main([str(tmp_path / "bad.xml"), "--out", str(out)]) == 2
    assert "bad.xml" in capsys.readouterr().err
    assert json.loads(out.read_text()) == {"tests/test_b.py": 20.0, "tests/test_a.py": 6.0}  # unchanged


def test_the_committed_weights_name_test_files_that_exist_heaviest_first():
    table = json.loads(suite_weights.WEIGHTS.read_text())
    assert table and all((ROOT / name).is_file() and name.startswith("tests/") and Path(name).name.startswith("test_") for name in table)
    assert list(table.values()) == sorted(table.values(), reverse=True)
    assert all(s >= suite_weights.MIN_SECONDS for s in table.values())


@pytest.mark.stack
def test_the_suite_collects_the_heaviest_file_first():
    table = json.loads(suite_weights.WEIGHTS.read_text())
    heavy, lighter = list(table)[0], list(table)[-1]
    light = "tests/tools/test_suite_weights.py"  # not weighed: after every weighed file
    assert light not in table
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          light, lighter, heavy], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    files = list(dict.fromkeys(line.split("::")[0] for line in out.splitlines() if "::" in line))
    assert files == [heavy, lighter, light]
