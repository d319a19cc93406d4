"""Measuring one cell: switch to its plan, check the backends, health-gate, warm up, run its repeats.

`bench run` (bench/run/matrix.py) and `bench tune` (bench/tune/runner.py) both measure through
`CellMeasurer.fill`, so a cell means the same in both: a failed switch, a backend that fell back,
a server that is not healthy or a warm-up that fails makes it invalid with its reason; an invalid
repeat (a request failed, the server restarted) makes it invalid too. The caller owns the cell's draft
(`cell.new_cell`), so an interrupt can still close the one that was being measured.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from bench import JsonObject
from bench.client.arrivals import Arrivals
from bench.client.power import Nvml
from bench.client.request_record import RequestRecord
from bench.client.server_client import ServerClient
from bench.client.workload import Prompt
from bench.run.cell import CellDraft, record_plan
from bench.run.passes import Reply
from bench.run.repeat import measure_repeat, server_identity
from bench.run.server_identity import PROBE_ERRORS, ServerIdentity, identity_of, is_simulated
from bench.run.settings import RunSettings
from launcher.errors import RuntimeFailure, UserError
from launcher.runtime import activation
from launcher.runtime.api.control_client import ControlClient
from launcher.runtime.core.states import OK_OUTCOMES


@dataclass
class CellMeasurer:
    """What every cell is measured with: the settings, the two clients, the prompts and where to say things."""

    settings: RunSettings
    server: ServerClient
    control: ControlClient | None
    prompts: list[Prompt]
    say: Callable[[str], None]
    on_request: Callable[[RequestRecord], None] | None = None
    on_phase: Callable[[str], None] | None = None  # "switching", "warming up", "measuring"
    nvml: Nvml | None = None  # every repeat's GPU energy, where NVML answers (bench/client/power.py)
    # the loads a cell is measured at, in order (default: every --concurrency level, then every --request-rate):
    # taken one at a time, after the repeats of the one before are in the cell and their rows given to `on_rows`,
    # so a search (`bench sla`, bench/sla/matrix.py) can choose the next from what the last one measured
    loads: Callable[[CellDraft], Iterable[int | Arrivals]] | None = None

    def phase(self, what: str) -> None:
        if self.on_phase is not None:
            self.on_phase(what)

    async def switch(self, cell: CellDraft, name: str) -> JsonObject | None:
        """Switch to the cell's plan; the plan the server was asked for when it did not switch (the cell
        is then invalid with its reason), None when it did."""
        assert self.control is not None
        point = cell.spec_params
        if self.on_phase is None:
            self.say(f"switching to {name} ...")
        self.phase("switching")
        answer = await self.control.switch_when_idle(cell.profile, cell.spec, self.settings.switch_timeout,
                                                     spec_params=point, adaptive_tiers=cell.adaptive_tiers)
        code, entry = answer.code, answer.entry
        if code in (401, 403):
            raise UserError(f"control API refused the switch (HTTP {code}): {answer.error}; set KIT_CONTROL_TOKEN")
        outcome = str(answer.outcome or ("failed" if code != 200 else "unknown"))
        cell.switch = {"outcome": outcome, "http_status": code, "error": answer.error,
                       "durations": dict(entry.durations) if entry else {}, "id": entry.id if entry else None}
        if outcome in OK_OUTCOMES:
            return None
        cell.invalid_reason = f"switch {outcome}: {answer.error or 'no reason given'}"
        wanted = entry.to if entry else None
        record_plan(cell, wanted.model_dump(mode="json") if wanted else None)
        return {"name": cell.profile, "spec": cell.spec, "spec_params": point.model_dump() if point else None, "digest": wanted.digest if wanted else None,
                "error": f"never ran: {cell.invalid_reason}"}

    async def running_plan(self, cell: CellDraft) -> JsonObject:
        """The plan the server runs now, from its control API, recorded in the cell; what the manifest keeps."""
        plan = None
        if self.control is not None:
            try:
                running = await self.control.running_plan()
            except RuntimeFailure as exc:
                return {"error": str(exc)}
            plan = running.to_json() if running is not None else None
        record_plan(cell, plan)
        return plan or {"error": "no control API: the running plan is unknown"}

    async def check_backends(self, cell: CellDraft) -> str:
        """The profile's expected backends, as /status reads them off the server's log; "" when all run.

        A cell whose backend fell back to NCCL would report NCCL's tok/s under the profile's name."""
        if self.control is None:
            cell.backends = None
            return ""
        try:
            cell.backends = (await self.control.status()).backends
        except RuntimeFailure:
            cell.backends = None
            return ""
        return activation.summary(cell.backends)

    async def warmup(self) -> str | None:
        if self.settings.warmup <= 0:
            return None
        prompts = [self.prompts[i % len(self.prompts)] for i in range(self.settings.warmup)]
        records, _ = await self.server.run(prompts, 1)
        bad = [r for r in records if not r.ok]
        return f"warm-up request failed: {bad[0].error}" if bad else None

    async def correctness_pass(self, top_k: int, levels: Sequence[int] = (1,)) -> list[Reply]:
        """One untimed greedy reply per prompt at each level (that many requests in flight, so at 1 every
        profile sees the same batches and above it requests share forward passes as production's do), with each
        token's log-probability and its top-k alternatives: what the correctness gate compares
        (bench/run/passes.py). Greedy whatever --temperature the timed repeats ran at: `ServerClient.logprobs`
        always asks for temperature GREEDY (0), never `server.temperature`."""
        out: list[Reply] = []
        for level in levels:
            out += await self.server.logprob_pass(self.prompts, top_k, level)
        return out

    async def fill(self, cell: CellDraft, *, repeats: int, on_rows: Callable[[list[RequestRecord]], None],
                   on_plan: Callable[[JsonObject], None],
                   on_logprobs: Callable[[list[Reply]], None] | None = None,
                   top_k: int = 5, pass_levels: Sequence[int] = (1,)) -> JsonObject:
        """Measure into `cell` (switching first unless --no-switch): `repeats` repeats at every concurrency
        level, each repeat's request rows to `on_rows`, the plan that ran (or was refused) to `on_plan`; then,
        with `on_logprobs` and every repeat valid, the correctness pass at `pass_levels` (after the timed repeats,
        so asking for log-probabilities never changes what is timed). Returns the server's /server_info (empty when it never answered); the
        caller closes the cell."""
        s, server, name = self.settings, self.server, cell.label
        if s.switching:
            refused = await self.switch(cell, name)
            if refused is not None:
                on_plan(refused)
                self.say(f"{name}: {cell.invalid_reason}; going on with the next profile")
                return {}
        on_plan(await self.running_plan(cell))
        info = await self._ready_server(cell)
        if info is None:
            return {}
        self.phase("warming up")
        seen = await server_identity(server, self.control)  # every repeat must run on this same start
        runs = seen.digest if seen is not None else None
        if runs and cell.plan_digest and runs != cell.plan_digest:
            cell.invalid_reason = (f"the server runs plan digest {runs}, not this cell's {cell.plan_digest} "
                                   "(switched since, from outside)")
            return info
        server.temperature = s.temperature  # the warm-up and the timed repeats sample at --temperature
        warm_reason = await self.warmup()
        if warm_reason:
            cell.invalid_reason = warm_reason
            return info
        self.phase("measuring")
        if not await self._measure_repeats(cell, repeats, on_rows, seen):
            return info
        if on_logprobs is not None and all(rep.valid for rep in cell.per_repeat):  # an invalid cell is not gated
            await self._gate_pass(cell, on_logprobs, top_k, pass_levels)
        return info

    async def _ready_server(self, cell: CellDraft) -> JsonObject | None:
        """The server's /server_info once the cell's backends run and the server is healthy, the client set up
        from it and the cell given the server's record; None when the cell is invalid (its reason set). UserError
        when a concurrency level is above the server's running cap (`over_cap`)."""
        s, server, name = self.settings, self.server, cell.label
        missing = await self.check_backends(cell)
        if missing:
            cell.invalid_reason = f"expected backend not active: {missing}"
            self.say(f"{name}: INVALID ({cell.invalid_reason}); going on with the next profile")
            return None
        try:
            await server.wait_healthy(s.health_timeout)
            info = await server.server_info()
        except (RuntimeFailure, *PROBE_ERRORS) as exc:
            cell.invalid_reason = f"server not healthy: {exc}"
            return None
        server.configure_from_server_info(info)
        cell.max_running_requests = server.running_cap
        refused = over_cap(s.concurrency, server.running_cap, name)
        if refused:
            cell.invalid_reason = refused
            raise UserError(refused)
        sim = is_simulated(info)
        cell.simulated = sim
        cell.server = {"version": info.get("version"), **identity_of(info).signals(), "simulated": sim}
        return info

    async def _measure_repeats(self, cell: CellDraft, repeats: int,
                               on_rows: Callable[[list[RequestRecord]], None], seen: ServerIdentity | None) -> bool:
        """`repeats` timed repeats at every concurrency level, then at every open-loop rate (or at each of `loads`),
        into the cell, each on the server start `seen`; after an invalid one, the server must be healthy again. False
        when it is not (the cell invalid with its reason)."""
        s, server, name = self.settings, self.server, cell.label
        loads = self.loads(cell) if self.loads is not None else [*s.concurrency, *s.arrivals()]
        for load in loads:
            for r in range(repeats):
                rep, rows, seen = await measure_repeat(server=server, control=self.control, prompts=self.prompts,
                                                       spec=cell.spec, concurrency=load, repeat=r, since=seen,
                                                       on_done=self.on_request, seed=s.seed, nvml=self.nvml)
                cell.per_repeat.append(rep)
                on_rows(rows)
                if not rep.valid:
                    where = f"c={load}" if isinstance(load, int) else load.label()
                    self.say(f"{name} {where} repeat {r + 1}: INVALID ({rep.invalid_reason})")
                    try:
                        await server.wait_healthy(s.health_timeout)
                    except RuntimeFailure as exc:
                        cell.invalid_reason = f"server did not come back: {exc}"
                        return False
        return True

    async def _gate_pass(self, cell: CellDraft, on_logprobs: Callable[[list[Reply]], None], top_k: int,
                         levels: Sequence[int]) -> None:
        """The correctness pass's replies to `on_logprobs`; a pass that fails makes the cell invalid with its reason."""
        self.phase("checking correctness")
        try:
            on_logprobs(await self.correctness_pass(top_k, levels))
        except RuntimeFailure as exc:
            cell.invalid_reason = f"correctness pass failed: {exc}"
        except (ValueError, TypeError, LookupError, ArithmeticError, RecursionError) as exc:
            # a reply the bench could not read (reading it is meant never to raise): this cell's failure, with
            # its reason, never the run's (which would leave a partial bundle)
            cell.invalid_reason = f"correctness pass failed: a reply the bench could not read ({_short(exc)})"


def over_cap(levels: Sequence[int], cap: int | None, name: str, source: str = "its /server_info") -> str | None:
    """Why a cell is refused when a concurrency level is above the most requests its server runs at once
    (`ServerClient.running_cap`, from /server_info); None when every level fits or the server does not say.

    Above the cap SGLang runs `cap` requests and queues the rest; their wait is timed as TTFT and the level's
    numbers are those of `cap` running requests. Labelled "concurrency N" they would sit beside `off` at N,
    which runs all N: a different load under the same label, so the bench measures no such level."""
    over = [c for c in levels if cap is not None and c > cap]
    if not over:
        return None
    shown = ",".join(str(c) for c in over)
    return (f"{name}: --concurrency {shown} is above the server's max_running_requests {cap} (the most requests it "
            f"runs at once, {source}; SGLang 0.5.23 sets 48 under EAGLE/EAGLE3/NGRAM unless the plan gives "
            f"--max-running-requests): above {cap} requests wait in its queue, timed as TTFT, a different load than "
            f"a server that runs them all. Lower --concurrency to at most {cap}, or give the plan "
            f"--max-running-requests {max(over)} (or more; the KV cache may still hold it lower)")


def _short(exc: BaseException) -> str:
    text = str(exc).strip()[:200]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
