"""The server's start-up log is what the activation verdicts read (launcher/runtime/start_lines.py)."""

from __future__ import annotations

from collections.abc import Iterator

from launcher.profiles.rules.context import Context, Finding

QUIET_LEVELS = ("warning", "error", "critical")
LOGGING_CONFIG_ENV = "SGLANG_LOGGING_CONFIG_PATH"
SOURCE = ("SGLang 0.5.23 logs each backend's start-up line with logger.info (e.g. "
          "srt/layers/flashinfer_comm_fusion.py around 579), at --log-level (default info: "
          "srt/arg_groups/fields/observability.py line 31), unless SGLANG_LOGGING_CONFIG_PATH replaces the whole "
          "logging config (srt/utils/common.py configure_logger, around 2619)")


def startup_lines_need_info_logging(ctx: Context) -> Iterator[Finding]:
    """A log level above info hides the start-up lines: a backend that runs would read as not running, and a
    switch that expects it would roll back (an error when the profile expects a backend, else a warning: the
    verdicts and a crash's cause lines still lose their context). A custom logging config may or may not
    keep them at info in SGLang's `[time TPn]` format: a warning."""
    level = ctx.server.get("log-level")
    expects = ctx.resolved.expects.backends()
    if isinstance(level, str) and level.lower() in QUIET_LEVELS:
        yield ctx.finding(
            "error" if expects else "warning", "startup_lines_need_info_logging", "server.log-level",
            f"log-level {level} hides SGLang's INFO start-up lines, which tell the kit which all-reduce backend "
            f"runs{' (this profile expects ' + ', '.join(expects) + ': a switch to it would roll back)' if expects else ''}; "
            f"use info (the default) or debug. {SOURCE}")
    if LOGGING_CONFIG_ENV in ctx.env:
        yield ctx.finding(
            "warning", "startup_lines_need_info_logging", f"env.{LOGGING_CONFIG_ENV}",
            f"{LOGGING_CONFIG_ENV} replaces SGLang's logging config: unless it logs INFO to stderr with SGLang's "
            "'[time TPn]' prefix, the kit cannot read the start-up lines and every expected backend reads "
            f"inactive. {SOURCE}")
