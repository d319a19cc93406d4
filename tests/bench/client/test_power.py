"""bench.client.power: energy over an interval through NVML, with a fake `pynvml` put in sys.modules.

The fake answers as nvidia-ml-py does: handles from nvmlDeviceGetHandleByIndex, millijoules and milliwatts,
NVMLError_NotSupported (a subclass of NVMLError) for what a GPU does not report.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import types
from collections.abc import Callable

import pytest

from bench.client import power
from bench.client.power import EnergyReading, GpuPower, PowerSampler


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):  # noqa: N801  the name nvidia-ml-py gives it
    pass


class FakeGpu:
    """One GPU: `energy(k)` mJ and `power(k)` mW at its k-th read (None: NotSupported), its limits in mW."""

    def __init__(self, energy: Callable[[int], int] | None = None, power: Callable[[int], int] | None = None,
                 limits: dict[str, object] | None = None):
        self.energy, self.power, self.limits = energy, power, limits or {}
        self.energy_reads = self.power_reads = 0
        self.threads: set[int] = set()


def fake_pynvml(gpus: list[FakeGpu], init_error: Exception | None = None) -> types.ModuleType:
    lib = types.ModuleType("pynvml")
    lib.NVMLError, lib.NVMLError_NotSupported = NVMLError, NVMLError_NotSupported
    lib.shutdowns = 0

    def init() -> None:
        if init_error is not None:
            raise init_error

    def shutdown() -> None:
        lib.shutdowns += 1

    def energy(g: FakeGpu) -> int:
        g.threads.add(threading.get_ident())
        if g.energy is None:
            raise NVMLError_NotSupported("Not Supported")
        g.energy_reads += 1
        return g.energy(g.energy_reads - 1)

    def power_usage(g: FakeGpu) -> int:
        g.threads.add(threading.get_ident())
        g.power_reads += 1
        return g.power(g.power_reads - 1)

    def limit(name: str) -> Callable[[FakeGpu], object]:
        def ask(g: FakeGpu) -> object:
            value = g.limits.get(name)
            if value is None:
                raise NVMLError_NotSupported("Not Supported")
            return value
        return ask

    lib.nvmlInit, lib.nvmlShutdown = init, shutdown
    lib.nvmlDeviceGetCount = lambda: len(gpus)
    lib.nvmlDeviceGetHandleByIndex = lambda i: gpus[i]
    lib.nvmlDeviceGetTotalEnergyConsumption = energy
    lib.nvmlDeviceGetPowerUsage = power_usage
    for name in ("Limit", "DefaultLimit", "LimitConstraints"):
        setattr(lib, f"nvmlDeviceGetPowerManagement{name}", limit(name))
    return lib


def install(monkeypatch, gpus: list[FakeGpu], init_error: Exception | None = None) -> types.ModuleType:
    lib = fake_pynvml(gpus, init_error)
    monkeypatch.setitem(sys.modules, "pynvml", lib)
    return lib


def steps(dt: float) -> Callable[[], float]:
    """A monotonic clock that moves `dt` seconds at each read."""
    now = [-dt]

    def clock() -> float:
        now[0] += dt
        return now[0]

    return clock


# --- opening NVML: a handle or the reason -------------------------------------------------------


def test_without_nvidia_ml_py_the_reason_is_that_it_is_not_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    assert power.open_nvml() == "nvidia-ml-py is not installed"


def test_nvml_that_does_not_initialise_gives_its_error(monkeypatch):
    install(monkeypatch, [FakeGpu()], init_error=NVMLError("Driver Not Loaded"))
    assert power.open_nvml() == "NVML did not initialise: Driver Not Loaded"


def test_no_gpu_is_a_reason_and_shuts_nvml_down(monkeypatch):
    lib = install(monkeypatch, [])
    assert power.open_nvml() == "no GPU"
    assert lib.shutdowns == 1


def test_a_handle_over_every_gpu(monkeypatch):
    gpus = [FakeGpu(), FakeGpu()]
    install(monkeypatch, gpus)
    nvml = power.open_nvml()
    assert isinstance(nvml, power.Nvml) and nvml.gpu_count == 2 and list(nvml.handles) == gpus


# --- energy over an interval --------------------------------------------------------------------


def _measure(monkeypatch, gpus: list[FakeGpu], clock: Callable[[], float], body_until: Callable[[], bool],
             interval_s: float = 0.001) -> EnergyReading | str:
    install(monkeypatch, gpus)
    nvml = power.open_nvml()
    assert isinstance(nvml, power.Nvml)

    async def run() -> EnergyReading | str:
        async with PowerSampler(nvml, interval_s=interval_s, clock=clock) as s:
            while not body_until():
                await asyncio.sleep(0.001)
        return s.reading()

    return asyncio.run(run())


def test_the_energy_counter_is_read_at_start_and_end(monkeypatch):
    gpus = [FakeGpu(energy=lambda k: 1_000_000 + 1_500_000 * k), FakeGpu(energy=lambda k: 7_000 + 500_000 * k)]
    r = _measure(monkeypatch, gpus, steps(2.0), lambda: True)
    assert r == EnergyReading(method="energy-counter", seconds=2.0, gpu_joules=[1500.0, 500.0], total_joules=2000.0,
                              average_watts=1000.0, samples=2, gpu_count=2)
    assert [g.energy_reads for g in gpus] == [2, 2] and [g.power_reads for g in gpus] == [0, 0]
    assert threading.get_ident() not in gpus[0].threads  # NVML ran in a worker thread, never on the loop


def test_without_the_energy_counter_power_samples_are_integrated_by_the_trapezoid_rule(monkeypatch):
    """GPU 0 ramps 100 W + 50 W/s; GPU 1 alternates 100 and 300 W every 0.25 s. Straight lines between
    samples give both exactly, however many samples the interval held: 100 T + 25 T^2 and 200 T joules
    (the left-point rule would give 100 T + 25 T^2 - 3.125 T and, with an odd count, less than 200 T)."""
    gpus = [FakeGpu(power=lambda k: 100_000 + 12_500 * k), FakeGpu(power=lambda k: (100_000, 300_000)[k % 2])]
    gpus.insert(1, FakeGpu(power=lambda k: 0))  # a GPU drawing nothing counts, as 0 J
    r = _measure(monkeypatch, gpus, steps(0.25), lambda: gpus[0].power_reads >= 4)
    assert isinstance(r, EnergyReading), r
    n = gpus[0].power_reads
    assert n >= 5 and r.samples == n  # start, at least three periodic samples, end
    t = 0.25 * (n - 1)
    assert r.method == "power-samples" and r.seconds == t and r.gpu_count == 3
    assert r.gpu_joules == [100 * t + 25 * t * t, 0.0, 200 * t]
    assert r.total_joules == sum(r.gpu_joules) and r.average_watts == r.total_joules / t
    assert threading.get_ident() not in gpus[0].threads


def test_trapezoid_of_a_known_trace():
    assert power.trapezoid([0.0, 1.0, 2.0, 4.0], [100.0, 200.0, 100.0, 300.0]) == 150 + 150 + 400
    assert power.trapezoid([5.0], [100.0]) == 0
    with pytest.raises(ValueError, match="2 times for 3 power samples"):
        power.trapezoid([0.0, 1.0], [1.0, 2.0, 3.0])


def test_nvml_failing_during_the_interval_is_a_reason_not_a_crash(monkeypatch):
    def dies(k: int) -> int:
        if k >= 2:
            raise NVMLError("GPU is lost")
        return 100_000

    gpus = [FakeGpu(power=dies)]
    r = _measure(monkeypatch, gpus, steps(0.25), lambda: gpus[0].power_reads >= 3)
    assert r == "NVML stopped answering: GPU is lost"


def test_an_energy_counter_that_went_backwards_is_a_reason(monkeypatch):
    gpus = [FakeGpu(energy=lambda k: 5_000_000 - 1_000 * k)]
    assert _measure(monkeypatch, gpus, steps(1.0), lambda: True) == (
        "the energy counter went backwards (the driver reloaded during the interval)")


def test_no_reading_before_the_interval_ends(monkeypatch):
    install(monkeypatch, [FakeGpu(energy=lambda k: k)])
    nvml = power.open_nvml()
    assert PowerSampler(nvml).reading() == "no reading: the interval has not ended"


# --- per output token ---------------------------------------------------------------------------


def test_joules_per_output_token_and_tokens_per_joule():
    r = EnergyReading(method="energy-counter", seconds=10.0, gpu_joules=[300.0, 200.0], total_joules=500.0,
                      average_watts=50.0, samples=2, gpu_count=2)
    assert power.per_token(r, 250) == 2.0
    assert power.tokens_per_joule(r, 250) == 0.5
    assert power.per_token(r, 0) is None
    assert power.tokens_per_joule(r.model_copy(update={"total_joules": 0.0}), 250) is None
    with pytest.raises(Exception, match="frozen"):
        r.seconds = 1.0  # type: ignore[misc]


# --- power limits -------------------------------------------------------------------------------


def test_power_limits_in_watts_with_what_a_gpu_does_not_report_as_none(monkeypatch):
    full = {"Limit": 450_000, "DefaultLimit": 600_000, "LimitConstraints": [150_000, 600_000]}
    install(monkeypatch, [FakeGpu(limits=full), FakeGpu(limits={"Limit": 300_000})])
    nvml = power.open_nvml()
    assert power.power_limits(nvml) == [
        GpuPower(index=0, limit_w=450.0, default_limit_w=600.0, min_limit_w=150.0, max_limit_w=600.0),
        GpuPower(index=1, limit_w=300.0, default_limit_w=None, min_limit_w=None, max_limit_w=None),
    ]


def test_a_method_set_beforehand_is_forced(monkeypatch):
    gpus = [FakeGpu(energy=lambda k: 1_000_000 * k, power=lambda k: 200_000)]
    install(monkeypatch, gpus)
    nvml = power.open_nvml()

    async def run(method: power.Method) -> EnergyReading | str:
        async with PowerSampler(nvml, interval_s=3600, clock=steps(0.5), method=method) as s:
            pass
        return s.reading()

    r = asyncio.run(run("power-samples"))
    assert isinstance(r, EnergyReading) and (r.method, r.samples, r.gpu_joules) == ("power-samples", 2, [100.0])
    assert gpus[0].energy_reads == 0
    install(monkeypatch, [FakeGpu(power=lambda k: 200_000)])
    nvml = power.open_nvml()
    assert asyncio.run(run("energy-counter")) == "the energy counter is not supported on these GPUs (NotSupported)"
