"""GPU energy over an interval, and GPU power limits, through NVML (`import pynvml`, from the `nvidia-ml-py`
package: the bench image's `energy` extra). Without it the bench runs as before: `open_nvml` returns the
reason instead of a handle, and never raises.

Energy of every GPU NVML sees, two ways, the first that works:

* `energy-counter`: `nvmlDeviceGetTotalEnergyConsumption` (millijoules since the driver loaded; Volta and
  newer) read at the start and at the end of the interval; the difference is the energy.
* `power-samples`: where a GPU's counter answers NotSupported, `nvmlDeviceGetPowerUsage` (milliwatts) is
  sampled at the start, every `interval_s` and at the end, and integrated with the trapezoid rule.

NVML calls take microseconds to about a millisecond each (a driver query per GPU), so none runs on the event
loop: each round of reads (every GPU once) runs in a worker thread through `asyncio.to_thread`, and the
periodic sampler is an asyncio task that waits `interval_s` between rounds. The loop only pays the thread
hand-off per round. Timestamps are `time.monotonic()`, taken in the thread right after the round.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

Method = Literal["energy-counter", "power-samples"]
NOT_INSTALLED = "nvidia-ml-py is not installed"
NO_GPU = "no GPU"


class EnergyReading(BaseModel):
    """The energy of every GPU over one interval. `samples`: reads per GPU (2 for the energy counter: start
    and end; start, every interval and end for power samples)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: Method
    seconds: float
    gpu_joules: list[float]  # per GPU, in NVML index order
    total_joules: float
    average_watts: float  # all GPUs together: total_joules / seconds
    samples: int
    gpu_count: int


class GpuPower(BaseModel):
    """One GPU's power limits in watts; None where NVML does not report one (NotSupported, no permission)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    index: int
    limit_w: float | None
    default_limit_w: float | None
    min_limit_w: float | None
    max_limit_w: float | None


@dataclass(frozen=True)
class Nvml:
    """An initialised NVML and a handle for every GPU it sees (at least one)."""

    lib: ModuleType
    handles: tuple[Any, ...]

    @property
    def gpu_count(self) -> int:
        return len(self.handles)

    def energy_mj(self) -> list[int] | None:
        """Each GPU's energy counter; None when any GPU's answers NotSupported."""
        try:
            return [int(self.lib.nvmlDeviceGetTotalEnergyConsumption(h)) for h in self.handles]
        except self.lib.NVMLError_NotSupported:
            return None

    def power_mw(self) -> list[int]:
        return [int(self.lib.nvmlDeviceGetPowerUsage(h)) for h in self.handles]

    def close(self) -> None:
        try:
            self.lib.nvmlShutdown()
        except Exception:  # shutting down is best effort
            pass


def open_nvml() -> Nvml | str:
    """A handle over every GPU, or why energy cannot be measured here. Never raises."""
    try:
        import pynvml
    except ImportError:
        return NOT_INSTALLED
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError (no driver, no library), or an OSError loading it
        return f"NVML did not initialise: {exc}"
    try:
        handles = tuple(pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount()))
    except Exception as exc:  # a GPU that fell off the bus, no permission on its device
        Nvml(pynvml, ()).close()
        return f"NVML did not initialise: {exc}"
    if not handles:
        Nvml(pynvml, ()).close()
        return NO_GPU
    return Nvml(pynvml, handles)


def status(nvml: Nvml | str | None) -> dict[str, object]:
    """What a bundle's manifest records of energy: measured over how many GPUs, or why not."""
    if isinstance(nvml, Nvml):
        return {"measured": True, "gpus": nvml.gpu_count, "reason": None}
    return {"measured": False, "gpus": None, "reason": nvml or "this command does not measure energy"}


def trapezoid(times: Sequence[float], watts: Sequence[float]) -> float:
    """Joules under a power trace (seconds, watts), straight lines between the samples."""
    if len(times) != len(watts):
        raise ValueError(f"{len(times)} times for {len(watts)} power samples")
    pairs = zip(zip(times, watts, strict=True), zip(times[1:], watts[1:], strict=True), strict=False)
    return sum((t1 - t0) * (w0 + w1) / 2 for (t0, w0), (t1, w1) in pairs)


def _reading(method: Method, seconds: float, joules: list[float], samples: int) -> EnergyReading:
    total = sum(joules)
    return EnergyReading(method=method, seconds=seconds, gpu_joules=joules, total_joules=total,
                         average_watts=total / seconds if seconds > 0 else 0.0, samples=samples, gpu_count=len(joules))


@dataclass
class PowerSampler:
    """`async with PowerSampler(nvml) as s: ...` then `s.reading()`: the energy of every GPU over the block.
    `method`: None picks the energy counter where every GPU has one, else power samples; set, it forces one.
    `clock` (seconds, monotonic) is replaceable for tests."""

    nvml: Nvml
    interval_s: float = 0.1
    clock: Callable[[], float] = time.monotonic
    method: Method | None = None
    _times: list[float] = field(default_factory=list)
    _energy: list[list[int]] = field(default_factory=list)  # energy-counter: start and end, mJ per GPU
    _power: list[list[int]] = field(default_factory=list)  # power-samples: one row of mW per GPU per sample
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task | None = None
    _problem: str | None = None

    def _counter(self) -> tuple[float, list[int] | None]:
        energy = self.nvml.energy_mj()
        return self.clock(), energy

    def _sample(self) -> tuple[float, list[int]]:
        power = self.nvml.power_mw()
        return self.clock(), power

    async def _take(self) -> None:
        try:
            t, power = await asyncio.to_thread(self._sample)
        except self.nvml.lib.NVMLError as exc:
            self._problem = self._problem or f"NVML stopped answering: {exc}"
            return
        self._times.append(t)
        self._power.append(power)

    async def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                await asyncio.wait_for(self._stop.wait(), self.interval_s)
            except TimeoutError:
                await self._take()

    async def __aenter__(self) -> PowerSampler:
        energy = None
        if self.method != "power-samples":  # `method` set beforehand forces one (tools/gpu/power_probe.py)
            try:
                t, energy = await asyncio.to_thread(self._counter)
            except self.nvml.lib.NVMLError as exc:
                self._problem = f"NVML stopped answering: {exc}"
                return self
            if energy is None and self.method == "energy-counter":
                self._problem = "the energy counter is not supported on these GPUs (NotSupported)"
                return self
        if energy is not None:
            self.method = "energy-counter"
            self._times.append(t)
            self._energy.append(energy)
            return self
        self.method = "power-samples"
        await self._take()
        self._task = asyncio.create_task(self._loop())
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._problem and self._task is None:
            return
        if self._task is not None:
            self._stop.set()
            await self._task  # ends after the read in flight, if any: no sample is lost or taken twice
            await self._take()
        elif self.method == "energy-counter":
            try:
                t, energy = await asyncio.to_thread(self._counter)
            except self.nvml.lib.NVMLError as exc:
                self._problem = f"NVML stopped answering: {exc}"
                return
            if energy is None:
                self._problem = "the energy counter stopped answering (NotSupported)"
                return
            self._times.append(t)
            self._energy.append(energy)

    def reading(self) -> EnergyReading | str:
        """The energy over the block, or why there is none (NVML failed during it)."""
        if self._problem:
            return self._problem
        if self.method == "energy-counter" and len(self._energy) == 2:
            (start, end), seconds = self._energy, self._times[1] - self._times[0]
            if any(b < a for a, b in zip(start, end, strict=True)):
                return "the energy counter went backwards (the driver reloaded during the interval)"
            return _reading("energy-counter", seconds, [(b - a) / 1000 for a, b in zip(start, end, strict=True)], 2)
        if self.method == "power-samples" and len(self._power) >= 2:
            per_gpu = zip(*self._power, strict=True)
            joules = [trapezoid(self._times, [mw / 1000 for mw in trace]) for trace in per_gpu]
            return _reading("power-samples", self._times[-1] - self._times[0], joules, len(self._power))
        return "no reading: the interval has not ended"


def per_token(reading: EnergyReading, output_tokens: int) -> float | None:
    """Joules per output token (all GPUs together); None without output tokens."""
    return reading.total_joules / output_tokens if output_tokens > 0 else None


def tokens_per_joule(reading: EnergyReading, output_tokens: int) -> float | None:
    """Output tokens per joule; None when no energy was measured."""
    return output_tokens / reading.total_joules if reading.total_joules > 0 else None


def _ask(lib: ModuleType, name: str, handle: Any) -> Any:
    """`lib.<name>(handle)`, or None where NVML does not say (NotSupported, NoPermission): never a failure."""
    try:
        return getattr(lib, name)(handle)
    except lib.NVMLError:
        return None


def _w(milliwatts: Any) -> float | None:
    return None if milliwatts is None else milliwatts / 1000


def power_limits(nvml: Nvml) -> list[GpuPower]:
    """Each GPU's current, default and allowed power limit (nvmlDeviceGetPowerManagementLimit,
    ...DefaultLimit, ...LimitConstraints; NVML answers milliwatts)."""
    out = []
    for i, h in enumerate(nvml.handles):
        low, high = _ask(nvml.lib, "nvmlDeviceGetPowerManagementLimitConstraints", h) or (None, None)
        out.append(GpuPower(
            index=i,
            limit_w=_w(_ask(nvml.lib, "nvmlDeviceGetPowerManagementLimit", h)),
            default_limit_w=_w(_ask(nvml.lib, "nvmlDeviceGetPowerManagementDefaultLimit", h)),
            min_limit_w=_w(low),
            max_limit_w=_w(high),
        ))
    return out
