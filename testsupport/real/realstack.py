"""A real `launcher serve` over real SGLang 0.5.23 on the CPU: testsupport.stack.KitStack, pointed at the real server.

KitStack starts `launcher serve` with its own interpreter (sys.executable), so the tier runs its tests
with .venv-real's python (`make test-real`); this class unsets KIT_SERVER_CMD (the server is the real
`python -m sglang.launch_server`, `python` being .venv-real's, first on PATH), points MODEL_PATH at a tiny
model made by testsupport.real.model, lays the CPU overlay (testsupport.real.overlay) through
KIT_PROFILES_DIR and MODEL_OVERLAY, puts the sgl_kernel stand-in on the server's PYTHONPATH and gives
every wait the minutes a real start takes on two cores.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import httpx
import psutil

from testsupport.real import overlay
from testsupport.stack import REPO, KitStack

KERNEL_STANDIN = Path(__file__).resolve().parent / "kernel_standin"
REAL_VENV = REPO / ".venv-real"
DRAIN_TIMEOUT_S = 600
START_TIMEOUT_S = 900.0  # 88-123 s on a first start on two idle cores; 7 min and more seen while other work shared them
SCHEDULER_TITLE = "sglang::scheduler"  # setproctitle in sglang/srt/managers/scheduler.py:6294


def in_real_venv() -> bool:
    return Path(sys.prefix).resolve() == REAL_VENV.resolve()


class RealStack(KitStack):
    def __init__(self, tmp: Path, model: Path, profile: str = "baseline", spec: str = "off",
                 extra_env: dict | None = None, tp_size: int = 2):
        super().__init__(tmp, profile, spec)
        for key in ("KIT_SERVER_CMD", "KIT_PATCH_CHECK", "STANDIN_STARTUP_DELAY_S", "DRAFT_MODEL_PATH"):
            self.env.pop(key, None)
        self.env.update(
            {
                "MODEL_PATH": str(model),
                "MODEL_OVERLAY": overlay.write(self.profiles_dir, tp_size),
                "PATH": os.pathsep.join([str(Path(sys.executable).parent), self.env.get("PATH", "")]),
                "PYTHONPATH": os.pathsep.join([str(REPO), str(KERNEL_STANDIN)]),
                "KIT_STOP_WAIT_S": "60",
                "KIT_START_SECS": "1",
                "KIT_START_RETRIES": "0",
                "KIT_HEALTH_TIMEOUT_S": str(int(START_TIMEOUT_S)),
                "KIT_ROLLBACK_TIMEOUT_S": str(int(START_TIMEOUT_S)),
                "KIT_DRAIN_TIMEOUT_S": str(DRAIN_TIMEOUT_S),
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                **(extra_env or {}),
            }
        )

    def start(self, timeout: float = START_TIMEOUT_S, states: frozenset[str] = frozenset({"serving"}),
              healthy: bool = True) -> RealStack:
        super().start(timeout, states, healthy)
        return self

    def wait_state(self, states: set[str], timeout: float = START_TIMEOUT_S, healthy: bool = True) -> dict:
        return super().wait_state(states, timeout, healthy)

    def switch(self, profile: str, spec: str = "off", token: str | None = "default", timeout_s: float | None = None,
               spec_params: object = None) -> httpx.Response:
        """POST /switch as KitStack.switch does, but waiting as long as the switch can take: KitStack's fixed
        120 s HTTP timeout is shorter than a drain plus a real stop and start here. `timeout_s` is the
        health gate's; the request waits for two gates (the new start, and a rollback's) and the drain."""
        tok = self.token if token == "default" else token
        headers = {"Authorization": f"Bearer {tok}"} if tok is not None else {}
        body: dict = {"profile": profile, "spec": spec, "timeout_s": timeout_s}
        if spec_params is not None:
            body["spec_params"] = spec_params
        wait = 2 * (timeout_s or START_TIMEOUT_S) + DRAIN_TIMEOUT_S + 120
        return httpx.post(f"{self.control_url}/switch", json=body, headers=headers, timeout=wait)

    def write_profile(self, name: str, text: str) -> None:
        """A profile of the test's own, beside the overlay, in the stack's KIT_PROFILES_DIR."""
        (self.profiles_dir / f"{name}.toml").write_text(text)

    def server_tree(self) -> list[psutil.Process]:
        """The supervised program (the pid /status names: launcher's server_exec) and all under it."""
        top = psutil.Process(int(self.status()["pid"]))
        return [top, *top.children(recursive=True)]

    def _titled(self, test) -> list[psutil.Process]:
        out = []
        for p in self.server_tree():
            try:
                if test(p.cmdline()):
                    out.append(p)
            except psutil.NoSuchProcess:  # gone, or a zombie not yet reaped
                continue
        return out

    def launch_process(self) -> psutil.Process:
        """The real server's main process: `python -m sglang.launch_server ...` under server_exec."""
        found = self._titled(lambda argv: argv[1:3] == ["-m", "sglang.launch_server"])
        assert len(found) == 1, f"expected one sglang.launch_server process, found {len(found)}"
        return found[0]

    def schedulers(self) -> list[psutil.Process]:
        """The TP scheduler processes under the server, by their process title."""
        return self._titled(lambda argv: " ".join(argv).startswith(SCHEDULER_TITLE))

    def post(self, path: str, body: dict, timeout: float = 120) -> httpx.Response:
        return httpx.post(f"{self.server_url}{path}", json=body, timeout=timeout)

    def get(self, path: str, timeout: float = 30) -> httpx.Response:
        return httpx.get(f"{self.server_url}{path}", timeout=timeout)
