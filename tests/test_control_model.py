"""The operator controls' data and its JSON (pure): what is written reads back the same, and
data that is not a control is refused with a typed error naming the node."""

from __future__ import annotations

import pytest

from aio_cluster.control.model import (
    ControlEvent,
    Pause,
    Skip,
    Stopped,
    decode_event,
    decode_pause,
    decode_skip,
    decode_stopped,
    encode_event,
    encode_pause,
    encode_skip,
    encode_stopped,
    format_at,
)
from aio_cluster.errors import CoordinationError
from aio_cluster.zookeeper.layout import PARTITION_ID_MAX, GroupLayout, partition_named


def test_each_control_reads_back_as_written() -> None:
    pause = Pause("t", 2, "ann@host", 1_785_000_000.5)
    assert decode_pause("t", 2, encode_pause(pause)) == pause
    skip = Skip("t", 2, None, 41, "ann@host", 1_785_000_000.0)
    assert decode_skip("t", 2, encode_skip(skip)) == skip
    forward = Skip("t", 2, 500, None, "dashboard 10.0.0.1", 1_785_000_000.0)
    assert decode_skip("t", 2, encode_skip(forward)) == forward
    stopped = Stopped("t", 2, "m-1", 41, "ValueError('poison')", 1_785_000_000.0)
    assert decode_stopped("t", 2, encode_stopped(stopped)) == stopped
    event = ControlEvent(1_785_000_000.0, "ann@host", "skipped", "t", 2, "to offset 42")
    assert decode_event("entry-0000000001", encode_event(event)) == event


def test_a_skip_goes_to_its_offset_or_past_the_record_it_is_stopped_on() -> None:
    assert Skip("t", 0, None, 41, "a", 0.0).target == 42
    assert Skip("t", 0, 100, 41, "a", 0.0).target == 100


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not json",
        b"[1]",
        b'{"at":1}',
        b'{"by":7,"at":1}',
        b'{"by":"a","at":"yesterday"}',
        b'{"by":"a","at":true}',
        b'{"by":"a","at":NaN}',
        b'{"by":"a","at":1e999}',
        b'{"by":"a","at":1e300}',
        b'{"by":"a","at":-1}',
    ],
)
def test_a_pause_that_is_not_one_is_refused(data: bytes) -> None:
    with pytest.raises(CoordinationError, match="pause t/3"):
        decode_pause("t", 3, data)


@pytest.mark.parametrize(
    "data",
    [
        b'{"to":null,"stopped_on":null,"by":"a","at":1}',
        b'{"to":-1,"stopped_on":null,"by":"a","at":1}',
        b'{"to":true,"stopped_on":null,"by":"a","at":1}',
        b'{"to":"5","stopped_on":null,"by":"a","at":1}',
        b'{"to":9223372036854775808,"stopped_on":null,"by":"a","at":1}',
        b'{"to":5,"stopped_on":null,"by":"a","at":Infinity}',
    ],
)
def test_a_skip_without_a_place_to_go_is_refused(data: bytes) -> None:
    with pytest.raises(CoordinationError, match="skip t/3"):
        decode_skip("t", 3, data)


def test_a_stop_or_an_event_that_is_not_one_is_refused() -> None:
    with pytest.raises(CoordinationError, match="'offset'"):
        decode_stopped("t", 3, b'{"member":"m","offset":-2,"error":"e","at":1}')
    with pytest.raises(CoordinationError, match="unknown action 'delete'"):
        decode_event(
            "entry-1",
            b'{"at":1,"by":"a","action":"delete","topic":"t","partition":0,"detail":""}',
        )


def test_times_are_shown_in_utc_to_the_second() -> None:
    assert format_at(0.9) == "1970-01-01T00:00:00Z"
    assert format_at(1_785_000_000) == "2026-07-25T17:20:00Z"


def test_the_control_nodes_sit_beside_the_group_nodes() -> None:
    layout = GroupLayout("g", "t")
    assert layout.paused_node(2) == "/consumers/g/control/paused/t/2"
    assert layout.skip_node(2) == "/consumers/g/control/skips/t/2"
    assert layout.stopped_node(2) == "/consumers/g/control/stopped/t/2"


@pytest.mark.parametrize("name", ["0", "1", "42", str(PARTITION_ID_MAX)])
def test_a_partition_node_is_named_by_its_number_in_ascii_digits(name: str) -> None:
    assert partition_named(name) == int(name)


@pytest.mark.parametrize(
    "name",
    [
        "",
        "²",
        "\u0661",
        "\u0660",
        "01",
        "00",
        "-1",
        "+1",
        " 1",
        "1 ",
        "1_0",
        "p1",
        "2147483648",
        "9" * 5000,
    ],
)
def test_any_other_node_name_is_no_partition(name: str) -> None:
    assert partition_named(name) is None
