"""launcher.doctor.textfmt: ANSI stripping, field splitting, and format errors that name file, line and text."""

from __future__ import annotations

from helpers_doctor import read

from launcher.doctor.textfmt import FormatError, fields, format_error, strip_ansi
from launcher.errors import UserError


def test_fixtures_carry_the_ansi_underline_of_real_output():
    for name in ("h200x1_topo.txt", "pcie8_dual_socket_topo.txt", "nvlink8_p2p.txt", "pcie8_p2p_broken.txt"):
        text = read(name)
        assert "\x1b[4m" in text and "\x1b[0m" in text, name
        assert "\x1b" not in strip_ansi(text)


def test_strip_ansi_drops_carriage_returns():
    assert strip_ansi("\x1b[4mGPU0\x1b[0m\r\n") == "GPU0\n"


def test_fields_split_on_tabs_or_runs_of_spaces():
    assert fields("GPU0\t X \tPIX\t0-15") == ["GPU0", "X", "PIX", "0-15"]
    assert fields("GPU0     X    PIX   0-15, 32-47") == ["GPU0", "X", "PIX", "0-15, 32-47"]  # one space stays inside
    assert fields("   \t  ") == []


def test_format_error_names_source_line_and_text():
    err = format_error("saved.txt", 4, "GPU2\tPXB\t" + "x" * 200, "unknown link type 'QPI'", "nvidia-smi topo -m")
    assert isinstance(err, FormatError) and isinstance(err, UserError) and err.exit_code == 2
    msg = str(err)
    assert msg.startswith("saved.txt:4: unknown link type 'QPI': 'GPU2  PXB  xxx")
    assert "...'" in msg and msg.endswith("; expected nvidia-smi topo -m")  # long lines are cut at 120
