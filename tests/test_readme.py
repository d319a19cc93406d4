"""README.md: the quickstart's two commands and the map of the tree match the repository."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text(encoding="utf-8")


def _map_rows() -> list[tuple[str, str, str]]:
    section = README.split("### Map of the tree", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and not set(cells[0]) <= {"-"} and cells[0] != "Path":
            rows.append((cells[0], cells[1], cells[2]))
    return rows


def test_every_path_in_the_map_exists():
    rows = _map_rows()
    assert len(rows) >= 10
    for paths, _, _ in rows:
        for path in re.findall(r"`([^`]+)`", paths):
            assert (REPO / path).exists(), f"README map names {path}, which is not in the tree"


def test_every_product_module_and_top_level_folder_is_on_the_map():
    text = "\n".join(" ".join(r[:2]) for r in _map_rows())
    for pkg in ("launcher/profiles", "launcher/runtime", "bench"):
        for mod in sorted((REPO / pkg).glob("*.py")):
            if mod.stem not in ("__init__", "__main__", "cli"):
                assert f"`{mod.stem}`" in text or f"{pkg}/{mod.name}" in text, f"{pkg}/{mod.name} is not on the map"
    for mod in sorted((REPO / "launcher").glob("*.py")):
        if mod.stem not in ("__init__", "__main__"):
            assert f"launcher/{mod.name}" in text, f"launcher/{mod.name} is not on the map"
    for folder in sorted(p for p in REPO.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if folder.name in ("results", "build", "dist") or folder.name.endswith(".egg-info"):
            continue
        assert f"`{folder.name}/" in text or f"`{folder.name}`" in text, f"{folder.name}/ is not on the map"


def test_every_verb_on_the_map_is_a_makefile_verb():
    makefile = (REPO / "Makefile").read_text()
    for _, _, verbs in _map_rows():
        for verb in re.findall(r"`make ([a-z-]+)`", verbs):
            assert re.search(rf"^{verb}:.*## ", makefile, re.M), f"`make {verb}` is on the map but not a verb"


def test_quickstart_has_the_two_setup_commands():
    quick = README.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    assert "make up PROFILE=fused" in quick and "make demo" in quick and "make test" in quick
