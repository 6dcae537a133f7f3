"""Every private name of aiokafka the package uses, in one place, checked against the installed
aiokafka, each with the public path that serves when it does not fit.

A member is fast because it reaches under aiokafka where aiokafka has no public call for what it
needs. A private name may move in any release, so each use is checked the first time a member's
fetcher meets it (the attribute there, the method taking what it is given, the request's fields,
the protocol versions the reader knows); a use that does not fit is switched off for the process,
with one warning naming aiokafka's version, and the member consumes on by the public path:

Each use, its private names, what it is for, and what serves without it:

- `CLIENT`: ``AIOKafkaConsumer._client``. One client for the fetches and the look-ups (one
  bootstrap, one set of connections, one metadata). Without it: the look-ups get a client of
  their own.
- `COMPACT_METADATA`: ``ClusterMetadata._partitions`` and ``._broker_partitions``. A
  partition's metadata as one untracked tuple (`aio_cluster.kafka.metadata`). Without it:
  aiokafka's tables.
- `METADATA_READER`: ``Request._CLASSES``, the Metadata versions aiokafka may send. Answers read
  in one pass. Without it: aiokafka decodes them.
- `FOLLOWED_TOPICS`: ``AIOKafkaClient._topics``, and its ``set_topics`` replaced. The look-ups'
  topics stay followed beside the fetched ones, with no refresh each time. Without it:
  aiokafka's ``set_topics()``, which follows what was set last and refreshes for a new topic.
- `FETCH_SESSIONS`: ``Fetcher._get_actions_per_node``; ``FetchRequest._max_wait_ms``,
  ``._min_bytes``, ``._max_bytes``, ``._isolation_level``, ``._rack_id``; ``AIOKafkaClient.send``
  wrapped. Incremental fetch sessions (`aio_cluster.kafka.fetch_sessions`). Without it: full
  fetches.
- `RESPONSE_BOUND`: ``Fetcher._fetch_max_bytes`` and ``._prefetch_backoff``. With a budget, one
  response per broker, of a bounded size. Without it: aiokafka's own bound and prefetch.
- `DROP_PAUSED`: ``Fetcher._records``, ``._notify`` and ``._wait_consume_future``. What was
  fetched of a held partition dropped at once. Without it: a seek to the partition's position
  as it is held.
- `RETRY_BACKOFF`: ``AIOKafkaClient._retry_backoff``. The look-ups' pause between tries, as the
  client's. Without it: aiokafka's default, 100 ms.
- `FETCH_TASK`: ``AIOKafkaConsumer._fetcher``, ``Fetcher.error_future`` and
  ``AIOKafkaClient._sync_task`` (``Fetcher._fetch_task`` and the latter replaced once ended, so
  that aiokafka's stop closes the connections). aiokafka's background fetch and its client's
  metadata refresh watched: any error ends either, for good (the refresh runs
  `CompactMetadata`'s update). Without it: a stall is told by log ends that stay ahead of
  fetches that come back empty.

- `PRODUCER_STOP`: ``AIOKafkaProducer._sender``, ``Sender.sender_task``,
  ``AIOKafkaProducer._message_accumulator`` and ``MessageAccumulator.fail_all()``. A producer's
  stop cut short (by a cancellation, or by its bound while batches wait for a broker that does
  not answer) finished (aiokafka's ``stop()`` marks the producer closed first, so calling it
  again does nothing): the sender routine cancelled, the connections closed (which fails its
  requests in flight, that it waits for), the batches it left failed (the graceful stop's wait
  for them ends). Without it: only the connections are closed
  (``AIOKafkaProducer.client.close()``, public); the sender routine may be left waiting.

A `Seams` is one fetcher's view: what fits the aiokafka it runs with, less what that fetcher
switched off after its fetch routine died in code of ours (see `aio_cluster.kafka.fetcher`).
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import logging
import weakref
from collections.abc import Callable, Collection, Iterable
from typing import Any

import aiokafka
from aiokafka.client import AIOKafkaClient
from aiokafka.cluster import ClusterMetadata
from aiokafka.errors import KafkaConnectionError
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.protocol.metadata import MetadataRequest

from ..concurrency import settled

__all__ = ["DEFAULT_RETRY_BACKOFF", "Seam", "Seams", "answered_versions", "finish_stop", "misfit"]

log = logging.getLogger(__name__)

DEFAULT_RETRY_BACKOFF = 0.1
"""aiokafka's ``retry_backoff_ms`` default, in seconds: the pause without `RETRY_BACKOFF`."""


class Seam(enum.Enum):
    """One use of aiokafka's private names (see the module's table)."""

    CLIENT = "the consumer's client"
    COMPACT_METADATA = "compact metadata tables"
    METADATA_READER = "the one-pass Metadata reader"
    FOLLOWED_TOPICS = "the client's followed topics"
    FETCH_SESSIONS = "incremental fetch sessions"
    RESPONSE_BOUND = "one response per broker"
    DROP_PAUSED = "dropping what was fetched of held partitions"
    RETRY_BACKOFF = "the client's retry backoff"
    FETCH_TASK = "watching aiokafka's background tasks"
    PRODUCER_STOP = "finishing a producer's stop cut short"


FALLBACK = {
    Seam.CLIENT: "the look-ups use a client of their own",
    Seam.COMPACT_METADATA: "aiokafka keeps its own metadata tables",
    Seam.METADATA_READER: "aiokafka decodes Metadata answers",
    Seam.FOLLOWED_TOPICS: "aiokafka's set_topics() serves",
    Seam.FETCH_SESSIONS: "full fetches",
    Seam.RESPONSE_BOUND: "aiokafka's own response bound and prefetch",
    Seam.DROP_PAUSED: "a held partition is sought to its position instead",
    Seam.RETRY_BACKOFF: f"a {DEFAULT_RETRY_BACKOFF:g} s pause between tries",
    Seam.FETCH_TASK: "a stall is told by log ends that stay ahead of empty fetches",
    Seam.PRODUCER_STOP: "only the producer's connections are closed",
}
"""What serves when a use does not fit."""

_warned: set[Seam] = set()
"""The uses switched off with a warning in this process (one warning each)."""


def misfit(seam: Seam, reason: str) -> None:
    """Say once per process that ``seam`` does not fit the installed aiokafka, and why."""
    if seam in _warned:
        return
    _warned.add(seam)
    log.warning(
        "aiokafka %s: %s does not fit (%s); %s instead",
        aiokafka.__version__,
        seam.value,
        reason,
        FALLBACK[seam],
    )


def _lacks(owner: Any, *names: str) -> str | None:
    """The first of ``names`` that ``owner`` lacks, as a reason; None when it has them all."""
    for name in names:
        if not hasattr(owner, name):
            return f"{type(owner).__name__} has no {name}"
    return None


def _takes(function: Any, *parameters: str) -> str | None:
    """Why ``function`` does not take exactly ``parameters`` (after self), or None."""
    try:
        found = list(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return f"{function!r} has no signature"
    if found and found[0] == "self":
        found = found[1:]
    if found != list(parameters):
        name = getattr(function, "__qualname__", function)
        return f"{name} takes {found}, not {list(parameters)}"
    return None


_FETCH_FIELDS = ("_max_wait_ms", "_min_bytes", "_max_bytes", "_isolation_level", "_rack_id")
_SESSION_FIELDS = ("session_id", "session_epoch", "forgotten_topics_data")
_SESSION_VERSION = 7


def answered_versions() -> frozenset[int]:
    """The Metadata versions aiokafka may send (each a request class it holds); empty when its
    list cannot be read."""
    classes = getattr(MetadataRequest, "_CLASSES", ())
    return frozenset(int(getattr(c, "API_VERSION", -1)) for c in classes)


def _check_client(consumer: Any) -> str | None:
    client = getattr(consumer, "_client", None)
    if not isinstance(client, AIOKafkaClient):
        return f"AIOKafkaConsumer._client is {type(client).__name__}, not AIOKafkaClient"
    return None


def _check_metadata(client: Any) -> str | None:
    cluster = getattr(client, "cluster", None)
    if not isinstance(cluster, ClusterMetadata):
        return "the client's cluster is no ClusterMetadata"
    return _lacks(cluster, "_partitions", "_broker_partitions", "config") or _takes(
        type(cluster).update_metadata, "metadata"
    )


def _check_reader(known: Collection[int]) -> str | None:
    versions = answered_versions()
    if not versions:
        return "MetadataRequest names no versions"
    if unknown := sorted(versions - set(known)):
        return f"aiokafka may send Metadata v{unknown[-1]}, which it does not read"
    return None


def _check_followed(client: Any) -> str | None:
    topics = getattr(client, "_topics", None)
    if not isinstance(topics, set):
        return "AIOKafkaClient._topics is no set"
    return _takes(type(client).set_topics, "topics")


def _check_sessions(fetcher: Any, client: Any) -> str | None:
    reason = _lacks(fetcher, "_get_actions_per_node") or _takes(
        type(fetcher)._get_actions_per_node, "assignment"
    )
    if reason:
        return reason
    request = FetchRequest(1, 1, 1, 0, [], rack_id="")
    if reason := _lacks(request, "topics", *_FETCH_FIELDS):
        return reason
    structs = getattr(FetchRequest, "_CLASSES", ())
    sessions = [s for s in structs if getattr(s, "API_VERSION", -1) >= _SESSION_VERSION]
    if not sessions:
        return "FetchRequest names no version with sessions"
    for struct in sessions:
        names = getattr(getattr(struct, "SCHEMA", None), "names", ())
        if missing := [name for name in _SESSION_FIELDS if name not in names]:
            return f"FetchRequest v{struct.API_VERSION} has no {missing[0]}"
    return _takes(type(client).send, "node_id", "request", "group")


def _check_bound(fetcher: Any) -> str | None:
    return _lacks(fetcher, "_fetch_max_bytes", "_prefetch_backoff")


def _check_drop(fetcher: Any) -> str | None:
    reason = _lacks(fetcher, "_records", "_notify", "_wait_consume_future")
    if reason is None and not isinstance(fetcher._records, dict):
        reason = "Fetcher._records is no dict"
    return reason


def _check_backoff(client: Any) -> str | None:
    backoff = getattr(client, "_retry_backoff", None)
    return None if isinstance(backoff, (int, float)) else "AIOKafkaClient has no _retry_backoff"


def _check_task(consumer: Any) -> str | None:
    fetcher = getattr(consumer, "_fetcher", None)
    if fetcher is None:
        return "AIOKafkaConsumer._fetcher is missing"
    if not isinstance(getattr(fetcher, "error_future", None), asyncio.Future):
        return "Fetcher.error_future is no task"
    client = getattr(consumer, "_client", None)
    if not isinstance(getattr(client, "_sync_task", None), asyncio.Future):
        return "AIOKafkaClient._sync_task is no task"
    return None


def _check_producer(producer: Any) -> str | None:
    sender = getattr(producer, "_sender", None)
    if sender is None or not hasattr(sender, "sender_task"):
        return "AIOKafkaProducer has no _sender with a sender_task"
    accumulator = getattr(producer, "_message_accumulator", None)
    if accumulator is None:
        return "AIOKafkaProducer has no _message_accumulator"
    return _takes(type(producer.client).close) or _takes(type(accumulator).fail_all, "exception")


class Seams:
    """What one fetcher may use of aiokafka's private names (see the module).

    Each use is checked the first time it is asked for (`fits()`), against the objects at hand;
    one that does not fit stays off for this fetcher, and is warned about once per process.
    """

    def __init__(self, off: Iterable[Seam] = ()) -> None:
        """Args:
        off: uses switched off from the start (a fetcher made again after its fetch routine
            died in code of ours).
        """
        self.off: set[Seam] = set(off)
        self._checked: set[Seam] = set()

    def fits(self, seam: Seam, check: Callable[[], str | None]) -> bool:
        """Whether ``seam`` may be used: not switched off, and ``check()`` (run once) finds
        nothing that does not fit; a misfit is switched off and warned about."""
        if seam in self.off:
            return False
        if seam not in self._checked:
            self._checked.add(seam)
            try:
                reason = check()
            except Exception as exc:  # a check must never be what stops a member
                reason = f"{type(exc).__name__}: {exc}"
            if reason is not None:
                self.off.add(seam)
                misfit(seam, reason)
                return False
        return True

    # -- the uses: each reads or writes its private names only here ---------------------------

    def client(self, consumer: Any) -> Any | None:
        """The consumer's client (`CLIENT`); None when the look-ups need one of their own."""
        if self.fits(Seam.CLIENT, lambda: _check_client(consumer)):
            return consumer._client
        return None

    def compact(self, client: Any, make: Callable[..., Any]) -> None:
        """Give ``client`` the metadata ``make(**config)`` makes, before anything reads it
        (`COMPACT_METADATA`)."""
        if self.fits(Seam.COMPACT_METADATA, lambda: _check_metadata(client)):
            client.cluster = make(**client.cluster.config)

    def reads_metadata(self, known: Collection[int]) -> bool:
        """Whether Metadata answers may be read in one pass (`METADATA_READER`): the reader
        knows every version aiokafka may send."""
        return self.fits(Seam.METADATA_READER, lambda: _check_reader(known))

    def follows(self, client: Any) -> bool:
        """Whether the client's followed topics may be read and set directly
        (`FOLLOWED_TOPICS`)."""
        return self.fits(Seam.FOLLOWED_TOPICS, lambda: _check_followed(client))

    def sessions(self, consumer: Any, client: Any) -> Any | None:
        """aiokafka's fetcher, when fetch sessions may be installed into it
        (`FETCH_SESSIONS`); None for full fetches."""
        fetcher = getattr(consumer, "_fetcher", None)
        if fetcher is not None and self.fits(
            Seam.FETCH_SESSIONS, lambda: _check_sessions(fetcher, client)
        ):
            return fetcher
        return None

    def bound(self, consumer: Any, response_bytes: int) -> bool:
        """Make aiokafka hold at most one response per broker, of at most ``response_bytes``
        (`RESPONSE_BOUND`); False when it cannot."""
        fetcher = getattr(consumer, "_fetcher", None)
        if fetcher is None or not self.fits(Seam.RESPONSE_BOUND, lambda: _check_bound(fetcher)):
            return False
        fetcher._fetch_max_bytes = response_bytes
        fetcher._prefetch_backoff = float("inf")
        return True

    def drops(self, consumer: Any) -> bool:
        """Whether what aiokafka fetched of paused partitions may be dropped directly
        (`DROP_PAUSED`)."""
        fetcher = getattr(consumer, "_fetcher", None)
        return fetcher is not None and self.fits(Seam.DROP_PAUSED, lambda: _check_drop(fetcher))

    def retry_backoff(self, client: Any) -> float:
        """The client's pause between tries, in seconds (`RETRY_BACKOFF`)."""
        if self.fits(Seam.RETRY_BACKOFF, lambda: _check_backoff(client)):
            return float(client._retry_backoff)
        return DEFAULT_RETRY_BACKOFF

    def settle(self, consumer: Any) -> None:
        """Let a consumer whose background tasks ended stop cleanly: aiokafka's ``stop()``
        awaits them, and one that ended with an error raises it there, before the client's
        connections are closed. Each such task is replaced by an ended one that raises nothing
        of the kind (`FETCH_TASK`)."""
        if self.fits(Seam.FETCH_TASK, lambda: _check_task(consumer)):
            fetcher, client = consumer._fetcher, consumer._client
            if _failed(fetcher._fetch_task):
                fetcher._fetch_task = _ended()
            if _failed(client._sync_task):
                client._sync_task = _ended()

    def background(self, consumer: Any) -> tuple[asyncio.Future[Any], ...]:
        """aiokafka's background tasks a started consumer fetches by: its fetch routine and
        its client's metadata refresh (`FETCH_TASK`); none when they cannot be watched."""
        if self.fits(Seam.FETCH_TASK, lambda: _check_task(consumer)):
            return (consumer._fetcher.error_future, consumer._client._sync_task)
        return ()


async def finish_stop(seams: Seams, producer: Any) -> None:
    """Finish the stop of a producer whose ``stop()`` was cut short: its sender routine ended
    (`PRODUCER_STOP`), its connections closed (public). Both may be done already."""
    if seams.fits(Seam.PRODUCER_STOP, lambda: _check_producer(producer)):
        routine = producer._sender.sender_task
        if routine is not None:
            # Cancelled, the routine waits for its requests in flight: the connections' close
            # below fails them, where a broker cut off would answer none.
            routine.cancel()
            await producer.client.close()
            await settled([routine])
        producer._message_accumulator.fail_all(KafkaConnectionError("the producer is closed"))
    await producer.client.close()


def _failed(task: asyncio.Future[Any] | None) -> bool:
    return task is not None and task.done() and not task.cancelled() and bool(task.exception())


def _ended() -> asyncio.Future[Any]:
    """A task's stand-in that has ended as a cancelled task does (its awaiting is suppressed)."""
    ended: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    ended.cancel()
    return ended


# -- the private names themselves, for the modules that use them ------------------------------


def drop_paused(consumer: Any, paused: Collection[Any]) -> None:
    """Drop what aiokafka's fetcher holds of ``paused`` partitions, and wake its routine if it
    held any (it waits for records to be taken before it looks again). Only where
    `Seams.drops` said yes."""
    fetcher = consumer._fetcher
    dropped = [fetcher._records.pop(tp, None) for tp in paused]
    if any(result is not None for result in dropped):
        fetcher._notify(fetcher._wait_consume_future)


Actions = Callable[[Any], Any]
"""aiokafka's fetcher's choice of requests: assignment -> (fetches per node, ...)."""


def actions_hook(fetcher: Any, wrap: Callable[[Actions], Actions]) -> None:
    """Replace aiokafka's fetcher's choice of requests by ``wrap(its own)``. Only where
    `Seams.sessions` said yes."""
    fetcher._get_actions_per_node = wrap(fetcher._get_actions_per_node)


def fetch_fields(request: Any) -> tuple[Any, Any, Any, Any, Any]:
    """An aiokafka fetch request's max wait, min bytes, max bytes, isolation level and rack."""
    return (
        request._max_wait_ms,
        request._min_bytes,
        request._max_bytes,
        request._isolation_level,
        request._rack_id,
    )


def replace_tables(cluster: Any, tables: dict[str, Any]) -> None:
    """Make ``tables`` a cluster metadata's partitions (topic -> partition id -> metadata), its
    broker index made anew when asked. Only where `Seams.compact` installed it."""
    cluster._partitions = tables
    cluster._broker_partitions.clear()


def tables(cluster: Any) -> dict[str, Any]:
    """A cluster metadata's partitions, as aiokafka keeps them."""
    found: dict[str, Any] = cluster._partitions
    return found


_followed: weakref.WeakKeyDictionary[Any, frozenset[str]] = weakref.WeakKeyDictionary()
"""Without `FOLLOWED_TOPICS`: the topics a client was last told to follow, per client."""


def followed(client: Any, direct: bool) -> frozenset[str]:
    """The topics ``client`` follows (``direct``: read from it; else as last set here)."""
    if direct:
        return frozenset(client._topics)
    return _followed.get(client, frozenset())


def follow(client: Any, topics: Collection[str], direct: bool) -> None:
    """Make ``client`` follow exactly ``topics``: ``direct`` sets them with no refresh (the
    caller refreshes); else through aiokafka's ``set_topics()``, which refreshes when one is
    new."""
    if direct:
        # A new set, not the old one changed: a refresh under way tells a change by comparing.
        client._topics = set(topics)
        return
    _followed[client] = frozenset(topics)
    client.set_topics(list(topics))
