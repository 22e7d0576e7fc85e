"""Start a bubblewrap sandbox, give its network namespace user-mode networking, then let it run.

Run by the kernel's launch command when the network is on (``network.py`` builds the command); host
side, standard library only, started as ``python -I -S pasta_launch.py PASTA NSENTER NFT -- BWRAP-ARGV...``:

1. start bwrap with ``--info-fd`` (it reports its sandbox's pid) and ``--block-fd`` (the sandboxed
   command waits until we say go), so the kernel never runs without its network set up; the
   descriptors its ``--add-seccomp-fd`` options name (the system-call filter) are passed on to it;
2. attach ``pasta`` to that sandbox's network namespace only (``--netns-only``: pasta joins no user
   namespace; pasta 2023's own spawn mode cannot map users when run as root), with no port forwarded
   either way and the gateway not mapped to the host, so the namespace's 127.0.0.1 is its own;
3. fence this machine off: pasta relays a connection to any address through an ordinary socket of the
   host, so one to another of the host's own addresses (a second interface, a container bridge) would
   reach the host's services. ``nft`` rules in the sandbox's namespace (entered with ``nsenter``) reject
   every packet to an address this machine has now (``host_addresses``: IPv4 and IPv6, loopback
   included), except what stays on the namespace's own loopback. They are set before the kernel runs,
   and the kernel, without capabilities in that namespace's user namespace, cannot change them;
4. unblock the sandbox, forward SIGTERM/SIGINT/SIGHUP to bwrap, and exit with bwrap's status.

pasta runs in the foreground as our child (its network is up once the namespace shows an interface
besides ``lo``) and is ended when the sandbox ends. If this process is killed, bwrap's
``--die-with-parent`` ends the sandbox and pasta's parent-death signal ends pasta. Exit status 125 with
a message on stderr when the network cannot be set up: the kernel then never starts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

SETUP_FAILED = 125


def pasta_options(binary: str) -> list[str]:
    """pasta's options around a namespace path: a network of its own, nothing forwarded, no way back."""
    return [
        binary,
        "--config-net",
        "--quiet",
        "--foreground",
        "--runas",
        str(os.getuid()),
        "-t",
        "none",
        "-u",
        "none",
        "-T",
        "none",
        "-U",
        "none",
        "--no-map-gw",
        "--netns-only",
        "--netns",
    ]


def host_addresses() -> list[str]:
    """Every address of this network namespace's interfaces (where this process runs), as ``ADDR/PREFIX``: the
    IPv4 ones the kernel routes as local (``/proc/net/fib_trie``), the IPv6 ones assigned
    (``/proc/net/if_inet6``). Raises ``OSError``."""
    found: list[str] = []
    with open("/proc/net/fib_trie", encoding="ascii") as trie:
        address = ""
        for line in trie:
            words = line.split()
            if words[:1] == ["|--"]:
                address = words[1]
            elif words and words[0].startswith("/") and words[-1] == "LOCAL" and address:
                found.append(f"{address}{words[0]}")
    try:
        with open("/proc/net/if_inet6", encoding="ascii") as table:
            for line in table:
                raw = line.split()[0]
                found.append(":".join(raw[i : i + 4] for i in range(0, 32, 4)) + "/128")
    except FileNotFoundError:  # no IPv6 here
        pass
    return list(dict.fromkeys(found))


def fence_rules(addresses: list[str]) -> str:
    """The nft script that rejects every packet out of the sandbox's namespace to ``addresses``, except on its
    own loopback (its own addresses, which pasta copies from the host's, are local there)."""
    rules = [f"{'ip6' if ':' in address else 'ip'} daddr {address} reject" for address in addresses]
    body = "\n    ".join(['oifname "lo" accept', *rules])
    return (
        "table inet kernel_agent_fence {\n  chain output {\n"
        "    type filter hook output priority filter; policy accept;\n"
        f"    {body}\n  }}\n}}\n"
    )


def _fence(pid: int, nsenter: str, nft: str) -> None:
    """Set ``fence_rules`` for this machine's addresses in ``pid``'s network namespace. Raises ``RuntimeError``."""
    try:
        rules = fence_rules(host_addresses())
        done = subprocess.run(
            [nsenter, f"--net=/proc/{pid}/ns/net", "--", nft, "-f", "-"],
            input=rules.encode(),
            capture_output=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"cannot fence this machine's addresses off the sandbox's network: {exc}") from exc
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        raise RuntimeError(
            "cannot fence this machine's addresses off the sandbox's network (nft in its namespace: "
            f"{'; '.join(said[-3:]) or done.returncode})"
        )


def _info(fd: int) -> dict[str, object]:
    data = b""
    while True:
        chunk = os.read(fd, 4096)
        data += chunk
        try:
            info: dict[str, object] = json.loads(data)
            return info
        except ValueError:
            if not chunk:
                raise RuntimeError("bubblewrap ended before it reported its sandbox") from None


def _die_with_us() -> None:
    """In pasta's process before it starts: SIGKILL when this launcher dies, however it dies."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _wait_for_network(pid: int, relay: subprocess.Popen[bytes], seconds: float = 20.0) -> None:
    """Return once pasta has configured the sandbox's namespace: a default route there, or an interface
    besides ``lo`` for half a second (a host with no default route has none to copy)."""
    deadline = time.monotonic() + seconds
    since = None
    while time.monotonic() < deadline:
        if relay.poll() is not None:
            said = [
                line
                for line in (relay.stderr.read() if relay.stderr else b"").decode(errors="replace").splitlines()
                if "syslog" not in line
            ]
            raise RuntimeError(f"pasta could not set up the sandbox's network: {'; '.join(said) or relay.returncode}")
        if _default_route(pid):
            return
        with open(f"/proc/{pid}/net/dev", encoding="ascii") as table:
            names = [line.split(":", 1)[0].strip() for line in table.readlines()[2:]]
        if any(name != "lo" for name in names):
            since = since or time.monotonic()
            if time.monotonic() - since > 0.5:
                return
        time.sleep(0.005)
    raise RuntimeError(f"pasta did not set up the sandbox's network within {seconds:.0f} s")


def _default_route(pid: int) -> bool:
    with open(f"/proc/{pid}/net/route", encoding="ascii") as table:
        if any(line.split()[1] == "00000000" for line in table.readlines()[1:] if len(line.split()) > 1):
            return True
    try:
        with open(f"/proc/{pid}/net/ipv6_route", encoding="ascii") as table:
            return any(line.split()[:2] == ["0" * 32, "00"] and line.split()[-1] != "lo" for line in table)
    except OSError:  # no IPv6 here
        return False


def _end(relay: subprocess.Popen[bytes] | None) -> None:
    if relay is not None and relay.poll() is None:
        relay.kill()
        relay.wait()


def _descriptors(bwrap: list[str]) -> list[int]:
    """The descriptors bwrap's own options name (its seccomp filters), passed on to it as they are."""
    options = bwrap[: bwrap.index("--")] if "--" in bwrap else bwrap  # not the sandboxed command's own
    return [
        int(value)
        for option, value in zip(options, options[1:], strict=False)
        if option in ("--seccomp", "--add-seccomp-fd") and value.isdigit()
    ]


def main(argv: list[str]) -> int:
    pasta, nsenter, nft, separator, *bwrap = [*argv, "", "", "", ""][: max(len(argv), 4)]
    if separator != "--" or not bwrap:
        sys.stderr.write("usage: pasta_launch.py PASTA NSENTER NFT -- BWRAP [OPTIONS] -- COMMAND\n")
        return SETUP_FAILED
    info_r, info_w = os.pipe()
    block_r, block_w = os.pipe()
    sandbox = subprocess.Popen(
        [bwrap[0], "--info-fd", str(info_w), "--block-fd", str(block_r), *bwrap[1:]],
        pass_fds=(info_w, block_r, *_descriptors(bwrap)),
    )
    os.close(info_w)
    os.close(block_r)
    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, lambda signum, _frame: sandbox.send_signal(signum))
    relay = None
    try:
        pid = int(str(_info(info_r)["child-pid"]))  # bwrap's JSON: a number
        relay = subprocess.Popen(
            [*pasta_options(pasta), f"/proc/{pid}/ns/net"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            preexec_fn=_die_with_us,
        )
        _wait_for_network(pid, relay)
        _fence(pid, nsenter, nft)
    except (OSError, RuntimeError, KeyError, ValueError) as exc:
        sys.stderr.write(f"{exc}\n")
        sandbox.kill()
        sandbox.wait()
        _end(relay)
        return SETUP_FAILED
    finally:
        os.close(info_r)
    os.write(block_w, b"go")
    os.close(block_w)
    status = sandbox.wait()
    _end(relay)
    if status < 0:  # ended by a signal: end the same way, so whoever waits on us sees what happened
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
