"""Entry point of one rank process: `python -m bench.allreduce.worker SPEC.json RANK`.

Writes `rank<R>.json` next to the spec. Exit 0 when measured, 3 when the backend is unavailable here
(the parent turns that into a skipped row), 1 on any other failure (traceback goes to the rank log).
"""

from __future__ import annotations

import sys
from pathlib import Path

EXIT_UNAVAILABLE = 3


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    spec_path, rank = Path(args[0]), int(args[1])
    from bench.allreduce.harness import RunSpec, run_rank

    spec = RunSpec.load(spec_path)
    result = run_rank(spec, rank)
    out = spec_path.parent / f"rank{rank}.json"
    tmp = out.with_suffix(".tmp")
    tmp.write_text(result.model_dump_json(exclude_none=True))
    tmp.replace(out)
    return EXIT_UNAVAILABLE if result.status == "unavailable" else 0


if __name__ == "__main__":
    raise SystemExit(main())
