"""Stream an offline agent turn with the asyncio client, event by event.

    python examples/sdk/stream_async.py [HOME]

The ``sdk`` profile (dsh-base plus the SDK server) with the scripted provider of
``examples/offline/patch.yml``: no key, no network. Text deltas are printed as they
arrive, tool calls on their own lines; the home is a temporary folder unless HOME is
given.
"""

import asyncio
import sys
import tempfile
from pathlib import Path

from dsh.sdk import AsyncDshClient, ClientConfig

OFFLINE_PATCH = Path(__file__).resolve().parent.parent / "offline" / "patch.yml"


async def stream(home: str) -> None:
    config = ClientConfig(profile="sdk", dsh_home=home, patches=[OFFLINE_PATCH])
    async with AsyncDshClient(config) as client:
        session = await client.new_session()
        async for event in session.stream("Where am I working?"):
            if event.type == "assistant/delta":
                print(event.data["text"], end="", flush=True)
            elif event.type == "tool/call":
                print(f"\n[tool {event.data['name']} {event.data['arguments']}]")
            elif event.type == "turn/end":
                print(f"\n[turn ended: {event.data['reason']['kind']}]")


if len(sys.argv) > 1:
    asyncio.run(stream(sys.argv[1]))
else:
    with tempfile.TemporaryDirectory(prefix="dsh-example-home-") as temporary_home:
        asyncio.run(stream(temporary_home))
