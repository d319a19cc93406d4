"""Everything that decides what `bench run` measures; stored verbatim in the bundle's manifest."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar


@dataclass(kw_only=True)
class RunKnobs:
    """How each cell is measured: the same names and defaults on the command line (RunArgs) and in the
    manifest (RunSettings)."""

    repeats: int = 3
    num_prompts: int = 16
    max_tokens: int = 256
    workload: str = "chat"  # or "file:PATH", the --prompts file (bench/client/workload.py)
    prompts: str | None = None  # --prompts FILE as given
    temperature: float = 0.0  # the timed requests' sampling temperature; the correctness pass is always greedy
    api: str = "generate"
    ignore_eos: bool = False
    warmup: int = 2
    no_switch: bool = False
    connect_timeout: float = 5.0
    switch_timeout: float = 1800.0
    health_timeout: float = 600.0
    read_timeout: float = 600.0  # silence before a request is given up
    request_timeout: float = 1800.0  # one whole request
    seed: int = 1234


@dataclass(kw_only=True)
class RunSettings(RunKnobs):
    """`profiles` and `specs` are what the user asked for (None: not given); the server resolves them.
    `eagle3`: the `--eagle3` points, each {"steps", "topk", "draft_tokens"}, measured as extra cells."""

    DEFAULT_PROFILES: ClassVar[str] = "stable"
    DEFAULT_SPECS: ClassVar[str] = "eagle3,off"

    url: str
    out: str
    profiles: str | None = None
    specs: str | None = None
    eagle3: list[dict[str, int]] | None = None
    control: str | None = None
    control_given: bool = False  # --control or KIT_CONTROL_URL: an unreachable one is then an error
    concurrency: list[int] = field(default_factory=lambda: [1])
    fleet_host: str | None = None  # `bench run --fleet`: the fleet file's name of the host measured
    leave_on: str | None = None  # `--leave-on CELL`: the measured cell production is left on, if it passed the gate
    prompts_sha256: str | None = None  # sha256 of the --prompts file's bytes
    argv: list[str] = field(default_factory=list)

    @property
    def switching(self) -> bool:
        return not self.no_switch

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
