"""Issue 48: no Python process we start imports what a workspace or someone else's folder holds.

Every place in the package that starts a process is listed below with what it starts; a new one fails
``test_every_place_that_starts_a_process_is_known`` until it is classified, and a Python one must go
through ``kernel_agent._python`` (isolated, ``-I``, by the absolute path of a file of ours). Then each
kind is started for real from a folder planted with a module for every name a Python process could
import (the standard library's, every installed distribution's, ``kernel_agent`` with its launcher,
describer and boot script, ``sitecustomize``/``usercustomize``), each writing a marker when imported:
the describer (and a control: the old ``-m`` start writes the marker), the interpreter probe of
``--python``, the kernel's launcher (our Python, with its network behind pasta, and R's, both with a
restart after the kernel killed itself, its rlimits still in force), and the CLI's whole run from a
colleague's folder (``run -w .`` with its data file there, ``resume`` of it, ``plan --demo``). The marker
is never written.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from openai_server import OpenAIServer, Reply, python_call
from planting import plant

import kernel_agent
from kernel_agent._python import BOOT, code_argv, python_argv, relative_pythonpath, script_argv
from kernel_agent.kernel.sandbox.limits import Limits
from kernel_agent.kernel.session_sync import KernelSession

PACKAGE = Path(kernel_agent.__file__).parent

# (module, function) -> what it starts. Python only through kernel_agent._python.
STARTS = {
    ("kernel_agent.agent.datafiles.describer", "_start"): "python: the describer (python_argv)",
    ("kernel_agent.kernel.python_env", "probe_python"): "python: another interpreter's probe (code_argv)",
    ("kernel_agent.kernel.sandbox.bwrap", "_missing_flags"): "bwrap --help",
    ("kernel_agent.kernel.sandbox.bwrap", "probe_sandbox"): (
        "bwrap ... /bin/true, behind network.py's pasta_launch (python: script_argv) when it probes the network"
    ),
    ("kernel_agent.kernel.sandbox.pasta_launch", "_fence"): "nsenter ... nft",
    ("kernel_agent.kernel.sandbox.pasta_launch", "main"): "the sandbox's command (bwrap) and pasta",
    ("kernel_agent.kernel.inside.launcher", "main"): "the kernel's own command (--exec), confined",
    ("kernel_agent.kernel.providers.local", "_start"): "the kernel: launch_spec's argv (launcher_argv)",
    ("kernel_agent.notebook.replay", "_execute"): "the kernel: launch_spec's argv, through nbclient",
    ("kernel_agent.kernel.sandbox.template", "_popen"): "python: a kernel template (python_argv), in its bwrap sandbox",
    (
        "kernel_agent.kernel.providers.forked",
        "_fork",
    ): "a forked kernel's sandbox: the cgroup join, bwrap, a shell holder",
}
STARTING_CALLS = {
    ("subprocess", "run"),
    ("subprocess", "Popen"),
    ("subprocess", "call"),
    ("subprocess", "check_call"),
    ("subprocess", "check_output"),
    ("os", "execv"),
    ("os", "execvp"),
    ("os", "execve"),
    ("os", "execvpe"),
    ("os", "posix_spawn"),
    ("os", "posix_spawnp"),
    ("os", "system"),
    ("os", "popen"),
    ("asyncio", "create_subprocess_exec"),
    ("asyncio", "create_subprocess_shell"),
}


def starting_places() -> dict[tuple[str, str], int]:
    """Every call in the package that starts a process (``subprocess.*``, ``os.exec*``/``spawn``/``system``,
    ``asyncio.create_subprocess_*``, a kernel manager's ``start_kernel``/``async_execute``), by module and
    enclosing function."""
    found: dict[tuple[str, str], int] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                    continue
                owner = node.func.value
                name = owner.id if isinstance(owner, ast.Name) else ""
                if (name, node.func.attr) in STARTING_CALLS or node.func.attr in ("start_kernel", "async_execute"):
                    key = (module, function.name)
                    found[key] = found.get(key, 0) + 1
    return found


def test_every_place_that_starts_a_process_is_known() -> None:
    places = starting_places()
    unknown = sorted(key for key in places if key not in STARTS)
    assert unknown == [], "classify each new process start in STARTS (a Python one through kernel_agent._python)"
    assert set(STARTS) <= set(places), "a listed start is gone: drop it from STARTS"


def test_no_module_names_an_interpreter_to_start_but_the_one_rule() -> None:
    """``sys.executable`` is started only by ``_python``; elsewhere it is only compared or shown; no argv
    anywhere else says ``-m`` or ``-c``."""
    allowed = {
        "kernel_agent._python",  # the rule
        "kernel_agent.kernel.sandbox.bwrap",  # the interpreter's folders, bound read-only into the sandbox
        "kernel_agent.kernel.kernelspec",  # which interpreter a kernelspec names; handed to launcher_argv
        "kernel_agent.kernel.sandbox.template",  # a template's key names its interpreter (started by python_argv)
        "kernel_agent.cli.invocation",  # prints the command a user can type (`python -m kernel_agent.cli`); runs none
    }
    users = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            executable = (
                isinstance(node, ast.Attribute)
                and node.attr == "executable"
                and isinstance(node.value, ast.Name)
                and node.value.id == "sys"
            )
            # [<an interpreter>, "-m"/"-c"/"-I", ...]: a Python started by hand (a shell's "-c" names its program)
            flag = (
                isinstance(node, ast.List | ast.Tuple)
                and len(node.elts) > 1
                and not isinstance(node.elts[0], ast.Constant)
                and isinstance(node.elts[1], ast.Constant)
                and node.elts[1].value in ("-m", "-c", "-I")
            )
            if executable or flag:
                users.add(module)
    assert users - allowed == set()


def test_the_one_rule_is_isolated_and_absolute() -> None:
    argv = python_argv("kernel_agent.agent.datafiles.describe_worker", "3")
    assert argv == [sys.executable, "-I", str(BOOT), "kernel_agent.agent.datafiles.describe_worker", "3"]
    assert BOOT.is_absolute() and BOOT.is_file()
    other = python_argv("m", interpreter="/opt/py", package_root=Path("/run/x/pythonpath"))
    assert other[:3] == ["/opt/py", "-I", "/run/x/pythonpath/kernel_agent/_boot.py"]
    assert script_argv("/a/b.py", "x", site=False) == [sys.executable, "-I", "-S", "/a/b.py", "x"]
    assert code_argv("/opt/py", "print(1)") == ["/opt/py", "-I", "-c", "print(1)"]


# ------------------------------------------------------------------ planted folders
def own_env(**extra: str) -> dict[str, str]:
    """The test's environment for a process it starts in a planted folder, without the caller's relative
    ``PYTHONPATH`` entries (``PYTHONPATH=.`` would have the interpreter import the planted modules before any
    code of ours runs: the caller's doing, which ``test_the_cli_warns_of_a_relative_pythonpath`` covers)."""
    env = {**os.environ, **extra}
    kept = [entry for entry in env.pop("PYTHONPATH", "").split(os.pathsep) if os.path.isabs(entry)]
    return {**env, "PYTHONPATH": os.pathsep.join(kept)} if kept else env


def harness(code: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a Python process of the test's own, started in ``cwd`` but safe from it
    (``PYTHONSAFEPATH``): what it starts is the subject."""
    env = own_env(PYTHONSAFEPATH="1")
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def test_the_describer_started_from_a_planted_folder_imports_nothing_there(tmp_path: Path) -> None:
    folder = tmp_path / "colleague"
    marker = plant(folder)
    (folder / "sales.csv").write_text("region,revenue\nWest,10\nEast,20\n")
    code = (
        "from pathlib import Path\n"
        "from kernel_agent.agent.datafiles.describer import describe\n"
        "print(describe(Path('sales.csv').absolute()))\n"
    )
    done = harness(code, folder)
    assert done.returncode == 0, done.stderr
    assert "revenue" in done.stdout
    assert not marker.exists()


def test_control_the_old_start_of_the_describer_ran_what_was_planted(tmp_path: Path) -> None:
    """The attack is real: ``python -m kernel_agent.agent.datafiles.describe_worker`` from the folder (the start before
    issue 48) imports what was planted there."""
    marker = plant(tmp_path / "colleague")
    subprocess.run(
        [sys.executable, "-m", "kernel_agent.agent.datafiles.describe_worker", "0"],
        cwd=tmp_path / "colleague",
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert marker.read_text().split()  # the first planted name it met ran (runpy's own importlib, here)


def test_the_interpreter_probe_from_a_planted_folder_imports_nothing_there(tmp_path: Path) -> None:
    folder = tmp_path / "colleague"
    marker = plant(folder)
    code = (
        "import sys\nfrom kernel_agent.kernel.python_env import probe_python\n"
        "print(probe_python(sys.executable).version)\n"
    )
    done = harness(code, folder)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == sys.version.split()[0]
    assert not marker.exists()


def test_a_relative_pythonpath_entry_is_named() -> None:
    assert relative_pythonpath({"PYTHONPATH": f"/opt/lib{os.pathsep}{os.pathsep}src{os.pathsep}."}) == ["", "src", "."]
    assert relative_pythonpath({"PYTHONPATH": "/opt/lib"}) == relative_pythonpath({}) == []


def test_the_cli_warns_of_a_relative_pythonpath(tmp_path: Path) -> None:
    """The interpreter imports from a relative ``PYTHONPATH`` entry before our code runs: the CLI says so, on
    stderr, with the fix; an absolute entry (this checkout's, so that the command is the code under test) is
    not named."""
    root = str(PACKAGE.parent)
    script = str(Path(sys.executable).with_name("kernel-agent"))
    warned = []
    for pythonpath in (f".{os.pathsep}{root}", root):
        done = subprocess.run(
            [script, "--version"],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": pythonpath},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        warned.append(done.stderr)
    assert "PYTHONPATH holds '.'" in warned[0] and str(tmp_path) in warned[0] and "absolute" in warned[0]
    assert "PYTHONPATH" not in warned[1]


# ------------------------------------------------------------------ kernels in a planted workspace
LIMITED = Limits(memory_mb=3000, max_file_mb=7)


def assert_confined_python(session: KernelSession) -> None:
    limits = session.execute(
        "import resource\n"
        "print(resource.getrlimit(resource.RLIMIT_AS)[1] >> 20, resource.getrlimit(resource.RLIMIT_FSIZE)[1] >> 20)"
    )
    assert limits.stdout.split() == ["3000", "7"], limits


@pytest.mark.kernel
def test_a_planted_launcher_never_runs_on_a_restart(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    marker = plant(workspace)
    with KernelSession(workspace, limits=LIMITED) as session:
        assert_confined_python(session)
        # the code plants its own launcher too, then kills the kernel: the restart starts one
        launcher = f"open({str(marker)!r}, 'a').write('replanted')\n"
        replant = session.execute(
            "import os\n"
            "os.makedirs('kernel_agent/kernel/inside', exist_ok=True)\n"
            f"open('kernel_agent/kernel/inside/launcher.py', 'w').write({launcher!r})\n"
            "os._exit(1)"
        )
        assert replant.status == "died"
        assert_confined_python(session)
        where = session.execute("import kernel_agent, json\nprint(kernel_agent.__file__)").stdout.strip()
        assert not where.startswith(str(workspace))
        pandas = session.execute("import pandas\nprint(pandas.__file__)").stdout.strip()
        assert "site-packages" in pandas
    assert not marker.exists()


@pytest.mark.kernel
def test_a_kernel_with_its_network_starts_clean_in_a_planted_workspace(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    marker = plant(workspace)
    with KernelSession(workspace, limits=Limits(memory_mb=3000, max_file_mb=7, network=True)) as session:
        assert_confined_python(session)
    assert not marker.exists()


@pytest.mark.kernel
def test_an_r_kernel_starts_and_restarts_clean_in_a_planted_workspace(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    marker = plant(workspace)
    with KernelSession(workspace, kernel_name="ir", limits=LIMITED) as session:
        assert session.execute("cat(1 + 1)").stdout == "2"
        assert session.execute("quit(save = 'no', status = 3)").status == "died"
        limits = session.execute("cat(grep('Max file size', readLines('/proc/self/limits'), value = TRUE))")
        assert limits.stdout.split()[3:5] == [str(7 << 20)] * 2, limits
    assert not marker.exists()


# ------------------------------------------------------------------ the CLI, run from a colleague's folder
def cli(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real ``kernel-agent`` command, started in ``folder``."""
    return subprocess.run(
        [str(Path(sys.executable).with_name("kernel-agent")), *args],
        cwd=folder,
        env=own_env(OPENAI_API_KEY="sk-test"),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def printed(notebook: Path) -> list[str]:
    return [
        "".join(output.get("text", ""))
        for cell in json.loads(notebook.read_text())["cells"]
        for output in cell.get("outputs", [])
    ]


@pytest.mark.kernel
def test_run_resume_and_plan_from_a_colleagues_planted_folder_import_nothing_there(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    folder = tmp_path / "colleague"
    marker = plant(folder)
    (folder / "sales.csv").write_text("region,revenue\nWest,10\nEast,20\n")
    openai_server.add(
        Reply("Kill it.", tool_calls=(python_call("import os\nos._exit(1)"),)),
        Reply("Total.", tool_calls=(python_call("print(pd.read_csv('sales.csv').revenue.sum())"),)),
        Reply("Revenue totals 30."),
        Reply("Double.", tool_calls=(python_call("print(2 * pd.read_csv('sales.csv').revenue.sum())"),)),
        Reply("Twice the revenue is 60."),
    )
    model = ["--model", "m", "--base-url", openai_server.base_url, "--protocol", "tools", "--quiet"]
    done = cli(folder, "run", "Total revenue", *model, "--data", "sales.csv", "-w", ".", "--out", "../run.ipynb")
    assert done.returncode == 0, done.stderr
    assert "30\n" in printed(tmp_path / "run.ipynb")  # after the kernel killed itself and was started again
    assert "revenue" in json.dumps(openai_server.requests[0])  # the describer described sales.csv
    done = cli(folder, "resume", "../run.ipynb", "Twice that?", *model, "-w", ".")
    assert done.returncode == 0, done.stderr
    assert "60\n" in printed(tmp_path / "run.ipynb")
    done = cli(folder, "plan", "--demo", "-w", "plan-ws", "-o", "../plan.ipynb")
    assert done.returncode == 0, done.stderr
    assert not marker.exists()
