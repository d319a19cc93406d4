"""What a bad server can make the bench's HTTP client hold: the caps on what it reads, and capped reads.

A body past its cap is never read to the end: the read stops and the connection is dropped. Every cap
is named in the error it causes (docs/bench.md, "Sizes").
"""

from __future__ import annotations

import aiohttp

MiB = 1024 * 1024
# What a bad server can make the client hold. Every cap is named in the error it causes.
LINE_CAP = 8 * MiB  # one SSE event (a cumulative /generate event holds the whole reply), and the reply text
ERROR_BODY_CAP = 64 * 1024  # the body of a non-200 answer; 300 characters of it are kept
JSON_CAP = 16 * MiB  # /server_info, /metrics
DRAIN_CAP = 64 * 1024  # what may follow [DONE] before the connection is dropped instead of reused
DRAIN_TIMEOUT_S = 1.0


def size_text(n: int) -> str:
    return f"{n // MiB} MiB" if n >= MiB and n % MiB == 0 else f"{n // 1024} KiB" if n % 1024 == 0 else f"{n} bytes"


class BodyTooLarge(ValueError):
    """A response body past its cap; the rest is never read and the connection is dropped."""


async def read_upto(resp: aiohttp.ClientResponse, cap: int) -> tuple[bytes, bool]:
    """At most `cap` bytes of the body, and whether there was more (then the connection is dropped
    and the rest never read)."""
    buf = bytearray()
    while len(buf) <= cap:
        data = await resp.content.read(cap + 1 - len(buf))
        if not data:
            return bytes(buf), False
        buf += data
    resp.close()
    return bytes(buf[:cap]), True


async def read_capped(resp: aiohttp.ClientResponse, cap: int, what: str) -> bytes:
    """The body, at most `cap` bytes: BodyTooLarge (naming the cap) as soon as it is longer."""
    body, more = await read_upto(resp, cap)
    if more:
        raise BodyTooLarge(f"{what} is over the {size_text(cap)} cap")
    return body
