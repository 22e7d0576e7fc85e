"""--network reaches the outside but no address of this machine, whatever interfaces it has.

The machine here is a network namespace of the test's own (``unshare --net``, as root), so interfaces can
be added without touching the real one: ``ka-out``, a veth to an "outside" namespace (10.77.0.2, the
default route; pasta copies ``ka-out``'s address into the sandbox), and ``ka-second``, a second interface
with 10.88.0.1 and fd88::1 (what a container bridge or a VPN adds). A server listens on every address of
the machine; a kernel with the network on must reach the outside's server and none of the machine's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.kernel  # and root: the machine is a network namespace of the test's own

OUTSIDE = """
import ctypes, signal, socket, subprocess, time
ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: ends with the machine's process
while "ka-peer:" not in open("/proc/self/net/dev").read():  # /sys shows the namespace that mounted it
    time.sleep(0.01)
for command in ("ip link set lo up", "ip addr add 10.77.0.2/24 dev ka-peer", "ip link set ka-peer up"):
    subprocess.run(command.split(), check=True)
server = socket.create_server(("10.77.0.2", 0))
print(server.getsockname()[1], flush=True)
while True:
    connection, _ = server.accept()
    connection.sendall(b"outside")
    connection.close()
"""

MACHINE = r"""
import json, socket, subprocess, sys, tempfile
from pathlib import Path

def ip(command):
    subprocess.run(["ip", *command.split()], check=True)

ip("link set lo up")
outside = subprocess.Popen(["unshare", "--net", sys.executable, "-c", sys.argv[1]], stdout=subprocess.PIPE, text=True)
try:
    ip("link add ka-out type veth peer name ka-peer")
    ip(f"link set ka-peer netns {outside.pid}")
    ip("addr add 10.77.0.1/24 dev ka-out")
    ip("link set ka-out up")
    ip("route add default via 10.77.0.2")
    ip("link add ka-second type veth peer name ka-second-end")  # a veth: no dummy driver in every container
    ip("addr add 10.88.0.1/24 dev ka-second")
    ip("addr add fd88::1/64 dev ka-second nodad")
    ip("link set ka-second up")
    ip("link set ka-second-end up")
    outside_port = int(outside.stdout.readline())
    machine = socket.create_server(("::", 0), family=socket.AF_INET6, dualstack_ipv6=True)
    port = machine.getsockname()[1]
    addresses = ["10.77.0.1", "10.88.0.1", "127.0.0.1", "fd88::1", "::1"]
    probe = (
        "import json, socket\n"
        "def reach(host, port):\n"
        "    try:\n"
        "        with socket.create_connection((host, port), timeout=5) as s:\n"
        "            return 'connected: ' + s.recv(16).decode()\n"
        "    except OSError as exc:\n"
        "        return type(exc).__name__\n"
        f"found = {{a: reach(a, {port}) for a in {addresses!r}}}\n"
        f"print(json.dumps(found | {{'outside': reach('10.77.0.2', {outside_port})}}))"
    )
    from kernel_agent.kernel.sandbox.limits import Limits
    from kernel_agent.kernel.session_sync import KernelSession
    with tempfile.TemporaryDirectory(prefix="kernel-agent-fence-") as folder:
        with KernelSession(Path(folder), limits=Limits(network=True)) as session:
            result = session.execute(probe, timeout=60)
    machine.settimeout(0)
    try:
        machine.accept()
        arrived = True
    except BlockingIOError:
        arrived = False
    print(json.dumps({"stdout": result.stdout, "error": str(result.error), "arrived": arrived}))
finally:
    outside.kill()
    outside.wait()
"""


def test_the_kernel_reaches_the_outside_and_no_address_of_this_machine(tmp_path: Path) -> None:
    done = subprocess.run(
        ["unshare", "--net", sys.executable, "-c", MACHINE, OUTSIDE],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    reached = json.loads(found["stdout"])
    assert reached["outside"] == "connected: outside", found  # the network is on
    machine = {address: how for address, how in reached.items() if address != "outside"}
    assert not [a for a, how in machine.items() if how.startswith("connected")], machine
    assert found["arrived"] is False  # nothing reached this machine's listener
