"""The configuration objects, without servers: each option checked once, the keyword arguments
and the objects as two spellings of one configuration, and the deprecated ``max_wait_ms``."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

import pytest

from aio_cluster import (
    ConfigurationError,
    ConsumerGroup,
    Fetching,
    Membership,
    Processing,
    Strategy,
    Timing,
    ZooKeeperSecurity,
)
from aio_cluster.config import Options, ProcessOptions, Settings
from aio_cluster.member.assembly import milliseconds

SERVERS = ("g", "127.0.0.1:9092", "127.0.0.1:2181", "t")


def test_the_typed_keyword_arguments_are_the_fields_of_the_objects() -> None:
    """The overloads' one list of keyword arguments cannot drift from the objects."""
    fields = {f.name for kind in (Timing, Fetching, Membership) for f in dataclasses.fields(kind)}
    fields |= {f"zookeeper_{f.name}" for f in dataclasses.fields(ZooKeeperSecurity)}
    assert set(typing.get_type_hints(Options)) == fields | {"max_wait_ms"}
    assert set(typing.get_type_hints(ProcessOptions)) == {
        f.name for f in dataclasses.fields(Processing)
    }


@pytest.mark.parametrize("kind", [Timing, Fetching, Membership, ZooKeeperSecurity, Processing])
def test_the_objects_are_frozen_values(kind: type[Any]) -> None:
    made = kind()
    assert made == kind()
    assert not hasattr(made, "__dict__"), "slots"
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(made, dataclasses.fields(kind)[0].name, None)


def test_values_are_kept_in_one_form() -> None:
    assert Membership(strategy="range").strategy is Strategy.RANGE
    auth = ZooKeeperSecurity(auth=[("digest", "a:b")], acl="creator").auth
    assert auth == (("digest", "a:b"),)
    assert milliseconds(Fetching().max_wait) == 500, "Kafka takes the wait in milliseconds"
    assert milliseconds(0.0001) == 1


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Timing(loop_delay=-1), "loop_delay must not be negative, not -1"),
        (
            lambda: Timing(close_timeout="10"),  # type: ignore[arg-type]
            "close_timeout must be positive, not '10'",
        ),
        (
            lambda: Fetching(trail=1),  # type: ignore[arg-type]
            "trail must be True or False, not 1",
        ),
        (
            lambda: Membership(kafka_offsets="both"),  # type: ignore[arg-type]
            "kafka_offsets 'both' is not one of",
        ),
        (lambda: Membership(rack=" "), "rack must be a non-empty string of at most 255"),
        (lambda: Membership(rack=" a "), "without surrounding spaces"),
        (lambda: Membership(rack="a" * 256), "rack must be a non-empty string of at most 255"),
        (
            lambda: ZooKeeperSecurity(tls="yes"),  # type: ignore[arg-type]
            "zookeeper_tls must be True, False or a",
        ),
        (lambda: ZooKeeperSecurity(acl="creator"), "needs zookeeper_auth"),
        (lambda: Processing(concurrency=0), "concurrency must be an integer of at least 1"),
    ],
)
def test_each_object_checks_its_options(make: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        make()


def test_keyword_arguments_build_the_objects() -> None:
    settings = Settings.of(
        {"session_timeout": 30.0, "max_wait": 0.5, "strategy": "range", "zookeeper_tls": True}
    )
    assert settings.timing == Timing(session_timeout=30.0)
    assert settings.fetching == Fetching(max_wait=0.5)
    assert settings.membership == Membership(strategy=Strategy.RANGE)
    assert settings.zookeeper == ZooKeeperSecurity(tls=True)
    given = Timing(claim_timeout=5.0)
    assert Settings.of({}, timing=given).timing is given


def test_an_object_and_its_fields_together_are_refused_naming_the_clash() -> None:
    with pytest.raises(ConfigurationError, match="timing= and session_timeout= both given"):
        Settings.of({"session_timeout": 30.0}, timing=Timing())
    with pytest.raises(ConfigurationError, match="zookeeper_security= and zookeeper_acl="):
        Settings.of({"zookeeper_acl": "open"}, zookeeper_security=ZooKeeperSecurity())
    with pytest.raises(ConfigurationError, match="processing= and concurrency= both given"):
        Processing.of(Processing(), {"concurrency": 3})


def test_an_object_of_the_wrong_kind_and_unknown_arguments_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="timing must be a Timing, not Fetching"):
        Settings.of({}, timing=Fetching())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="unexpected keyword argument 'session'"):
        Settings.of({"session": 3})
    with pytest.raises(TypeError, match="unexpected keyword argument 'order'"):
        Processing.of(None, {"order": "key"})


def test_max_wait_ms_still_works_with_a_deprecation_warning() -> None:
    with pytest.warns(DeprecationWarning, match="pass max_wait, in seconds"):
        settings = Settings.of({"max_wait_ms": 250})
    assert settings.fetching.max_wait == 0.25
    cases: list[tuple[dict[str, object], Fetching | None, str]] = [
        ({"max_wait_ms": -1}, None, "max_wait_ms must be positive, not -1"),
        ({"max_wait_ms": 5, "max_wait": 0.1}, None, "max_wait= and max_wait_ms= both given"),
        ({"max_wait_ms": 5}, Fetching(), "fetching= and max_wait_ms= both given"),
    ]
    for options, given, message in cases:
        with (
            pytest.warns(DeprecationWarning, match="max_wait_ms is deprecated"),
            pytest.raises(ConfigurationError, match=message),
        ):
            Settings.of(options, fetching=given)


@pytest.mark.asyncio
async def test_the_group_takes_either_spelling() -> None:
    by_keyword = ConsumerGroup(*SERVERS, session_timeout=30.0, zookeeper_acl="open")
    by_object = ConsumerGroup(
        *SERVERS, timing=Timing(session_timeout=30.0), zookeeper_security=ZooKeeperSecurity()
    )
    try:
        assert by_keyword._member.parts.settings == by_object._member.parts.settings
    finally:
        await by_keyword.close()
        await by_object.close()
    with pytest.warns(DeprecationWarning, match="max_wait_ms is deprecated") as warned:
        old = ConsumerGroup(*SERVERS, max_wait_ms=20)
    await old.close()
    assert warned[0].filename == __file__, "the warning points at the ConsumerGroup call"
    assert old._member.parts.settings.fetching.max_wait == 0.02


@pytest.mark.parametrize("bad", [0, -1.0, float("inf"), float("nan"), "5", True])
def test_attempt_timeout_must_be_a_positive_number_of_seconds(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="attempt_timeout must be a positive number"):
        Processing(attempt_timeout=bad)  # type: ignore[arg-type]


def test_attempt_timeout_is_unbounded_by_default() -> None:
    assert Processing().attempt_timeout is None


@pytest.mark.parametrize("bad", [0, -5.0, "60", None])
def test_stuck_after_must_be_positive(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="stuck_after must be positive"):
        Timing(stuck_after=bad)  # type: ignore[arg-type]
