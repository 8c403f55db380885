"""A desktop or system service gone wrong, on a real bus: it owns NAME (and any more
names given) on the bus at ADDRESS, and when a method call reaches it, it either
dies on the spot without replying (`die`: a service that crashes mid-call; the bus
then answers the caller NoReply) or keeps the call unanswered for good (`freeze`: a
stopped or deadlocked service, such as a frozen notification daemon or panel).

    python broken_service.py die|freeze ADDRESS NAME...

Prints `ready` once every name is owned.
"""

from __future__ import annotations

import asyncio
import os
import sys

from dbus_fast import MessageType
from dbus_fast.aio import MessageBus


async def main(how: str, address: str, names: list[str]) -> None:
    bus = await MessageBus(bus_address=address).connect()

    def on_message(message) -> bool:
        if message.message_type is not MessageType.METHOD_CALL:
            return False
        if how == "die":
            os._exit(0)  # mid-call: the caller is left with a pending call
        return True  # handled: no reply, ever

    bus.add_message_handler(on_message)
    for name in names:
        await bus.request_name(name)
    print("ready", flush=True)
    await bus.wait_for_disconnect()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
