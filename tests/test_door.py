"""The door between the host and a workspace: no link is followed at any component, writes never go
through a planted name, and a folder swapped for a link mid-read (renameat2 RENAME_EXCHANGE in a loop)
never leads the host outside. Pure host-side tests: real files, real syscalls, no kernel."""

from __future__ import annotations

import ast
import ctypes
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from kernel_agent.errors import WorkspaceFileError
from kernel_agent.kernel import door as door_module
from kernel_agent.kernel.door import Door


@pytest.fixture(params=["openat2", "walk"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test runs both ways: openat2 (where this kernel has it) and the component walk."""
    monkeypatch.setattr(door_module, "_WALK_ONLY", request.param == "walk")
    return str(request.param)


@pytest.fixture
def place(tmp_path: Path) -> tuple[Path, Path]:
    """A workspace and, beside it, a host secret the kernel would like the host to read or overwrite."""
    workspace = tmp_path / "workspace"
    (workspace / "sub").mkdir(parents=True)
    (workspace / "sub" / "data.txt").write_text("inside\n")
    outside = tmp_path / "host"
    outside.mkdir()
    (outside / "secret.txt").write_text("HOST SECRET\n")
    (outside / "data.txt").write_text("HOST SECRET\n")
    return workspace, outside


def test_reads_a_file_and_refuses_links_and_ways_out(mode: str, place: tuple[Path, Path]) -> None:
    workspace, outside = place
    gate = Door(workspace)
    assert gate.read("sub/data.txt") == b"inside\n"
    assert gate.read_head("sub/data.txt", 3) == (b"ins", 7)
    (workspace / "link.txt").symlink_to(outside / "secret.txt")
    (workspace / "linkdir").symlink_to(outside)
    for path in ("link.txt", "linkdir/secret.txt", "../host/secret.txt", "/etc/passwd", "sub/../../host/secret.txt"):
        with pytest.raises(WorkspaceFileError):
            gate.read(path)
    with pytest.raises(FileNotFoundError):
        gate.read("sub/missing.txt")
    assert not gate.has_file("link.txt") and gate.has_file("sub/data.txt")


def test_a_fifo_or_a_folder_is_refused_without_hanging(mode: str, place: tuple[Path, Path]) -> None:
    workspace, _ = place
    os.mkfifo(workspace / "pipe")
    gate = Door(workspace)
    with pytest.raises(WorkspaceFileError, match="not a regular file"):
        gate.read("pipe")  # a plain open() would wait for a writer forever
    with pytest.raises(WorkspaceFileError, match="not a regular file"):
        gate.read("sub")


def test_a_write_replaces_a_planted_link_and_never_writes_through_it(mode: str, place: tuple[Path, Path]) -> None:
    workspace, outside = place
    (workspace / "out.csv").symlink_to(outside / "secret.txt")
    (workspace / "sub" / "deep").symlink_to(outside)
    gate = Door(workspace)
    assert gate.write("out.csv", b"ours", mode=0o444) == 4
    assert (outside / "secret.txt").read_text() == "HOST SECRET\n"
    assert not (workspace / "out.csv").is_symlink() and (workspace / "out.csv").read_bytes() == b"ours"
    assert (workspace / "out.csv").stat().st_mode & 0o777 == 0o444
    with pytest.raises(WorkspaceFileError):
        gate.write("sub/deep/data.txt", b"x")  # a folder on the way is a link: refused
    assert (outside / "data.txt").read_text() == "HOST SECRET\n"
    assert gate.write("new/folder/file.txt", b"made") == 4 and (workspace / "new/folder/file.txt").is_file()
    assert not [p for p in workspace.rglob("*partial*")]


def test_planted_temp_names_cannot_catch_a_write(mode: str, place: tuple[Path, Path]) -> None:
    # The old copy wrote to a predictable ".<name>.kernel-agent-partial": the kernel planted it as a link.
    workspace, outside = place
    (workspace / ".sales.csv.kernel-agent-partial").symlink_to(outside / "secret.txt")
    source = workspace.parent / "sales.csv"
    source.write_text("a,b\n1,2\n")
    Door(workspace).copy_in(source, "sales.csv", mode=0o444)
    assert (outside / "secret.txt").read_text() == "HOST SECRET\n"
    assert (outside / "secret.txt").stat().st_mode & 0o777 != 0o444
    assert (workspace / "sales.csv").read_text() == "a,b\n1,2\n"


def test_an_append_never_writes_through_a_link_a_fifo_or_another_name(mode: str, place: tuple[Path, Path]) -> None:
    workspace, outside = place
    gate = Door(workspace)
    assert gate.append("log/a.jsonl", b"one\n") == 4 and gate.append("log/a.jsonl", b"two\n") == 4
    assert (workspace / "log" / "a.jsonl").read_bytes() == b"one\ntwo\n"
    (workspace / "linked").symlink_to(outside / "secret.txt")
    (workspace / "dangling").symlink_to(outside / "made-by-us.txt")
    (workspace / "deep").symlink_to(outside)
    os.mkfifo(workspace / "pipe")
    os.link(outside / "data.txt", workspace / "hard")
    for name in ("linked", "dangling", "deep/data.txt", "pipe", "hard", "sub"):
        with pytest.raises(WorkspaceFileError):
            gate.append(name, b"evil\n")  # the FIFO: refused at once, no reader waited for
    assert (outside / "secret.txt").read_text() == "HOST SECRET\n" == (outside / "data.txt").read_text()
    assert sorted(p.name for p in outside.iterdir()) == ["data.txt", "secret.txt"]


def test_a_folder_is_made_only_where_no_link_leads(mode: str, place: tuple[Path, Path]) -> None:
    workspace, outside = place
    gate = Door(workspace)
    assert gate.make_folder("a/b") is True and (workspace / "a" / "b").is_dir()
    assert gate.make_folder("a/b") is False
    with pytest.raises(FileExistsError):
        gate.make_folder("a/b", exclusive=True)
    (workspace / "q").symlink_to(outside)
    (workspace / "dangling").symlink_to(outside / "new")
    for name in ("q", "q/new", "dangling", "sub/data.txt"):
        with pytest.raises(WorkspaceFileError):
            gate.make_folder(name)
    with pytest.raises(FileExistsError):
        gate.make_folder("q", exclusive=True)  # taken: a fresh name is the caller's next try, never the link
    assert sorted(p.name for p in outside.iterdir()) == ["data.txt", "secret.txt"]


def test_listing_and_usage_never_follow_links(mode: str, place: tuple[Path, Path]) -> None:
    workspace, outside = place
    (workspace / "linkdir").symlink_to(outside)
    (workspace / "link.txt").symlink_to(outside / "secret.txt")
    (workspace / ".hidden").write_text("h")
    gate = Door(workspace)
    found = gate.listing()
    assert set(found.files) == {"sub/data.txt"} and found.total == 1 and not found.partial
    assert set(gate.listing(hidden=True).files) == {"sub/data.txt", ".hidden"}
    assert gate.listing("sub").files == found.files
    with pytest.raises(WorkspaceFileError):
        gate.listing("linkdir")
    used, unwalked = gate.usage()
    assert used > 0 and unwalked is None
    assert gate.entry_kind("link.txt") == "link" and gate.entry_kind("sub") == "dir"
    assert gate.entry_kind("sub/data.txt") == "file" and gate.entry_kind("nope") is None


def test_a_stream_reads_what_was_opened(mode: str, place: tuple[Path, Path]) -> None:
    workspace, outside = place
    size, chunks = Door(workspace).stream("sub/data.txt", chunk=2)
    os.replace(workspace / "sub" / "data.txt", workspace / "sub" / "moved.txt")  # swapped after the open
    (workspace / "sub" / "data.txt").symlink_to(outside / "secret.txt")
    assert size == 7 and b"".join(chunks) == b"inside\n"


RENAME_EXCHANGE = 2


def exchange(a: Path, b: Path) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    at_fdcwd = -100
    if libc.renameat2(at_fdcwd, str(a).encode(), at_fdcwd, str(b).encode(), RENAME_EXCHANGE) != 0:
        raise OSError(ctypes.get_errno(), "renameat2")


@pytest.fixture
def swapping(place: tuple[Path, Path]) -> Iterator[tuple[Path, Path]]:
    """A thread swaps ``workspace/sub`` (a real folder) and ``workspace/evil`` (a link to the host's
    folder) with RENAME_EXCHANGE as fast as it can, while the test reads and writes ``sub/...``."""
    workspace, outside = place
    (workspace / "evil").symlink_to(outside)
    with exchanging(workspace / "sub", workspace / "evil") as swaps:
        yield workspace, outside
    assert swaps[0] > 100  # the race really ran


@contextmanager
def exchanging(a: Path, b: Path) -> Iterator[list[int]]:
    """A thread swapping ``a`` and ``b`` with RENAME_EXCHANGE as fast as it can; yields its swap count."""
    stop, swaps = threading.Event(), [0]

    def swap() -> None:
        while not stop.is_set():
            exchange(a, b)
            swaps[0] += 1

    thread = threading.Thread(target=swap, daemon=True)
    thread.start()
    try:
        yield swaps
    finally:
        stop.set()
        thread.join(10)


def test_a_folder_swapped_for_a_link_mid_read_never_leads_outside(mode: str, swapping: tuple[Path, Path]) -> None:
    workspace, outside = swapping
    gate = Door(workspace)
    read = refused = attempts = 0
    while attempts < 2000 or not (read and refused):  # on a loaded machine the swap may need more tries
        attempts += 1
        assert attempts < 100_000, f"the race never produced both outcomes: {read} read, {refused} refused"
        try:
            data = gate.read("sub/data.txt")
        except (WorkspaceFileError, FileNotFoundError):
            refused += 1
            continue
        assert data == b"inside\n"
        read += 1


def test_a_folder_swapped_for_a_link_mid_write_never_writes_outside(mode: str, swapping: tuple[Path, Path]) -> None:
    workspace, outside = swapping
    gate = Door(workspace)
    for n in range(1000):
        try:
            gate.write("sub/data.txt", f"write {n}\n".encode(), make_dirs=False)
        except (WorkspaceFileError, FileNotFoundError):
            continue
    assert (outside / "data.txt").read_text() == "HOST SECRET\n"
    assert sorted(p.name for p in outside.iterdir()) == ["data.txt", "secret.txt"]


# --- the rule: modules that handle workspace paths do file I/O only through the door -------------------

PACKAGE = Path(door_module.__file__).parents[1]
# Every module that reads, writes or lists inside a workspace, and the functions in it that may do plain
# file I/O on something else (with why). Anything else in these modules must go through ``Door``.
THROUGH_THE_DOOR = {
    "kernel/files.py": {},
    "kernel/workspace.py": {
        "_fresh": "picks a new folder name under the user's agent-runs/ or beside a notebook",
        "workspace_holding": "looks for the host's records beside folders, out of any kernel's reach",
        "resolve_outside_workspaces": "lstats a user-named path hop by hop; follows a link only outside workspaces",
    },
    "agent/run/quota.py": {},
    "agent/datafiles/data.py": {
        "_checked_source": "the user's own input file, named on the command line, outside any run's workspace",
        "_install": "stats the user's own input file; the copy goes through the door",
        "check_data": "whether the workspace folder (the host's choice) exists yet; what is in it, the door says",
        "make_workspace": "makes the workspace folder itself, the host's choice, before the copies",
        "discard": "removes the folders it made (the workspace itself and those above it, the host's choice) once "
        "empty; the copies in the workspace go through the door",
        "check_unchanged": "stats the user's own input file again (or our private copy), never a workspace's",
        "stage_recorded": "makes the workspace folder; describes private copies it read through the door",
        "warm_describer": "writes a sample table in a private temp folder, which no kernel sees",
    },
    "notebook/claims.py": {},
    "server/store.py": {"__init__": "resolves the data dir itself"},  # move_records_out goes through the door
    "server/blobs.py": {
        # The data dir's own bytes: uploads (which no kernel sees), and whole thread folders made or removed
        # by name; nothing inside a workspace is read or written here.
        "make_layout": "makes the data dir's own top folders",
        "put_file": "moves a spooled upload into the store's own files folder",
        "remove_file": "removes an upload's own folder",
        "prepare": "makes the workspace folder itself, the host's choice",
        "remove_thread": "removes a deleted thread's folder (rmtree never follows a link in it)",
    },
    "mcp/files.py": {},
    # A thread's zip: its records, its uploads and (for a deleted upload) the workspace's copy, through doors.
    "server/bundle.py": {"_copy": "opens an entry of the zip being written (ZipFile.open), not a path"},
    # An eval run's folder is the user's choice but may be someone else's (shared, unpacked): its manifest,
    # results, report and question folders go through the door, and so do the suite's data files.
    "eval/runner.py": {
        "_claim": "makes the folder the user named (--out) itself; what is in it, the door reads and writes",
        "remove": "removes our private folder of the suite's data copies (mkdtemp, which no kernel sees)",
        "_sweep_staged": "removes such folders of ours a killed run left in the temp folder (never a link)",
        "_available_memory": "reads /proc/meminfo",
        "run_eval": "calls AgentConfig.resolve (settings, not a path)",
    },
    "eval/results.py": {},
    "eval/report.py": {},
    "eval/suite.py": {
        "load_suite": "whether the suite the user named is a folder or a file; what is in it, the door reads",
    },
    "mcp/server.py": {"_new": "makes a client's workspace folder itself"},
    "server/app.py": {
        "<module>": "the web page's own static folder",
        "_spool": "spools an upload into the store's own tmp folder, which no kernel sees",
        "upload": "removes that spooled file",
        "file_content": "serves an upload from the store, which no kernel sees",
        "demo_data": "serves the demo's bundled data from the installed package",
    },
}
# The host's records (notebooks in both views, a plan's state, report and figures, HTML pages): a shared
# folder keeps its links, so every module that writes or reads one does it through the door's record
# writer and reader (``write_record``, ``write_records``, ``read_record``), in the CLI and the service alike.
RECORDS = {
    "notebook/export.py": {"export_run": "makes the record's folder, the user's choice, before the door writes in it"},
    "notebook/load.py": {},
    "notebook/html.py": {"<module>": "the package's own templates folder"},
    "notebook/writer.py": {},
    "notebook/replay.py": {
        "async_replay": "realpaths of the data folders, to mask them in compared outputs (nothing opened)",
        "_data_sources": "whether the folder the user named (--workspace) is one",
    },
    "agent/plan/output.py": {},
    "agent/plan/state.py": {},
    "agent/plan/api.py": {"resumed": "whether the workspace the user named (--workspace) is a folder"},
    "jupyter/live.py": {},
    "cli/show.py": {},
    "server/run.py": {},
    "server/service.py": {},
    "cli/eval.py": {"_folder": "whether the path the user named is a results file or its folder"},
}
PATH_METHODS = {
    "read_text",
    "read_bytes",
    "write_text",
    "write_bytes",
    "iterdir",
    "rglob",
    "glob",
    "open",
    "stat",
    "lstat",
    "exists",
    "is_file",
    "is_dir",
    "is_symlink",
    "mkdir",
    "unlink",
    "rmdir",
    "touch",
    "chmod",
    "samefile",
    "resolve",
}
OS_PATH_CHECKS = {"exists", "lexists", "isfile", "isdir", "islink", "realpath", "getsize", "samefile"}
OS_CALLS = {
    "open",
    "walk",
    "scandir",
    "listdir",
    "remove",
    "unlink",
    "rename",
    "replace",
    "chmod",
    "mkdir",
    "makedirs",
    "rmdir",
    "symlink",
    "link",
    "stat",
    "lstat",
    "readlink",
}


def plain_file_io(path: Path) -> list[tuple[str, str, int]]:
    """(function, call, line) for every plain file-system call in ``path``."""
    found: list[tuple[str, str, int]] = []

    class Visitor(ast.NodeVisitor):
        def __init__(self) -> None:
            self.function = ["<module>"]

        def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
            self.function.append(node.name)
            self.generic_visit(node)
            self.function.pop()

        visit_AsyncFunctionDef = visit_FunctionDef

        def visit_Call(self, node: ast.Call) -> None:
            call, func = None, node.func
            if isinstance(func, ast.Name) and func.id in ("open", "FileResponse"):
                call = func.id
            elif isinstance(func, ast.Attribute):
                owner = func.value.id if isinstance(func.value, ast.Name) else None
                if owner == "shutil" or (owner == "os" and func.attr in OS_CALLS):
                    call = f"{owner}.{func.attr}"
                elif (
                    isinstance(func.value, ast.Attribute)
                    and func.value.attr == "path"
                    and isinstance(func.value.value, ast.Name)
                    and func.value.value.id == "os"
                ):
                    call = f"os.path.{func.attr}" if func.attr in OS_PATH_CHECKS else None
                elif func.attr in PATH_METHODS:
                    call = f".{func.attr}()"
            if call is not None:
                found.append((self.function[-1], call, node.lineno))
            self.generic_visit(node)

    Visitor().visit(ast.parse(path.read_text()))
    return found


def test_workspace_paths_are_touched_only_through_the_door() -> None:
    strays = [
        f"{module}:{line} {function} calls {call}"
        for module, allowed in THROUGH_THE_DOOR.items()
        for function, call, line in plain_file_io(PACKAGE / module)
        if function not in allowed
    ]
    assert strays == []


def test_records_are_written_and_read_only_through_the_door() -> None:
    strays = [
        f"{module}:{line} {function} calls {call}"
        for module, allowed in RECORDS.items()
        for function, call, line in plain_file_io(PACKAGE / module)
        if function not in allowed
    ]
    assert strays == []
    writers = {"notebook/export.py", "notebook/html.py", "agent/plan/output.py", "agent/plan/state.py"}
    for module in writers:  # each writes through the record writer, not a helper of its own
        source = (PACKAGE / module).read_text()
        assert "write_record" in source and "tempfile" not in source and ".tmp" not in source, module


def test_the_rule_sees_plain_file_io(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import os, shutil\ndef f(p):\n    p.read_text(); open(p); os.scandir(p); shutil.copy(p, p)\n"
        "    os.path.exists(p); p.parent.mkdir(); 'a'.replace('a', 'b')\n"
    )
    assert [call for _, call, _ in plain_file_io(sample)] == [
        ".read_text()",
        "open",
        "os.scandir",
        "shutil.copy",
        "os.path.exists",
        ".mkdir()",
    ]


# --- the walk: bounded descriptors, never a quiet skip (issue 48) ---------------------------------------

CHILD = r"""
import json, os, resource, sys
from kernel_agent.kernel import door as door_module
from kernel_agent.kernel.door import Door
from kernel_agent.agent.run.quota import over_quota, workspace_usage
door_module._WALK_ONLY = sys.argv[2] == "walk"
root, limit = sys.argv[1], 256
resource.setrlimit(resource.RLIMIT_NOFILE, (limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
base = len(os.listdir("/proc/self/fd"))
most = 0
for _ in door_module._Walk(Door(root), ".", hidden=True, bounds=door_module.WalkBounds()):
    most = max(most, len(os.listdir("/proc/self/fd")) - base)
used, unwalked = workspace_usage(root)
found = Door(root).listing()
starved = []
for free in range(1, 14):  # the process out of descriptors but for a few: the walk says so, or is whole
    held = []
    try:
        while True:
            held.append(os.open("/dev/null", os.O_RDONLY))
    except OSError:
        pass
    for fd in held[len(held) - free:]:
        os.close(fd)
    del held[len(held) - free:]
    try:
        seen = Door(root).usage()
        starved.append([seen[0], seen[1]])
    except OSError as exc:
        starved.append([None, exc.strerror])
    for fd in held:
        os.close(fd)
print(json.dumps({"most": most, "used": used, "unwalked": unwalked, "files": sorted(found.files),
                  "partial": found.partial, "over": over_quota(used, 2), "starved": starved}))
"""


def test_more_empty_folders_than_descriptors_hide_nothing_from_the_quota_or_the_listing(
    mode: str, tmp_path: Path
) -> None:
    # 1,000 empty folders under a 256-descriptor limit, then 3 MB past a 2 MB quota below and after them:
    # the walk before issue 48 held a descriptor per pending folder, ran out, and skipped the files.
    import json
    import subprocess
    import sys

    workspace = tmp_path / "workspace"
    for n in range(1000):
        (workspace / f"d{n:04}").mkdir(parents=True)
    for name in ("d0500/a.bin", "d0999/b.bin", "zz/deep/c.bin"):
        (workspace / name).parent.mkdir(parents=True, exist_ok=True)
        (workspace / name).write_bytes(os.urandom(1 << 20))
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(workspace), mode], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["most"] <= door_module._HELD + 3  # descriptors held at once, whatever the width
    assert seen["unwalked"] is None and seen["used"] >= 3 << 20
    assert seen["over"] is not None and "quota of 2 MB" in seen["over"]
    assert seen["files"] == ["d0500/a.bin", "d0999/b.bin", "zz/deep/c.bin"] and not seen["partial"]
    whole = [used for used, why in seen["starved"] if why is None]
    said = [why for used, why in seen["starved"] if why is not None]
    assert all(used >= 3 << 20 for used in whole)  # a walk that says nothing counted every byte
    assert said and all("Too many open files" in why for why in said)  # and one that could not, said why


def test_a_tree_past_the_walks_bounds_says_so(mode: str, tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.joinpath(*(f"n{level}" for level in range(8))).mkdir(parents=True)
    (workspace / "n0" / "n1" / "n2" / "n3" / "n4" / "n5" / "n6" / "n7" / "deep.txt").write_text("x")
    for n in range(60):
        (workspace / f"wide{n}").mkdir()
    gate = Door(workspace)
    assert gate.usage()[1] is None and "n0/n1/n2/n3/n4/n5/n6/n7/deep.txt" in gate.listing().files
    deep = gate.listing(bounds=door_module.WalkBounds(depth=5))
    assert deep.partial and "nest deeper than 5" in (deep.unwalked or "")
    assert not any(path.endswith("deep.txt") for path in deep.files)
    wide = gate.usage(bounds=door_module.WalkBounds(entries=50))
    assert wide[1] is not None and "more than 50 entries" in wide[1]
    from kernel_agent.agent.run.quota import unmeasured, workspace_usage

    used, why = workspace_usage(workspace, bounds=door_module.WalkBounds(entries=50))
    assert why is not None and "disk quota" in unmeasured(why) and "more than 50 entries" in unmeasured(why)


def test_a_folder_the_walk_cannot_open_is_named_not_skipped(mode: str, place: tuple[Path, Path]) -> None:
    """A folder the host may not open (mode 000) is named as unwalked. Root opens any folder, so as root the
    walk runs in a child without the capabilities that override file modes (``setpriv``), as a user would."""
    workspace, _ = place
    (workspace / "locked").mkdir()
    (workspace / "locked" / "big.bin").write_bytes(b"x" * 4096)
    (workspace / "locked").chmod(0)
    code = (
        "import json, sys\n"
        "from kernel_agent.kernel import door\n"
        f"door._WALK_ONLY = {mode == 'walk'}\n"
        "gate = door.Door(sys.argv[1])\n"
        "print(json.dumps([gate.usage()[1], gate.listing().partial]))\n"
    )
    drop = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--"] if os.geteuid() == 0 else []
    try:
        done = subprocess.run(
            [*drop, sys.executable, "-c", code, str(workspace)], capture_output=True, text=True, timeout=60, check=True
        )
        unwalked, partial = json.loads(done.stdout)
        assert unwalked is not None and "'locked'" in unwalked and "Permission denied" in unwalked
        assert partial
    finally:
        (workspace / "locked").chmod(0o755)
