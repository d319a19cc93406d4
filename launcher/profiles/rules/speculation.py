"""Speculative decoding is chosen by the spec overlay, never by a profile."""

from __future__ import annotations

from collections.abc import Iterator

from launcher.profiles.rules.context import Context, Finding


def speculation_in_profile(ctx: Context) -> Iterator[Finding]:
    """Speculation is its own axis (--spec); a profile that sets it silently fights the overlay."""
    for key, path in ctx.resolved.origin.items():
        if key.startswith("server.speculative-") and path.parent.name != "spec":
            yield ctx.finding("warning", "speculation_in_profile", key, f"{key[7:]} belongs to the spec overlay; choose the mode with --spec instead")
