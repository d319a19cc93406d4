"""The runtime's vocabulary, named once: what state the server is in, how a switch ended, which step
a switch is at. The control API, the switch, `launcher status/switch`, the fleet and the metrics all
use these names; /status and history.jsonl carry their string values.

Which moves between them are allowed is transitions.py's table. supervisord's process state names are
here too: the transitions read them, and the core imports nothing that talks to supervisord.

`StrEnum` members are strings, so JSON and comparisons with stored values need no conversion.
"""

from __future__ import annotations

from enum import StrEnum


class State(StrEnum):
    """What /status says of the server. Only the ANSWERING states mean the plan's server answers."""

    STARTING = "starting"  # the container's first plan is loading
    SERVING = "serving"  # the running plan answers /health
    DEGRADED = "degraded"  # it answers, but an expected backend is not active (kept on purpose)
    ROLLED_BACK = "rolled_back"  # a switch failed; the previous plan answers again
    SWITCHING = "switching"  # a switch holds the server (see Phase)
    RECOVERING = "recovering"  # resolving a switch that a restart cut short
    DOWN = "down"  # the server stopped answering; supervisord is restarting it
    FAILED = "failed"  # nothing answers, and nothing will without a restart or a switch


ANSWERING = frozenset({State.SERVING, State.DEGRADED, State.ROLLED_BACK})


class Outcome(StrEnum):
    """How a switch (or a start) ended, as history.jsonl records it."""

    STARTED = "started"  # the first healthy start of a plan under serve
    SWITCHED = "switched"
    DEGRADED = "degraded"  # switched, with an expected backend missing (KIT_ACTIVATION_FAILURE=degraded)
    ROLLED_BACK = "rolled_back"
    FAILED = "failed"  # no plan answers
    ABORTED = "aborted"  # stopped before the old server was touched (drain timeout)
    UNCHANGED = "unchanged"  # the plan already runs
    INTERRUPTED = "interrupted"  # a restart cut it short; see Resolution


OK_OUTCOMES = frozenset({Outcome.SWITCHED, Outcome.UNCHANGED})  # the plan asked for runs as asked


class Resolution(StrEnum):
    """How the next start resolved an interrupted switch."""

    KEPT = "kept"
    ROLLED_BACK = "rolled_back"
    FAILED = "failed"


class Phase(StrEnum):
    """The step a switch is at (/status `phase`; the journal records the ones that touch the server)."""

    DRAINING = "draining"
    STOPPING = "stopping"
    STARTING = "starting"
    HEALTH = "health"
    ACTIVATION = "activation"
    ROLLING_BACK = "rolling_back"
    RECOVERING = "recovering"


STATE_AFTER = {  # the state a finished switch leaves the server in
    Outcome.SWITCHED: State.SERVING,
    Outcome.DEGRADED: State.DEGRADED,
    Outcome.ROLLED_BACK: State.ROLLED_BACK,
    Outcome.ABORTED: State.SERVING,
    Outcome.FAILED: State.FAILED,
    Outcome.INTERRUPTED: State.FAILED,  # supervisord stopped answering midway: nothing starts the server any more
}

# supervisord's own process state names (supervisor/states.py), as getProcessInfo's `statename` reads them
LIVE_STATES = frozenset({"RUNNING", "STARTING", "BACKOFF"})
UP_STATES = frozenset({"RUNNING", "STARTING"})  # a process that may answer (STARTING: within startsecs)
DEAD_STATES = frozenset({"FATAL", "EXITED", "STOPPED", "UNKNOWN"})

SWITCH_TIMEOUT_MAX_S = 3600.0  # the largest timeout_s a switch accepts
