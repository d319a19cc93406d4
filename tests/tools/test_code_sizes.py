"""tools/code_sizes.py: the structure figures, on a tree made for the test and on the repository, whose
modules and functions stay within the limits."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("code_sizes", ROOT / "tools" / "code_sizes.py")
code_sizes = importlib.util.module_from_spec(_spec)
sys.modules["code_sizes"] = code_sizes  # dataclasses look their module up
_spec.loader.exec_module(code_sizes)


def _tree(tmp_path: Path) -> Path:
    (tmp_path / "launcher").mkdir()
    (tmp_path / "bench" / "sub").mkdir(parents=True)
    body = "\n".join(f"    x{i} = {i}" for i in range(61))
    (tmp_path / "launcher" / "long.py").write_text(f"def long():\n{body}\n" + "\n" * 340)
    (tmp_path / "bench" / "sub" / "short.py").write_text(
        "from typing import Any\n\n\ndef short(a: dict[str, Any]) -> dict[str, Any]:\n    return a\n")
    return tmp_path


def test_sizes_and_counts_of_a_made_tree(tmp_path):
    root = _tree(tmp_path)
    assert code_sizes.module_sizes(root)[0] == code_sizes.Size("launcher/long.py", 402)
    assert code_sizes.function_sizes(root)[0] == code_sizes.Size("launcher/long.py:1 long", 62)
    assert code_sizes.untyped_counts(root) == {"launcher": 0, "bench": 2}
    assert code_sizes.over_limits(root) == ["launcher/long.py: 402 lines (limit 400)",
                                            "launcher/long.py:1 long: 62 lines (limit 60)"]


def test_check_exits_1_naming_what_is_over(tmp_path, capsys):
    assert code_sizes.main(["--check", "--root", str(_tree(tmp_path))]) == 1
    assert "code_sizes: launcher/long.py:1 long: 62 lines (limit 60)" in capsys.readouterr().err


def test_the_product_stays_within_the_limits(capsys):
    assert code_sizes.main(["--check"]) == 0, capsys.readouterr().err
    assert code_sizes.untyped_counts(ROOT)["bench"] < 40 and code_sizes.untyped_counts(ROOT)["launcher"] < 10
