"""`make demo-real` (testsupport/real/demo.py): up, switch, bench and report on real SGLang 0.5.23, labelled."""

from __future__ import annotations

import json
import subprocess
import sys

from testsupport.real.demo import LABEL, PROFILES
from testsupport.stack import REPO


def test_demo_real_switches_benches_and_reports_every_line_labelled(tmp_path):
    r = subprocess.run([sys.executable, "-m", "testsupport.real.demo", "--out", str(tmp_path / "out")],
                       cwd=REPO, capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    ours = [line for line in r.stdout.splitlines() if line.startswith("[")]
    assert ours and all(line.startswith(f"[{LABEL}]") for line in ours), ours
    assert "timings mean nothing about a GPU host" in LABEL
    assert any("switched in" in line for line in ours) and any("report:" in line for line in ours)
    [run_dir] = [p for p in (tmp_path / "out").iterdir() if p.is_dir()]
    assert json.loads((run_dir / "manifest.json").read_text())["simulated"] is False
    for profile in PROFILES:
        cell = json.loads((run_dir / f"{profile}__off.json").read_text())
        assert cell["valid"] is True and cell["switch"]["outcome"] in ("switched", "unchanged"), cell
    assert (run_dir / "summary.md").is_file()
