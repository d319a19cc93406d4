"""tests/ mirrors the code: a test of a module lives in the folder of its package (tests/launcher/runtime/core/
for launcher/runtime/core/), and only the tests of the repository as a whole (docs, README, Makefile, images,
monitoring, the wheel, the import contracts, these tiers) stay at the top."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
TOP = {"test_compose.py", "test_conftest_prereqs.py", "test_dockerfile.py", "test_docs.py", "test_makefile.py",
       "test_monitoring.py", "test_monitoring_prometheus.py", "test_readme.py", "test_wheel.py",
       "test_import_layers.py", "test_layout.py", "test_tiers.py", "test_sitecustomize.py"}
PACKAGES = ("launcher", "bench", "testsupport", "tools", "patches")


def test_only_the_repository_wide_tests_stay_at_the_top():
    assert {p.name for p in TESTS.glob("test_*.py")} == TOP


def test_every_test_folder_is_a_folder_of_the_code():
    folders = {p.parent.relative_to(TESTS) for p in TESTS.rglob("test_*.py")} - {Path(".")}
    assert folders, "no test in a package folder"
    strays = sorted(str(f) for f in folders if f.parts[0] not in PACKAGES or not (REPO / f).is_dir())
    assert strays == [], f"test folders with no code folder of that path: {strays}"


def test_every_package_of_the_product_has_its_tests():
    product = {p.parent.relative_to(REPO) for pkg in ("launcher", "bench")
               for p in (REPO / pkg).rglob("__init__.py")}
    untested = sorted(str(p) for p in product if not any((TESTS / p).glob("test_*.py")))
    assert untested == [], f"packages without a tests/<path>/test_*.py: {untested}"
