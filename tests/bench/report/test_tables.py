"""bench/report/tables.py: the one CSV shape that `bench report` and `bench compare --csv` write."""

from __future__ import annotations

import csv
import io

from bench.report import tables


def test_csv_text_keeps_the_named_fields_in_order_and_writes_none_as_empty():
    text = tables.csv_text([{"b": 2, "a": None, "extra": "dropped"}, {"a": 1.5}], ("a", "b"))
    assert text.splitlines()[0] == "a,b"
    assert list(csv.DictReader(io.StringIO(text))) == [{"a": "", "b": "2"}, {"a": "1.5", "b": ""}]


def test_fmt_marks_a_missing_number():
    assert tables.fmt(None) == "-" and tables.fmt(1.234) == "1.23" and tables.fmt(2.0, sign=True).startswith("+")
