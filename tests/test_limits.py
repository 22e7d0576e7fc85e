"""The pure parts of the kernel's confinement: ``Limits`` values, their hand-over, the words for a death."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from kernel_agent.errors import ConfigError
from kernel_agent.kernel.inside.handover import Rlimits
from kernel_agent.kernel.inside.launcher import read_env
from kernel_agent.kernel.sandbox.cgroup import ProcessCgroup, _cgroup_parents, join_prefix
from kernel_agent.kernel.sandbox.limits import (
    CGROUP_ENV,
    LIMITS_ENV,
    OWNER_ENV,
    Confinement,
    Limits,
    default_memory_mb,
    describe_exit,
)


def test_defaults_are_on_and_sensible() -> None:
    limits = Limits()
    assert limits.memory_mb == default_memory_mb() >= 4096
    assert limits.cpu_seconds is None  # the per-execute timeout bounds each cell
    assert limits.max_processes == 1024
    assert limits.max_file_mb == 2048
    assert limits.network is False  # off in the sandbox unless asked for
    assert limits.active
    assert Limits(sandbox="off").network is True  # unconfined, nothing could cut it
    assert Limits(network=True).network is True and "network: on" in Limits(network=True).describe()


def test_default_memory_is_three_quarters_of_physical_memory() -> None:
    physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert default_memory_mb() == max(4096, physical * 3 // 4 // (1024 * 1024))


def test_off_switches_everything_off() -> None:
    off = Limits.off()
    assert (off.memory_mb, off.cpu_seconds, off.max_processes, off.max_file_mb, off.network) == (
        None,
        None,
        None,
        None,
        True,
    )
    assert not off.active
    assert replace(off, network=False).active


@pytest.mark.parametrize(
    "limits",
    [Limits(), Limits.off(), Limits(memory_mb=2048, cpu_seconds=60, max_processes=64, max_file_mb=1, network=False)],
)
def test_env_round_trip(limits: Limits) -> None:
    assert Limits.from_env(limits.to_env()) == limits


def test_no_env_means_no_limits() -> None:
    assert Limits.from_env(None) == Limits.off()
    assert Limits.from_env("") == Limits.off()


@pytest.mark.parametrize("text", ["not json", '["a"]', '{"memory_mb": 1, "swap_mb": 2}'])
def test_bad_env_is_refused(text: str) -> None:
    with pytest.raises(ConfigError):
        Limits.from_env(text)


@pytest.mark.parametrize(
    "kwargs",
    [{"memory_mb": 0}, {"cpu_seconds": -1}, {"max_processes": 2.5}, {"max_file_mb": True}, {"network": "no"}],
)
def test_bad_values_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        Limits(**kwargs)  # type: ignore[arg-type]


def test_launcher_takes_the_hand_over_variables_out_of_the_environment() -> None:
    limits = Limits(memory_mb=3000, network=False)
    environ = {LIMITS_ENV: limits.to_env(), CGROUP_ENV: "kernel-agent-1-abc", "HOME": "/root"}
    rlimits = Rlimits(memory_mb=3000, max_processes=limits.max_processes, max_file_mb=limits.max_file_mb)
    assert read_env(environ) == (rlimits, True)
    assert environ == {"HOME": "/root"}  # the analysed code never sees them
    assert read_env({LIMITS_ENV: limits.to_env()}) == (rlimits, False)


@pytest.mark.parametrize("text", ["not json", '["a"]', '{"memory_mb": 0}', '{"cpu_seconds": true}'])
def test_launcher_refuses_bad_hand_over(text: str) -> None:
    with pytest.raises(ValueError):
        read_env({LIMITS_ENV: text})


def test_sandbox_setting_is_checked() -> None:
    assert Limits().sandbox == "strict" and Limits.off().sandbox == "strict"
    with pytest.raises(ConfigError, match="sandbox must be one of strict, off"):
        Limits(sandbox="loose")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="needs the sandbox"):
        Limits(network=False, sandbox="off")


def test_the_cgroup_join_prefix_moves_the_command_in_before_it_runs(tmp_path: Path) -> None:
    fakes = [tmp_path / "kernel-agent-1-abc", tmp_path / "kernel-agent-1-def"]
    for fake in fakes:
        fake.mkdir()
    prefix = join_prefix([ProcessCgroup(fake) for fake in fakes])
    done = subprocess.run([*prefix, "/bin/sh", "-c", "echo $$"], capture_output=True, text=True, timeout=30, check=True)
    for fake in fakes:
        assert (fake / "cgroup.procs").read_text().strip() == done.stdout.strip()  # exec kept the pid
    # a join that fails stops the launch with the confinement exit code
    (fakes[1] / "cgroup.procs").unlink()
    (fakes[1] / "cgroup.procs").mkdir()
    failed = subprocess.run([*prefix, "/bin/true"], capture_output=True, timeout=30, check=False)
    assert failed.returncode == 97


def test_the_join_prefix_also_opens_the_filter_for_bwrap(tmp_path: Path) -> None:
    """The same shell opens the sandbox's system-call filter on the descriptor bwrap's ``--add-seccomp-fd``
    names, with the joins or without any."""
    fake = tmp_path / "kernel-agent-1-abc"
    fake.mkdir()
    program = tmp_path / "seccomp.bpf"
    program.write_bytes(b"filter bytes")
    for cgroups in ([ProcessCgroup(fake)], []):
        prefix = join_prefix(cgroups, (3, program))
        done = subprocess.run(
            [*prefix, "/bin/sh", "-c", "echo $$; cat <&3"], capture_output=True, text=True, timeout=30, check=True
        )
        pid, read = done.stdout.splitlines()
        assert read == "filter bytes"
        if cgroups:
            assert (fake / "cgroup.procs").read_text().strip() == pid  # joined, then exec'd with the file open


def test_memory_cgroup_goes_where_the_memory_controller_is() -> None:
    own = "9:name=systemd:/\n8:pids:/agents/a1\n4:memory:/process_api/x\n0::/agents\n"
    assert _cgroup_parents("memory", MOUNTINFO, own) == [
        Path("/sys/fs/cgroup/memory/process_api/x"),
        Path("/sys/fs/cgroup/unified/agents"),
    ]


def test_a_cgroup_we_did_not_make_is_never_touched() -> None:
    with pytest.raises(ConfigError):
        ProcessCgroup("/sys/fs/cgroup/pids")


def test_confinement_env_without_a_process_limit_has_no_cgroup() -> None:
    confinement = Confinement.prepare(replace(Limits.off(), memory_mb=4096))
    assert confinement.cgroup is None
    assert confinement.env == {LIMITS_ENV: confinement.limits.to_env(), OWNER_ENV: str(os.getpid())}
    confinement.release()


MOUNTINFO = """\
30 23 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
35 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 30 0:37 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
42 30 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""


def test_pids_cgroup_goes_under_our_own_cgroup_v1_first() -> None:
    own = "9:name=systemd:/\n8:pids:/agents/a1\n4:memory:/process_api/x\n0::/agents\n"
    assert _cgroup_parents("pids", MOUNTINFO, own) == [
        Path("/sys/fs/cgroup/pids/agents/a1"),
        Path("/sys/fs/cgroup/unified/agents"),
    ]


def test_pids_cgroup_on_a_pure_cgroup2_machine() -> None:
    mountinfo = "29 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
    own = "0::/user.slice/user-1000.slice/user@1000.service/app.slice\n"
    assert _cgroup_parents("pids", mountinfo, own) == [
        Path("/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice")
    ]


def test_no_cgroup_mounts_means_no_parents() -> None:
    assert _cgroup_parents("pids", "22 1 0:5 / /proc rw - proc proc rw\n", "0::/\n") == []


@pytest.mark.parametrize(
    ("returncode", "limits", "oom", "words"),
    [
        (1, Limits(), False, "exit code 1"),
        (-signal.SIGSEGV, Limits(), False, "signal SIGSEGV: segmentation fault"),
        (-signal.SIGXCPU, Limits(cpu_seconds=30), False, "signal SIGXCPU: CPU time limit of 30 s reached"),
        (-signal.SIGXFSZ, Limits(max_file_mb=5), False, "signal SIGXFSZ: file size limit of 5 MB exceeded"),
        (-signal.SIGKILL, Limits.off(), False, "signal SIGKILL: killed from outside"),
        (
            -signal.SIGKILL,
            Limits(memory_mb=2048),
            True,
            "signal SIGKILL: out of memory (the system's out-of-memory killer ran; memory limit 2,048 MB per process "
            "and for all processes together)",
        ),
        (-40, Limits(), False, "signal 40"),
    ],
)
def test_exit_status_in_words(returncode: int, limits: Limits, oom: bool, words: str) -> None:
    assert describe_exit(returncode, limits, oom_killed=oom) == words


CONFINE = """\
import json, resource, signal
from kernel_agent.kernel.inside.launcher import _user_task_count, confine
from kernel_agent.kernel.inside.handover import Rlimits
before = _user_task_count()
confine(Rlimits(memory_mb=3000, cpu_seconds=50, max_processes=7, max_file_mb=5), in_cgroup=False)
print(json.dumps({"before": before, "sigxfsz_ignored": signal.getsignal(signal.SIGXFSZ) == signal.SIG_IGN,
                  **{name: resource.getrlimit(getattr(resource, name))
                     for name in ("RLIMIT_AS", "RLIMIT_CPU", "RLIMIT_NPROC", "RLIMIT_FSIZE", "RLIMIT_CORE")}}))
"""


def test_confine_sets_hard_rlimits_and_falls_back_to_nproc_without_a_cgroup() -> None:
    done = subprocess.run([sys.executable, "-c", CONFINE], capture_output=True, text=True, timeout=60, check=True)
    seen = json.loads(done.stdout)
    mb = 1024 * 1024
    assert seen["RLIMIT_AS"] == [3000 * mb, 3000 * mb]
    assert seen["RLIMIT_CPU"] == [50, 55]  # SIGXCPU at 50 s, SIGKILL 5 s later should SIGXCPU be ignored
    assert seen["RLIMIT_FSIZE"] == [5 * mb, 5 * mb] and seen["sigxfsz_ignored"]
    assert seen["RLIMIT_CORE"] == [0, 0]
    nproc_soft, nproc_hard = seen["RLIMIT_NPROC"]
    # "7 more than the user has now"; other processes of the user may come and go meanwhile
    assert nproc_soft == nproc_hard and abs(nproc_soft - 7 - seen["before"]) <= 100
