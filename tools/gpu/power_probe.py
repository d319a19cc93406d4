"""Check bench/client/power.py on a GPU host: NVML's power limits, then 2 s of energy by each method.

Run from the repository root with it on the path: `PYTHONPATH=. python tools/gpu/power_probe.py`
(needs `nvidia-ml-py`: `pip install 'nvidia-ml-py>=12.535,<14'`, or run it in the bench image).

Prints one JSON object: `nvml` (ok, or the reason NVML cannot measure here), `limits` (per GPU, watts),
`call_us` (the median time of one nvmlDeviceGetPowerUsage and one nvmlDeviceGetTotalEnergyConsumption
call, microseconds: what keeps them off the event loop), and `energy-counter` / `power-samples`: the reading
of each method over the same 2 s (or why that method gave none). The two should agree within a few percent.
Exit: 0 with a reading, 1 when NVML cannot measure here.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, when run from anywhere

from bench.client import power  # noqa: E402


def _call_us(fn: Any, handle: Any, n: int = 50) -> float | None:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        try:
            fn(handle)
        except Exception:  # NotSupported on this GPU
            return None
        times.append((time.perf_counter() - t0) * 1e6)
    return round(statistics.median(times), 1)


async def _both(nvml: power.Nvml, seconds: float, interval_s: float) -> dict[str, Any]:
    """Both methods around the same sleep: the counter read outside, the samples inside."""
    counter = power.PowerSampler(nvml, method="energy-counter")
    samples = power.PowerSampler(nvml, interval_s=interval_s, method="power-samples")
    async with counter, samples:
        await asyncio.sleep(seconds)
    out = {}
    for s in (counter, samples):
        r = s.reading()
        out[s.method or "?"] = r.model_dump() if isinstance(r, power.EnergyReading) else {"none": r}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--interval-s", type=float, default=0.1)
    args = p.parse_args(argv)
    nvml = power.open_nvml()
    if isinstance(nvml, str):
        print(json.dumps({"nvml": nvml}))
        return 1
    try:
        h = nvml.handles[0]
        report: dict[str, Any] = {
            "nvml": "ok",
            "gpu_count": nvml.gpu_count,
            "limits": [g.model_dump() for g in power.power_limits(nvml)],
            "call_us": {
                "nvmlDeviceGetPowerUsage": _call_us(nvml.lib.nvmlDeviceGetPowerUsage, h),
                "nvmlDeviceGetTotalEnergyConsumption": _call_us(nvml.lib.nvmlDeviceGetTotalEnergyConsumption, h),
            },
        }
        report.update(asyncio.run(_both(nvml, args.seconds, args.interval_s)))
    finally:
        nvml.close()
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
