"""The control API's bodies, one model each: built by the server (lifecycle.py, control_api.py) and parsed by
the client (control_client.py), so `launcher status/switch`, the fleet and the bench read the same fields.

On the wire every body keeps the keys it always had. What a reader does not know (a key a newer server added)
is ignored; a history entry that is not an entry's shape is left out and counted in `history_skipped`.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_serializer, field_validator

from launcher.profiles.adaptive_tiers import ApiTiers
from launcher.profiles.plan import Plan
from launcher.profiles.spec_params import SpecParams
from launcher.runtime.api import tune_hold
from launcher.runtime.core.states import SWITCH_TIMEOUT_MAX_S as TIMEOUT_MAX
from launcher.runtime.core.states import Outcome, Phase, State
from launcher.runtime.records.history import Entry

JSON = dict[str, Any]  # a JSON object as it came over the wire


# ----- requests ------------------------------------------------------------------------------------
class SwitchRequest(BaseModel):
    """POST /switch body. timeout_s: a finite number of seconds in (0, SWITCH_TIMEOUT_MAX_S];
    spec_params: an EAGLE-3 point {"steps", "topk", "draft_tokens"} (whole numbers >= 1, nothing else)."""

    model_config = ConfigDict(extra="forbid")
    profile: Annotated[str, Field(strict=True)]
    spec: Annotated[str | None, Field(strict=True)] = None
    timeout_s: Annotated[float | None, Field(strict=True, gt=0, le=TIMEOUT_MAX, allow_inf_nan=False)] = None
    spec_params: SpecParams | None = None
    adaptive_tiers: ApiTiers = None  # {"B": [steps]}: launcher/profiles/adaptive_tiers.py, its one parser

    def to_json(self) -> JSON:
        """The body as the client sends it: spec_params and adaptive_tiers only when given."""
        return {"profile": self.profile, "spec": self.spec, "timeout_s": self.timeout_s} | _point(self)


class CheckRequest(BaseModel):
    """POST /check body: the plan a switch would run, without timeout_s (nothing runs)."""

    model_config = ConfigDict(extra="forbid")
    profile: Annotated[str, Field(strict=True)]
    spec: Annotated[str | None, Field(strict=True)] = None
    spec_params: SpecParams | None = None
    adaptive_tiers: ApiTiers = None

    def to_json(self) -> JSON:
        return {"profile": self.profile, "spec": self.spec} | _point(self)


def _point(req: SwitchRequest | CheckRequest) -> JSON:
    out: JSON = {}
    if req.spec_params is not None:
        out["spec_params"] = req.spec_params.model_dump()
    if req.adaptive_tiers is not None:
        out["adaptive_tiers"] = req.adaptive_tiers.to_json()
    return out


def problem(exc: ValidationError) -> str:
    """The first problem of a body, as a refusal names it: `where: message`."""
    err = exc.errors()[0]
    return f"{'.'.join(str(x) for x in err['loc']) or 'body'}: {err['msg']}"


class HoldRequest(BaseModel):
    """POST /hold body: take the tune hold (no id) or renew it (the id it was granted under)."""

    model_config = ConfigDict(extra="forbid")
    holder: Annotated[str, Field(strict=True, min_length=1, max_length=tune_hold.HOLDER_MAX)]
    ttl_s: Annotated[float, Field(strict=True, ge=tune_hold.TTL_MIN_S, le=tune_hold.TTL_MAX_S, allow_inf_nan=False)]
    id: Annotated[str | None, Field(strict=True, max_length=tune_hold.ID_MAX)] = None
    host: Annotated[str | None, Field(strict=True, max_length=tune_hold.HOST_MAX)] = None
    pid: tune_hold.Pid | None = None  # 1..PID_MAX: a pid the kernel can give
    take_over_pid: tune_hold.Pid | None = None  # the holder's pid, gone on `host`


class ReleaseRequest(BaseModel):
    """DELETE /hold body."""

    model_config = ConfigDict(extra="forbid")
    id: Annotated[str, Field(strict=True, max_length=64)]


# ----- GET /status ---------------------------------------------------------------------------------
class RetryView(BaseModel):
    """The automatic restart after supervisord gave up: attempts made, when the next is due."""

    attempts: int = 0
    next_at: float | None = None


class StateEvent(BaseModel):
    """One move of the server's state (transitions.Move), newest last in /status `events`."""

    model_config = ConfigDict(populate_by_name=True)
    at: float
    from_: State = Field(alias="from")
    to: State
    why: str


class ServerStatus(BaseModel):
    """GET /status (and the `status` of a /switch answer)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    profile: str | None = None
    spec: str | None = None
    spec_params: SpecParams | None = None  # the running EAGLE point; None for off/ngram, or before any plan
    digest: str | None = None
    state: State | None = None
    phase: Phase | None = None
    since: float | None = None
    since_iso: str | None = None
    health: str = "unknown"
    health_age_s: float | None = None
    restarts: int = 0
    retry: RetryView = Field(default_factory=RetryView)
    pid: int = 0
    server_url: str | None = None
    last_error: str | None = None
    patch_check: str | None = None
    backends: list[JSON] = []  # activation.assess: one verdict per expected backend
    decode_allreduce: JSON | None = None  # {"backend", "why"}
    spec_adaptive: JSON | None = None  # activation.adaptive_state
    history: list[Entry] = []  # history.jsonl's last entries, oldest first
    history_skipped: int = 0
    switches: JSON | None = None  # {"outcomes": {outcome: n}, "history_truncated"}; None while unknown
    build: dict[str, str] | None = None
    tune_hold: JSON | None = None  # tune_hold.Hold.view; None when nobody holds it
    events: list[StateEvent] = []  # the last moves of the state, newest last (transitions.EVENTS_KEPT)

    @field_validator("history", mode="before")
    @classmethod
    def _entries(cls, value: object) -> object:
        """Entries that are not an entry's shape are left out (counted in history_skipped by the caller)."""
        if not isinstance(value, list):
            return []
        out = []
        for item in value:
            try:
                out.append(item if isinstance(item, Entry) else Entry.model_validate(item))
            except ValidationError:
                continue
        return out

    @field_validator("events", mode="before")
    @classmethod
    def _events(cls, value: object) -> object:
        """A server without events, or one whose events do not read, shows none rather than failing the status."""
        if not isinstance(value, list):
            return []
        out = []
        for item in value:
            try:
                out.append(item if isinstance(item, StateEvent) else StateEvent.model_validate(item))
            except ValidationError:
                continue
        return out

    @field_serializer("history")
    def _history_json(self, history: list[Entry]) -> list[JSON]:
        return [e.to_json() for e in history]

    def to_json(self) -> JSON:
        return self.model_dump(mode="json", by_alias=True)

    @property
    def busy(self) -> bool:
        """A switch holds the server, or a recovery of one cut short."""
        return self.state in (State.SWITCHING, State.RECOVERING)


# ----- GET /plan, POST /check ----------------------------------------------------------------------
class PlanAnswer(BaseModel):
    """GET /plan: the running plan (name, spec, digest, env, argv, flags), None before the first render."""

    plan: Plan | None = None

    def to_json(self) -> JSON:
        return {"plan": self.plan.to_json() if self.plan else None}


class Answer(BaseModel):
    """A POST or DELETE answer: the HTTP status (0: none came) and the error it names, if any."""

    model_config = ConfigDict(extra="ignore")
    code: int = 0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.code == 200

    @classmethod
    def of(cls, code: int, body: object):
        """The answer from an HTTP status and its parsed JSON body; a body not of the model's shape keeps
        only its error."""
        data = body if isinstance(body, dict) else {"error": str(body)}
        try:
            return cls.model_validate({**data, "code": code})
        except ValidationError:
            error = data.get("error")
            return cls(code=code, error=error if isinstance(error, str) else f"HTTP {code}: an answer of "
                       f"another shape ({str(data)[:200]})")


class CheckAnswer(Answer):
    """POST /check: 200 with the plan a switch would run and its digest, 400 naming what is wrong."""

    plan: Plan | None = None
    digest: str | None = None
    warnings: list[str] = []

    def to_json(self) -> JSON:
        return {"plan": self.plan.to_json() if self.plan else None, "digest": self.digest, "warnings": self.warnings}


class HoldAnswer(Answer):
    """POST /hold: 200 with the hold's id, 409 with who holds it."""

    id: str | None = None
    expires_at: float | None = None
    tune_hold: JSON | None = None


class ReleaseAnswer(Answer):
    """DELETE /hold: whether that id held it."""

    released: bool | None = None


class SwitchAnswer(Answer):
    """POST /switch: the history entry (its keys at the top of the body) and the status after it. With code 0
    no answer came: `timed_out` (the host may still be switching; `deadline_s`), else unreachable."""

    entry: Entry | None = None
    status: ServerStatus | None = None
    timed_out: bool = False
    deadline_s: float | None = None

    @classmethod
    def of(cls, code: int, body: object) -> SwitchAnswer:
        data = body if isinstance(body, dict) else {"error": str(body)}
        entry = None
        if "outcome" in data:
            try:
                entry = Entry.model_validate(data)
            except ValidationError:
                entry = None
        status = None
        if isinstance(data.get("status"), dict):
            try:
                status = ServerStatus.model_validate(data["status"])
            except ValidationError:
                status = None
        error = data.get("error")
        return cls(code=code, error=error if isinstance(error, str) else None, entry=entry, status=status)

    @property
    def outcome(self) -> Outcome | None:
        return self.entry.outcome if self.entry else None

    def to_json(self) -> JSON:
        """The body as the server sent it (the entry's keys, `status`), for `--json` and records."""
        out: JSON = self.entry.to_json() if self.entry else {}
        if self.error is not None:
            out["error"] = self.error
        if self.status is not None:
            out["status"] = self.status.to_json()
        if self.timed_out:
            out.update(timed_out=True, deadline_s=self.deadline_s)
        return out
