"""tools/gpu/power_probe.py without a GPU: it says why NVML cannot measure, as JSON, and exits 1."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
TOOL = REPO / "tools" / "gpu" / "power_probe.py"
spec = importlib.util.spec_from_file_location("power_probe", TOOL)
probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)


def test_without_nvidia_ml_py_it_prints_the_reason_and_exits_1(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert probe.main([]) == 1
    assert json.loads(capsys.readouterr().out) == {"nvml": "nvidia-ml-py is not installed"}
