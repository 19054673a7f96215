"""One offline agent turn with the blocking client and the ``sdk-minimal`` profile.

    python examples/sdk/minimal.py [HOME]

``examples/offline/patch.yml`` routes the agent to the scripted provider, which answers
from ``script.yml`` instead of a model: no key, no network. The SDK needs an explicit home
(it never uses ``~/.dsh`` on its own); this example makes a temporary one unless HOME is
given. ``sdk-minimal`` is a standalone tree (no dsh-base): every row it runs is listed in
its one bundle.
"""

import sys
import tempfile
from pathlib import Path

from dsh.sdk import ClientConfig, DshClient

OFFLINE_PATCH = Path(__file__).resolve().parent.parent / "offline" / "patch.yml"


def run(home: str) -> None:
    config = ClientConfig(profile="sdk-minimal", dsh_home=home, patches=[OFFLINE_PATCH])
    with DshClient(config) as client:
        runtime = client.runtime
        assert runtime is not None
        print(f"runtime: {runtime.describe()}, version {runtime.version}")
        print("tools:", ", ".join(tool["name"] for tool in client.tools()))
        session = client.new_session()
        result = session.run("Where am I working?")
        for event in result.events:
            if event.type == "tool/call":
                print(f"tool call: {event.data['name']} {event.data['arguments']}")
        print(f"answer ({result.stop_reason}): {result.final_text}")


if len(sys.argv) > 1:
    run(sys.argv[1])
else:
    with tempfile.TemporaryDirectory(prefix="dsh-example-home-") as temporary_home:
        run(temporary_home)
