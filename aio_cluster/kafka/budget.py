"""The memory budget of a member's fetches.

With a budget (``max_buffered_bytes``) the records buffered for the member, in aiokafka
and after it, stay within the budget however many partitions are assigned, as librdkafka's
``queued.max.messages.kbytes`` keeps them, while each partition is still fetched in chunks of
``max_bytes``: small chunks, not small responses, are what slows aiokafka at many partitions.
aiokafka fetches in the background, one request per broker at a time; here it holds at most one
response per broker until the caller takes its records (its prefetch backoff, after which it
would send the next request while records of the last still wait, is set to never). A response
brings at most the budget over four times the brokers known at `start()`. The caller (the
member's delivery) keeps what it took within the rest: while what it holds plus one response per
broker would pass the budget (`fits()`), it holds every partition (`hold()`, aiokafka's pause),
so that no request goes out; and it holds a partition of which it has `ahead_bytes` waiting, so
that one partition whose batches are slow to finish cannot take the whole budget. Whatever
aiokafka fetched of a held or unassigned partition is dropped at the next `fetch()` (read again
from the same offset later), so that it never keeps aiokafka from fetching. The bound is soft as
Kafka's own: a broker returns the first record batch of a fetch whole, however small the bound.
"""

from __future__ import annotations

from dataclasses import dataclass

AIOKAFKA_RESPONSE_BYTES = 52_428_800
"""aiokafka's own bound on one fetch response (its ``fetch_max_bytes``, 50 MB)."""


@dataclass
class FetchBudget:
    """The budget's figures: ``limit`` bytes over all partitions (None: no budget, only
    ``max_bytes`` per partition bounds them), over ``brokers`` brokers (one response each)."""

    limit: int | None
    max_bytes: int
    brokers: int = 1

    @property
    def budgeted(self) -> bool:
        """Whether a budget bounds the bytes buffered."""
        return self.limit is not None

    @property
    def response_bytes(self) -> int:
        """The most bytes one fetch response brings: with a budget, the budget over four times
        the brokers (soft, see the module); else aiokafka's 50 MB."""
        if self.limit is None:
            return max(self.max_bytes, AIOKAFKA_RESPONSE_BYTES)
        return max(1, self.limit // (4 * self.brokers))

    @property
    def ahead_bytes(self) -> int:
        """With a budget, the bytes of one partition taken and not yet handed out past which
        it is held: an eighth of the budget (it may then hold up to one chunk, ``max_bytes``,
        more). So that one partition whose batches are slow to finish cannot spend the budget
        of all."""
        return max(1, (self.limit or 0) // 8)

    def fits(self, held: int) -> bool:
        """Whether the fetches may bring more while the caller holds ``held`` bytes of records
        it took: ``held`` plus one response per broker within the budget (always without
        one)."""
        return self.limit is None or held + self.brokers * self.response_bytes <= self.limit
