"""Run a load on a real service and report file and process work done on its event loop's thread.

``python tests/loop_watch.py DIR`` starts the scripted model and the service (uvicorn in a thread, as
``service_server.py`` does), watches the loop's thread with an audit hook (``sys.addaudithook``: every
``open``, rename, listing, removal, ``chmod``, copy and process spawn raises an audit event) while
three threads run analyses at once, one of them a follow-up, and their events, notebooks and files
are fetched; then prints one JSON list: for each distinct place, the audit event and the stack's
frames from our package and whether the call was ours or a library's (jupyter_client writes a kernel's
connection file and spawns it inside ``start_kernel``). Deterministic: it counts what happens on the loop, not how
long it takes
(a time threshold would flake under CPU load). A separate process, because an audit hook cannot be
removed once added.
"""

from __future__ import annotations

import json
import sys
import sysconfig
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
from openai_server import OpenAIServer, Reply, python_call
from service_server import ServiceServer

WATCHED = {
    "open",
    "os.rename",
    "os.remove",
    "os.rmdir",
    "os.mkdir",
    "os.chmod",
    "os.listdir",
    "os.scandir",
    "os.truncate",
    "os.link",
    "os.symlink",
    "shutil.copyfile",
    "shutil.copytree",
    "shutil.rmtree",
    "subprocess.Popen",
    "os.system",
    "os.posix_spawn",
    "os.fork",
    "os.exec",
}
OURS = str(Path(__file__).resolve().parents[1] / "kernel_agent")
STDLIB = sysconfig.get_paths()["stdlib"]
_watch: dict[str, Any] = {"thread": None, "seen": {}}


def audit(event: str, _args: tuple[Any, ...]) -> None:
    if event not in WATCHED or threading.get_ident() != _watch["thread"]:
        return
    frames: list[str] = []
    frame: FrameType | None = sys._getframe(1)
    caller: str | None = None
    while frame is not None:  # by hand: traceback's line lookup would open files, inside this hook
        name = frame.f_code.co_filename
        if caller is None and not (name.startswith(STDLIB) or name.startswith("<")):
            caller = "ours" if name.startswith(OURS) else "library"  # who made the call: us, or a library
        if name.startswith(OURS):
            frames.append(f"{name[len(OURS) + 1 :]}:{frame.f_lineno} {frame.f_code.co_name}")
        frame = frame.f_back
    frames.reverse()
    key = (event, caller or "stdlib", tuple(frames))
    _watch["seen"][key] = _watch["seen"].get(key, 0) + 1


def reply_for(body: dict[str, Any]) -> Reply:
    """Code first; once a tool result came back, the answer."""
    if body["messages"][-1]["role"] == "tool":
        return Reply("Done: the file is written.")
    code = "import pandas as pd\nframe = pd.DataFrame({'x': range(100)})\nframe.to_csv('out.csv')\nprint(frame.x.sum())"
    return Reply("Writing it.", tool_calls=(python_call(code),))


def follow(client: httpx.Client, run_id: str) -> list[dict[str, Any]]:
    with client.stream("GET", f"/v1/runs/{run_id}/events") as response:
        return [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]


def one_thread(client: httpx.Client, file_id: str, turns: int) -> None:
    thread_id = None
    for turn in range(turns):
        body: dict[str, Any] = {"task": f"Write out.csv (turn {turn})", "file_ids": [file_id]}
        if thread_id:
            body["thread_id"] = thread_id
        response = client.post("/v1/runs", json=body)
        response.raise_for_status()
        run = response.json()
        thread_id = run["thread_id"]
        assert follow(client, run["id"])[-1]["event"] == "finished"
        record = client.get(f"/v1/runs/{run['id']}").json()
        assert record["status"] == "completed", record
        for url in [record["notebook_url"], record["clean_url"], *(f["url"] for f in record["files"])]:
            assert client.get(url).status_code == 200, url
        assert client.get(f"/v1/threads/{thread_id}").status_code == 200


def main(folder: Path) -> None:
    sys.addaudithook(audit)
    with (
        OpenAIServer() as model,
        ServiceServer(
            folder,
            model.base_url,
            keys={"k"},
            max_running_per_key=4,  # one key's three threads at once: all run
        ) as server,
    ):
        model.add(*[reply_for] * 16)
        with httpx.Client(base_url=server.url, headers={"Authorization": "Bearer k"}, timeout=120) as client:
            file_id = client.post("/v1/files", files={"file": ("numbers.csv", b"x,y\n1,2\n", "text/csv")}).json()["id"]
            _watch["thread"] = server.thread.ident
            with ThreadPoolExecutor(3) as pool:
                for done in [pool.submit(one_thread, client, file_id, turns) for turns in (2, 1, 1)]:
                    done.result()
            client.get("/v1/threads").raise_for_status()
            _watch["thread"] = None
    seen = [
        {"event": event, "caller": caller, "count": count, "stack": list(frames)}
        for (event, caller, frames), count in _watch["seen"].items()
    ]
    print(json.dumps(seen))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
