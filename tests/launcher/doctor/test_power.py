"""launcher.doctor.power: `nvidia-smi --query-gpu=index,power.limit,... --format=csv,noheader,nounits` parsing.

The fixtures are written in the format nvidia-smi prints for that query (values in watts with two decimals,
`[N/A]` where the GPU reports none); pcie8_power_capped.csv has GPU 3 at 450 W and GPU 5 at 400 W.
"""

from __future__ import annotations

import pytest
from helpers_doctor import assert_format_error, read

from launcher.doctor import power
from launcher.doctor.power import PowerLimit
from launcher.doctor.probe import SMI_ARGS


def test_the_query_the_doctor_runs():
    assert SMI_ARGS["power"] == [
        "--query-gpu=index,power.limit,power.default_limit,power.min_limit,power.max_limit",
        "--format=csv,noheader,nounits",
    ]


def test_eight_gpus_at_their_default():
    limits = power.parse(read("pcie8_power.csv"))
    assert [p.index for p in limits] == list(range(8))
    assert limits[0] == PowerLimit(0, 600.0, 600.0, 150.0, 600.0)
    assert not any(p.capped for p in limits)
    assert limits[0].describe() == "GPU 0: power limit 600 W (default 600 W, range 150-600 W)"


def test_capped_gpus_are_the_ones_below_their_default():
    limits = power.parse(read("pcie8_power_capped.csv"))
    assert [p.index for p in limits if p.capped] == [3, 5]
    assert limits[3].describe() == "GPU 3: power limit 450 W (default 600 W, range 150-600 W)"
    assert not PowerLimit(0, 650.0, 600.0, None, None).capped  # raised above the default is not capped


def test_not_available_fields_are_none_and_a_header_is_skipped():
    (p,) = power.parse(read("gpu1_power_na.csv"))
    assert p == PowerLimit(0, None, None, None, None)
    assert not p.capped
    assert p.describe() == "GPU 0: power limit unknown"


def test_units_and_a_partial_range_are_read():
    (p,) = power.parse("0, 300.00 W, 350.00 W, [Not Supported], 350.00 W\n")
    assert p == PowerLimit(0, 300.0, 350.0, None, 350.0)
    assert p.describe() == "GPU 0: power limit 300 W (default 350 W, range ?-350 W)"
    assert p.to_dict() == {"index": 0, "limit_w": 300.0, "default_w": 350.0, "min_w": None, "max_w": 350.0}


@pytest.mark.parametrize(
    ("text", "lineno", "needle"),
    [
        ("", 1, "no GPU rows"),
        ("index, power.limit [W], power.default_limit [W], power.min_limit [W], power.max_limit [W]\n", 1, "no GPU rows"),
        ("0, 600.00, 600.00, 150.00\n", 1, "4 values, the query has 5"),
        ("0, 600.00, 600.00, 150.00, 600.00\nGPU1, 600.00, 600.00, 150.00, 600.00\n", 2, "index 'GPU1' is not a number"),
        ("0, lots, 600.00, 150.00, 600.00\n", 1, "not a number of watts"),
    ],
)
def test_other_output_is_a_format_error_naming_the_line(text, lineno, needle):
    assert_format_error(power.parse, text, lineno, needle)


def test_what_nvidia_smi_printed_on_an_h200():
    """docs/evidence/energy-h200x1: the doctor's query as one H200's nvidia-smi answered it."""
    (p,) = power.parse(read("h200_power.csv"))
    assert (p.index, p.limit_w, p.default_w, p.min_w, p.max_w) == (0, 700.0, 700.0, 200.0, 700.0)
