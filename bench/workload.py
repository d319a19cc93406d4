"""What the bench sends: the bundled chat prompts or a seeded random workload.

Chat-templated prompts matter: a raw random prompt can show twice the accept length of chat
output (docs/evidence.md, "Serving and measurement"), so `chat` is the default workload.

`/generate` takes raw text, and the client cannot know the served model's own chat template, so
for `--api generate` the messages are rendered with one fixed, documented ChatML-style template:

    <|im_start|>{role}\\n{content}<|im_end|>\\n     (once per message)
    <|im_start|>assistant\\n                          (generation prompt)

`--api chat` sends the messages unchanged and the server applies the model's real template.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from launcher.errors import UserError

WORKLOADS = ("chat", "random")
TASKS = ("code", "math", "prose", "extraction")
ROLES = ("system", "user", "assistant")
RANDOM_SEED = 1234

# Words for the random workload; any fixed list works, the seed decides the order.
_RANDOM_WORDS = (
    "time year people way day man thing woman life child world school state family student group "
    "country problem hand part place case week company system program question work government "
    "number night point home water room mother area money story fact month lot right study book "
    "eye job word business issue side kind head house service friend father power hour game line"
).split()


@dataclass(frozen=True)
class Prompt:
    """One request's input: an id for matching outputs across profiles, its task and messages."""

    id: str
    task: str
    messages: tuple[tuple[str, str], ...]

    def chat_messages(self) -> list[dict[str, str]]:
        return [{"role": role, "content": content} for role, content in self.messages]

    def text(self) -> str:
        """The prompt rendered with the documented template, for the native /generate API."""
        return render_chat_template(self.chat_messages())


def render_chat_template(messages: list[dict[str, str]]) -> str:
    """ChatML-style rendering (see module docstring) ending with the assistant generation prompt."""
    parts = [f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages]
    parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def bundled_prompts_path() -> Path:
    return Path(__file__).resolve().parent / "data" / "prompts.jsonl"


def load_prompts(path: str | Path | None = None) -> list[Prompt]:
    """Read a prompts file ({"id","task","messages":[{"role","content"}...]} per line) and validate it."""
    p = Path(path) if path else bundled_prompts_path()
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise UserError(f"{p}: cannot read prompts file ({exc.strerror})") from exc
    prompts: list[Prompt] = []
    seen: set[str] = set()
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{p}:{lineno}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserError(f"{where}: not valid JSON ({exc.msg}); one JSON object per line") from exc
        if not isinstance(row, dict) or not isinstance(row.get("id"), str) or not row["id"]:
            raise UserError(f'{where}: key "id" must be a non-empty string')
        if row["id"] in seen:
            raise UserError(f"{where}: duplicate id '{row['id']}'; ids must be unique")
        seen.add(row["id"])
        messages = row.get("messages")
        if not isinstance(messages, list) or not messages:
            raise UserError(f'{where}: key "messages" must be a non-empty list of {{"role","content"}}')
        pairs = []
        for m in messages:
            if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
                raise UserError(f'{where}: each message needs "role" in {ROLES} and a string "content"')
            pairs.append((m["role"], m["content"]))
        prompts.append(Prompt(id=row["id"], task=str(row.get("task", "chat")), messages=tuple(pairs)))
    if not prompts:
        raise UserError(f"{p}: no prompts found")
    return prompts


def random_prompts(n: int, seed: int = RANDOM_SEED, min_words: int = 32, max_words: int = 256) -> list[Prompt]:
    """`n` user messages of random words; the same seed always gives the same prompts."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        words = [rng.choice(_RANDOM_WORDS) for _ in range(rng.randint(min_words, max_words))]
        out.append(Prompt(id=f"random-{i:04d}", task="random", messages=(("user", " ".join(words)),)))
    return out


def build_workload(kind: str, num_prompts: int, seed: int = RANDOM_SEED) -> list[Prompt]:
    """The first `num_prompts` prompts (bundled ones repeat in order, with a #k suffix, if more are asked)."""
    if kind not in WORKLOADS:
        raise UserError(f"--workload '{kind}' is unknown; use one of {', '.join(WORKLOADS)}")
    if num_prompts < 1:
        raise UserError("--num-prompts must be at least 1")
    if kind == "random":
        return random_prompts(num_prompts, seed)
    base = load_prompts()
    out = []
    for i in range(num_prompts):
        p = base[i % len(base)]
        lap = i // len(base)
        out.append(p if lap == 0 else Prompt(id=f"{p.id}#{lap}", task=p.task, messages=p.messages))
    return out
