"""Everything that decides what `bench tune` measures and how it ends (`TuneSettings`), and the knobs
that reach it from the command line as they are (`TuneKnobs`): one name and one default on both sides.
bench/tune/cli.py checks the flags and builds it; tune.json records it (`to_json`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from bench.run.settings import RunKnobs, RunSettings
from bench.tune import decision, schedule, space
from bench.tune.decision import Objective
from launcher.profiles.spec_params import SpecParams

DEFAULT_OUT = "results/tune"
DEFAULT_SPECS = "off,ngram,eagle3"
DEFAULT_BUDGET = "2h"
PROFILE_NAME = "tuned"


@dataclass(kw_only=True)
class TuneKnobs:
    """The flags that reach the settings as they are: one name and one default on both sides."""

    apply: bool = False
    fresh: bool = False
    fleet: str | None = None
    profile_name: str = PROFILE_NAME
    profile_dir: str | None = None
    facts: str | None = None
    allreduce: str | None = None
    num_prompts: int = 8
    max_tokens: int = RunKnobs.max_tokens
    workload: str = RunKnobs.workload  # or "file:PATH", the --prompts file (bench/client/workload.py)
    prompts: str | None = None  # --prompts FILE as given
    temperature: float = RunKnobs.temperature  # the timed requests'; the correctness pass is always greedy
    api: str = RunKnobs.api
    warmup: int = RunKnobs.warmup
    seed: int = RunKnobs.seed
    switch_timeout: float = RunKnobs.switch_timeout
    health_timeout: float = RunKnobs.health_timeout
    screen_repeats: int = 2
    final_repeats: int = decision.FINAL_REPEATS
    final_blocks: int = schedule.DEFAULT_BLOCKS
    finalists: int = 2
    adaptive: bool = False  # --adaptive: write SGLang's adaptive config from each level's winner (bench/tune/adaptive.py)


@dataclass(kw_only=True)
class TuneSettings(TuneKnobs):
    """What the tune measures and decides on; `measuring()` is what makes repeats comparable (the journal
    keys reused cells on it)."""

    url: str
    control: str
    out: str
    profiles: tuple[str, ...] | str  # names, or "eligible"
    specs: tuple[str, ...]
    points: tuple[SpecParams, ...]
    budget_s: float
    concurrency: list[int]
    objective: Objective
    connect_timeout: float = RunKnobs.connect_timeout
    read_timeout: float = RunKnobs.read_timeout
    request_timeout: float = RunKnobs.request_timeout
    prompts_sha256: str | None = None  # sha256 of the --prompts file's bytes
    argv: list[str] = field(default_factory=list)

    def reference_specs(self) -> tuple[str, ...]:
        """The spec modes a reference cell (baseline+<spec>) is measured for: --spec's, and eagle3-adaptive's under
        --adaptive (its candidate is gated against baseline under the same mode)."""
        return (*self.specs, space.ADAPTIVE_SPEC) if self.adaptive else self.specs

    def measuring(self) -> dict[str, Any]:
        """The settings a repeat's numbers depend on (not the budget, not the space, not where results go).

        A --prompts file counts by its content (sha256), not its path: another file, or the same one edited,
        measures afresh; the same bytes elsewhere reuse the cells. The temperature and the file enter only
        when given, so a tune with neither keeps the digest it had before they existed."""
        out = {
            "url": self.url, "num_prompts": self.num_prompts, "max_tokens": self.max_tokens,
            "workload": "file" if self.prompts_sha256 else self.workload, "api": self.api, "warmup": self.warmup,
            "seed": self.seed, "concurrency": self.concurrency, "objective": asdict(self.objective),
        }
        if not self.objective.levels:  # a tune without --adaptive keeps the digest it had before it existed
            out["objective"].pop("levels")
        if self.prompts_sha256:
            out["prompts_sha256"] = self.prompts_sha256
        if self.temperature != 0:
            out["temperature"] = self.temperature
        return out

    def run_settings(self, *, switching: bool = True) -> RunSettings:
        """The `bench run` settings one cell is measured with (bench/run/measure.py)."""
        return RunSettings(
            url=self.url, out=self.out, control=self.control, control_given=True, concurrency=list(self.concurrency),
            repeats=self.screen_repeats, num_prompts=self.num_prompts, max_tokens=self.max_tokens,
            workload=self.workload, api=self.api, warmup=self.warmup, no_switch=not switching, seed=self.seed,
            prompts=self.prompts, prompts_sha256=self.prompts_sha256, temperature=self.temperature,
            switch_timeout=self.switch_timeout,
            health_timeout=self.health_timeout, connect_timeout=self.connect_timeout,
            read_timeout=self.read_timeout, request_timeout=self.request_timeout, argv=list(self.argv),
        )

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["points"] = [p.text() for p in self.points]
        out["profiles"] = self.profiles if isinstance(self.profiles, str) else list(self.profiles)
        return out
