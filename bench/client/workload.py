"""What the bench sends: the bundled chat prompts, a seeded random workload, or the user's own prompts file.

Chat-templated prompts matter: a raw random prompt can show twice the accept length of chat
output (docs/evidence.md, "Serving and measurement"), so `chat` is the default workload.

`/generate` takes raw text, and the client cannot know the served model's own chat template, so
for `--api generate` the messages are rendered with one fixed, documented ChatML-style template:

    <|im_start|>{role}\\n{content}<|im_end|>\\n     (once per message)
    <|im_start|>assistant\\n                          (generation prompt)

`--api chat` sends the messages unchanged and the server applies the model's real template.

`--prompts FILE` (bench run, bench tune): a JSONL file, one prompt per line, either
`{"id": "...", "text": "..."}` (the text becomes one user message) or `{"id": "...", "messages":
[{"role", "content"}, ...]}` (roles system/user/assistant), `id` optional (`line-N` when left out),
`task` optional. A `Prompt` holds role/content messages only, so that is all a line can carry
(no sampling settings, no images). The settings carry it as the workload `file:PATH`
(`file_workload`); `prompts_file` reads it, with its sha256.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path

from launcher.errors import UserError

WORKLOADS = ("chat", "random")
FILE_PREFIX = "file:"  # the workload of a --prompts file: file:<absolute path>
LINE_FORMAT = '{"id": "q1", "text": "..."} or {"id": "q1", "messages": [{"role": "user", "content": "..."}]}'
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
    return Path(__file__).resolve().parent.parent / "data" / "prompts.jsonl"


def load_prompts(path: str | Path | None = None) -> list[Prompt]:
    """Read a prompts file (module docstring: one JSON object per line) and validate it; the bundled one by default."""
    p = Path(path) if path else bundled_prompts_path()
    return _parse(p, _read(p, "prompts file"), "prompts file")


def _read(p: Path, what: str) -> bytes:
    try:
        return p.read_bytes()
    except OSError as exc:
        raise UserError(f"{p}: cannot read {what} ({exc.strerror}); give a readable JSONL file, one prompt "
                        f"per line: {LINE_FORMAT}") from exc


def _parse(p: Path, data: bytes, what: str) -> list[Prompt]:
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise UserError(f"{p}: {what} is not UTF-8 text (byte {exc.start}); save it as UTF-8 JSONL") from exc
    prompts: list[Prompt] = []
    seen: dict[str, int] = {}
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{p}:{lineno}"
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            msg = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deep"
            raise UserError(f"{where}: not valid JSON ({msg}); write one JSON object per line: {LINE_FORMAT}") from exc
        if not isinstance(row, dict):
            raise UserError(f"{where}: not a JSON object; write one object per line: {LINE_FORMAT}")
        pid = row.get("id", f"line-{lineno}")
        if not isinstance(pid, str) or not pid:
            raise UserError(f'{where}: key "id" must be a non-empty string (or leave it out: line-{lineno})')
        if pid in seen:
            raise UserError(f"{where}: duplicate id '{pid}' (first on line {seen[pid]}); give every prompt its own id")
        seen[pid] = lineno
        if "text" in row and "messages" in row:
            raise UserError(f'{where}: give "text" or "messages", not both')
        if "text" in row:
            if not isinstance(row["text"], str) or not row["text"].strip():
                raise UserError(f'{where}: key "text" must be a non-empty string')
            pairs = [("user", row["text"])]
        else:
            messages = row.get("messages")
            if not isinstance(messages, list) or not messages:
                raise UserError(f'{where}: no prompt: give "text" (a string) or "messages" (a non-empty list of '
                                f'{{"role", "content"}})')
            pairs = []
            for m in messages:
                if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
                    raise UserError(f'{where}: each message needs "role" in {ROLES} and a string "content"')
                pairs.append((m["role"], m["content"]))
        task = row.get("task", "chat")
        if not isinstance(task, str):
            raise UserError(f'{where}: key "task" must be a string (or leave it out)')
        prompts.append(Prompt(id=pid, task=task, messages=tuple(pairs)))
    if not prompts:
        raise UserError(f"{p}: no prompts found; write one prompt per line: {LINE_FORMAT}")
    return prompts


@dataclass(frozen=True)
class PromptsFile:
    """A `--prompts` file as read: where, the sha256 of its bytes (what a tune's settings digest keys on), its prompts."""

    path: Path
    sha256: str
    prompts: tuple[Prompt, ...]

    @property
    def workload(self) -> str:
        return file_workload(self.path)


# what was read, by file: the settings hash a file and the run builds its workload from the same read, unless
# the file changed in between (its size or modification time): then it is read again
_READ: dict[Path, tuple[tuple[int, int], PromptsFile]] = {}


def prompts_file(path: str | Path, *, flag: str = "--prompts") -> PromptsFile:
    """Read and validate a `--prompts` file (UserError naming the file, the line and the fix)."""
    p = Path(path).expanduser().resolve()
    if not p.is_file():
        raise UserError(f"{flag} {path}: no such file; give a JSONL file, one prompt per line: {LINE_FORMAT}")
    st = p.stat()
    stamp = (st.st_size, st.st_mtime_ns)
    if p in _READ and _READ[p][0] == stamp:
        return _READ[p][1]
    data = _read(p, f"{flag} file")
    got = PromptsFile(p, hashlib.sha256(data).hexdigest(), tuple(_parse(p, data, f"{flag} file")))
    _READ[p] = (stamp, got)
    return got


def file_workload(path: str | Path) -> str:
    return FILE_PREFIX + str(Path(path).expanduser().resolve())


def choose_prompts(path: str | None, num_prompts: int | None, default: int, workload: str) -> tuple[str, int, str | None]:
    """(workload, number of prompts, the file's sha256) from `--prompts`, `--num-prompts` and `--workload`:
    with a file, the first `--num-prompts` of it (all of it when unset); without, `--num-prompts` or `default`.
    UserError (exit 2) naming the flag for a bad file or a number the file cannot give."""
    if num_prompts is not None and num_prompts < 1:
        raise UserError(f"--num-prompts {num_prompts}: must be at least 1")
    if path is None:
        return workload, default if num_prompts is None else num_prompts, None
    if workload == "random":
        raise UserError("--prompts sends the file's prompts; --workload random sends random words: drop one of them")
    f = prompts_file(path)
    if num_prompts is not None and num_prompts > len(f.prompts):
        raise UserError(f"--num-prompts {num_prompts}: {path} has {len(f.prompts)} prompt(s); give --num-prompts "
                        f"{len(f.prompts)} or fewer, or leave it out to send them all")
    return f.workload, len(f.prompts) if num_prompts is None else num_prompts, f.sha256


def random_prompts(n: int, seed: int = RANDOM_SEED, min_words: int = 32, max_words: int = 256) -> list[Prompt]:
    """`n` user messages of random words; the same seed always gives the same prompts."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        words = [rng.choice(_RANDOM_WORDS) for _ in range(rng.randint(min_words, max_words))]
        out.append(Prompt(id=f"random-{i:04d}", task="random", messages=(("user", " ".join(words)),)))
    return out


def build_workload(kind: str, num_prompts: int, seed: int = RANDOM_SEED) -> list[Prompt]:
    """The first `num_prompts` prompts (bundled ones repeat in order, with a #k suffix, if more are asked; a
    `file:PATH` workload's never do)."""
    if kind.startswith(FILE_PREFIX):
        f = prompts_file(kind[len(FILE_PREFIX):])
        if not 1 <= num_prompts <= len(f.prompts):
            raise UserError(f"--num-prompts {num_prompts}: {f.path} has {len(f.prompts)} prompt(s); give 1 to "
                            f"{len(f.prompts)}")
        return list(f.prompts[:num_prompts])
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
