"""A kernel forked from the template holds nothing of its siblings': writing to every socket it has cannot make
the host think a sibling died (the template keeps each kernel's channel, and a forked child must not inherit them)."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import pytest

from kernel_agent.kernel.session import AsyncKernelSession

pytestmark = pytest.mark.kernel

FORKED = "start: forked from a warmed template"

SPRAY = textwrap.dedent("""
    import json, os, socket, stat
    sprayed = 0
    for name in os.listdir('/proc/self/fd'):
        fd = int(name)
        try:
            if fd > 2 and stat.S_ISSOCK(os.fstat(fd).st_mode):
                kind = socket.socket(fileno=os.dup(fd)).type
                if kind == socket.SOCK_SEQPACKET:  # the channels' kind: ZMQ's ipc sockets are streams
                    os.write(fd, json.dumps({"status": 0}).encode())
                    sprayed += 1
        except OSError:
            pass
    print('sprayed', sprayed)
""")


def test_a_kernel_cannot_report_a_sibling_dead(tmp_path: Path) -> None:
    async def scenario() -> tuple[str, str, str]:
        victim = await AsyncKernelSession(tmp_path / "victim").start()
        attacker = await AsyncKernelSession(tmp_path / "attacker").start()
        try:
            assert FORKED in victim.confinement and FORKED in attacker.confinement
            await victim.execute("kept = 41")
            sprayed = (await attacker.execute(SPRAY)).stdout.strip()
            alive = await victim.is_alive()
            after = (await victim.execute("kept + 1")).result_text
            return sprayed, str(alive), str(after)
        finally:
            await attacker.close()
            await victim.close()

    sprayed, alive, after = asyncio.run(scenario())
    assert sprayed == "sprayed 0"  # no sequenced-packet socket at all: neither its own channel nor a sibling's
    assert alive == "True" and after == "42"
