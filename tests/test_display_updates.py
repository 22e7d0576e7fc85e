"""``update_display_data`` across cells: a later cell updates the display an earlier cell showed,
in the exported notebook as in Jupyter. Real kernel, real openai SDK against the scripted server."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from openai_server import OpenAIServer, Reply

from kernel_agent import Agent
from kernel_agent.notebook.export import clean_path

pytestmark = pytest.mark.kernel

SHOW = (
    "from IPython.display import display\nprogress = display('step 1 of 3', display_id='progress')\nother = "
    "display('untouched', display_id='other')"
)
UPDATE = "progress.update('step 3 of 3')\nprint('updated')"


def test_a_later_cell_updates_an_earlier_cells_display(openai_server: OpenAIServer, tmp_path: Path) -> None:
    openai_server.add(
        Reply(f"<Code>\n{SHOW}\n</Code>"), Reply(f"<Code>\n{UPDATE}\n</Code>"), Reply("<Answer>done</Answer>")
    )
    with Agent(model="m", base_url=openai_server.base_url, protocol="tags") as agent:
        run = agent.run("progress", workspace=tmp_path / "ws")
    first, second = run.rounds[0].result, run.rounds[1].result
    assert first is not None and second is not None
    assert [update.display_id for update in second.display_updates] == ["progress"]
    assert second.stdout == "updated\n" and len(second.outputs) == 1  # the update is not an output of its own
    for path in (run.notebook_path, clean_path(run.notebook_path)):  # type: ignore[arg-type]
        nb = nbformat.read(path, as_version=4)
        cell = next(c for c in nb.cells if c.id == "round-1-code")
        assert [o["data"]["text/plain"] for o in cell.outputs] == ["'step 3 of 3'", "'untouched'"]
    assert first.outputs[0]["data"]["text/plain"] == "'step 1 of 3'"  # the recorded result itself is not changed


def test_updates_within_one_cell_still_apply_there(openai_server: OpenAIServer, tmp_path: Path) -> None:
    code = "from IPython.display import display\nh = display('a', display_id='d')\nh.update('b')"
    openai_server.add(Reply(f"<Code>\n{code}\n</Code>"), Reply("<Answer>done</Answer>"))
    with Agent(model="m", base_url=openai_server.base_url, protocol="tags") as agent:
        result = agent.run("inline", workspace=tmp_path / "ws").rounds[0].result
    assert result is not None and result.display_updates == ()
    assert [o["data"]["text/plain"] for o in result.outputs] == ["'b'"]
