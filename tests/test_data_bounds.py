"""A hostile data file is parsed only under a hard bound, never by the host process.

A 430 KB parquet file of 100 M zeros (800 MB once read whole: the host read it and peaked at 1.8 GB) and
a 220 KB xlsx whose one row unpacks to ~90 MB of cells (22 s of the host's CPU) are given to ``run
--data`` and uploaded to the service. The host's peak memory (``VmHWM``, read from its own
``/proc/PID/status``) stays within 200 MB of where it started, the run still starts and finishes, and
the model is told what each file is. Also: an XML entity expansion is refused, and the confined
describer's limits hold even for a file whose metadata lie (a forged budget, checked directly).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from bombs import write_laughs_xlsx, write_parquet_bomb, write_xlsx_bomb
from openai_server import OpenAIServer, Reply
from replicas import Replica, follow

from kernel_agent.agent.datafiles import describer
from kernel_agent.agent.datafiles.describer import BUDGET_NOTE, describe
from kernel_agent.agent.datafiles.summaries import human_size
from kernel_agent.errors import DataFileError

MB = 1 << 20
GROWTH_LIMIT = 200 * MB

# ``kernel-agent run`` in this process, its memory read before (imports done) and at the end.
RUN = """
import json, sys
from kernel_agent.cli import cli

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024

start = status("VmRSS")
try:
    cli.main(args=sys.argv[2:], standalone_mode=False)
    code = 0
except SystemExit as exc:
    code = exc.code
with open(sys.argv[1], "w") as out:
    json.dump({"start": start, "peak": status("VmHWM"), "code": code}, out)
"""


@pytest.fixture(scope="module")
def bombs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("bombs")
    write_parquet_bomb(folder / "zeros.parquet")
    write_xlsx_bomb(folder / "wide.xlsx")
    write_laughs_xlsx(folder / "laughs.xlsx")
    return folder


def status(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} for {pid}")


def data_section(model: OpenAIServer) -> str:
    return "\n".join(str(message.get("content")) for message in model.requests[0]["messages"])


@pytest.mark.kernel
@pytest.mark.parametrize("name", ["zeros.parquet", "wide.xlsx"])
def test_run_data_keeps_the_host_small_and_starts(
    bombs: Path, name: str, openai_server: OpenAIServer, tmp_path: Path
) -> None:
    openai_server.add(Reply("Nothing to compute: the file is described."))
    measured = tmp_path / "memory.json"
    arguments = ["run", "Describe the data", "--data", str(bombs / name), "--workspace", str(tmp_path / "ws")]
    arguments += ["--model", "m", "--base-url", openai_server.base_url, "--protocol", "tools", "--quiet"]
    done = subprocess.run(
        [sys.executable, "-c", RUN, str(measured), *arguments], capture_output=True, text=True, timeout=300
    )
    memory = json.loads(measured.read_text())
    assert memory["code"] == 0, done.stdout + done.stderr
    growth = memory["peak"] - memory["start"]
    assert growth < GROWTH_LIMIT, f"the host grew by {growth / MB:.0f} MB describing {name}"
    told = data_section(openai_server)
    if name == "zeros.parquet":
        assert "100,000,000 rows" in told
    else:
        assert "unpacking to 85.1 MB" in told  # 89.3 million bytes, 1,024 a KB
        assert "not read: larger than the description budget" in told


@pytest.mark.kernel
def test_a_service_upload_keeps_the_server_small_and_the_run_starts(
    bombs: Path, model: OpenAIServer, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    with Replica(data, model.base_url, database=f"sqlite:///{tmp_path / 'records.db'}") as server:
        start = status(server.pid, "VmRSS")
        ids = []
        for name in ("zeros.parquet", "wide.xlsx"):
            with (bombs / name).open("rb") as handle:
                uploaded = server.client.post("/v1/files", files={"file": (name, handle)})
            assert uploaded.status_code == 200, uploaded.text
            ids.append(uploaded.json()["id"])
        model.add(Reply("Both files are described."))
        run = server.client.post("/v1/runs", json={"task": "Describe", "file_ids": ids})
        assert run.status_code == 201, run.text
        follow(server.client, run.json()["id"])
        record = server.client.get(f"/v1/runs/{run.json()['id']}").json()
        growth = status(server.pid, "VmHWM") - start
    assert record["status"] == "completed", record
    assert growth < GROWTH_LIMIT, f"the server grew by {growth / MB:.0f} MB describing the uploads"
    told = data_section(model)
    assert "100,000,000 rows" in told and "not read: larger than the description budget" in told


def test_an_xml_entity_expansion_is_refused(bombs: Path) -> None:
    with pytest.raises(DataFileError, match="cannot read laughs.xlsx as excel"):
        describe(bombs / "laughs.xlsx")


def test_the_worker_limits_hold_whatever_the_file_says(tmp_path: Path) -> None:
    """The child's address-space limit is the bound, not what a file says of itself: with 1 MB above what the
    zygote had mapped, 4 MB of JSON records (parsed whole: ~120 MB of Python objects) end in the budget note,
    not a crash; the same file under the default budget is described."""
    table = tmp_path / "records.json"
    table.write_text("[" + ",".join(['{"k":0}'] * 500_000) + "]")
    tight = describer._Zygote(memory_bytes=1 * MB)
    try:
        noted = describer._describe_with(tight, table)
    finally:
        tight.close()
    size = human_size(table.stat().st_size)  # 3.8 MB: the one size rule counts 1,024 bytes a KB
    assert noted == f"JSON · {size} · {BUDGET_NOTE}"
    assert describe(table).startswith(f"JSON records · {size} · 500,000 rows × 1 column")


def test_only_the_worker_parses_a_data_file() -> None:
    """The in-process parser (``summaries.describe``) is called by the confined worker only: every other module
    describes through ``describer.describe``, as ``test_door.py`` holds workspace I/O to the door."""
    import ast

    import kernel_agent

    package = Path(kernel_agent.__file__).parent
    offenders = []
    for module in package.rglob("*.py"):
        if module.name in ("describe_worker.py", "summaries.py"):
            continue
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.ImportFrom)
                and (node.module or "").endswith("summaries")
                and any(alias.name == "describe" for alias in node.names)
            ):
                offenders.append(f"{module.relative_to(package)}:{node.lineno}")
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "describe"
                and isinstance(node.value, ast.Name)
                and node.value.id == "summaries"
            ):
                offenders.append(f"{module.relative_to(package)}:{node.lineno}")
    assert offenders == []
