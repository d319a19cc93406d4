"""Acceptance by draft position: what a cell's verify passes accepted, per concurrency level.

SGLang reports per request a histogram of its verify passes by their correct drafts, `spec_correct_drafts_histogram`
(bin k: verifies that accepted k draft tokens, the bonus token excluded; docs/evidence.md). It has no per-position
histogram: the per-position figures are derived. With a chain of greedy drafts (top-k 1) draft position i (1-based)
is accepted in a verify exactly when that verify had at least i correct drafts, so

* rate of position i = sum_{k>=i} hist[k] / sum_k hist[k];
* conditional rate of position i (position i-1 accepted) = sum_{k>=i} hist[k] / sum_{k>=i-1} hist[k];
* accepted tokens per verify = 1 + sum_i rate_i (the accept length, bonus included).

Exact for chains; with top-k > 1 the histogram counts the accepted depth in the tree, so position i's rate is
the acceptance of the i-th token of the accepted path. A request's histogram is read into its record
(bench/client/sse_events.py), pooled over a repeat's ok requests (bench/bundle/aggregate.py `repeat_summary`) and
over a level's valid repeats here (`of_repeats`, from bench/run/cell.py `close_cell`); the cell record keeps one
`Acceptance` per level (bench/bundle/schema.py `Cell.acceptance`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, computed_field

from bench.bundle.cell_numbers import RepeatSummary
from bench.client.request_record import RequestRecord

Count = Annotated[int, Field(ge=0)]


def pool(histograms: Iterable[Sequence[int] | None]) -> list[int] | None:
    """The bin-wise sum of the histograms given (shorter ones padded with 0); None when none is given."""
    total: list[int] | None = None
    for h in histograms:
        if h is None:
            continue
        total = total or []
        total.extend([0] * (len(h) - len(total)))
        for k, n in enumerate(h):
            total[k] += n
    return total


class Acceptance(BaseModel):
    """The pooled correct-drafts histogram of a level, and what follows from it (written with it, derived again
    whenever it is read: a file cannot hold rates its histogram does not give)."""

    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False, frozen=True)
    correct_drafts_histogram: list[Count] = Field(min_length=1)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def verifies(self) -> int:
        """Verify passes counted."""
        return sum(self.correct_drafts_histogram)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def accept_length_histogram(self) -> dict[int, int]:
        """Verify passes by tokens accepted (k correct drafts + the bonus token)."""
        return {k + 1: n for k, n in enumerate(self.correct_drafts_histogram)}

    def _at_least(self, i: int) -> int:
        return sum(self.correct_drafts_histogram[i:])

    @computed_field  # type: ignore[prop-decorator]
    @property
    def position_rates(self) -> list[float | None]:
        """Per draft position 1 .. D-1 (D the bins), the share of verifies that accepted it."""
        v = self.verifies
        return [self._at_least(i) / v if v else None for i in range(1, len(self.correct_drafts_histogram))]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def conditional_rates(self) -> list[float | None]:
        """Per draft position, the share of the verifies that accepted the position before it that accepted it
        too (None where none reached the position before)."""
        bins = len(self.correct_drafts_histogram)
        return [self._at_least(i) / self._at_least(i - 1) if self._at_least(i - 1) else None for i in range(1, bins)]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def accept_length(self) -> float | None:
        """Tokens accepted per verify, the bonus included: 1 + the sum of the position rates."""
        v = self.verifies
        return sum((k + 1) * n for k, n in enumerate(self.correct_drafts_histogram)) / v if v else None

    def accept_length_at(self, drafts: int) -> float | None:
        """The accept length a chain of `drafts` draft tokens would give (1 + the rates of positions 1..drafts), None
        beyond the positions measured or without verifies: a shorter chain of the same greedy drafts accepts
        exactly the prefix of what the longer one accepted."""
        rates = self.position_rates
        if drafts < 0 or drafts > len(rates) or not self.verifies:
            return None
        return 1.0 + sum(r or 0.0 for r in rates[:drafts])

    @classmethod
    def of(cls, histogram: Sequence[int] | None) -> Acceptance | None:
        """The record of a pooled histogram; None without one or without a verify."""
        if not histogram or not sum(histogram):
            return None
        return cls(correct_drafts_histogram=list(histogram))


def of_records(records: Iterable[RequestRecord]) -> Acceptance | None:
    """The acceptance over the ok requests that carry a histogram."""
    return Acceptance.of(pool(r.spec_correct_drafts_histogram for r in records if r.ok))


def of_repeats(repeats: Iterable[RepeatSummary]) -> Acceptance | None:
    """The acceptance over the valid repeats' pooled histograms (a level of a cell)."""
    return Acceptance.of(pool(r.spec_correct_drafts_histogram for r in repeats if r.valid))
