"""A member on a machine where cramjam cannot be imported, so aiokafka cannot decode zstd, lz4 or
snappy batches: what does its iteration do?

Usage: python codec_missing_worker.py BOOTSTRAP ZOOKEEPER TOPIC GROUP

Prints one JSON line: the records handed out (``[partition, offset]`` pairs) and the error the
iteration raised within 10 s of joining (``type``, ``partition``, ``offset``, ``message``), or
``"type": null`` when it raised none in that time.
"""

from __future__ import annotations

import sys

# Before anything imports aiokafka: `import cramjam` now raises ImportError, as where it is not
# installed.
sys.modules["cramjam"] = None  # type: ignore[assignment]

import asyncio  # noqa: E402
import json  # noqa: E402

from aio_cluster import AioClusterError, ConsumerGroup  # noqa: E402


async def main(bootstrap: str, zookeeper: str, topic: str, group: str) -> None:
    import aiokafka.codec  # noqa: PLC0415

    assert not aiokafka.codec.has_zstd(), "cramjam was imported after all"
    handed_out: list[list[int]] = []
    error: dict[str, object] = {"type": None}

    async def consume(member: ConsumerGroup) -> None:
        async for partition, batch in member:
            handed_out.extend([partition, record.offset] for record in batch)

    async with ConsumerGroup(group, bootstrap, zookeeper, topic, loop_delay=0.1) as member:
        try:
            await asyncio.wait_for(consume(member), 10)
        except asyncio.TimeoutError:
            pass
        except AioClusterError as exc:
            error = {
                "type": type(exc).__name__,
                "partition": getattr(exc, "partition", None),
                "offset": getattr(exc, "offset", None),
                "message": str(exc),
                "state": member.state.value,
            }
    print(json.dumps({"handed_out": handed_out, "error": error}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
