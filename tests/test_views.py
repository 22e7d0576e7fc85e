"""Pure pieces of the views: page titles, merged setup code, the answer heading the cell drops."""

from __future__ import annotations

import nbformat

from kernel_agent.agent.run.preparation import _merged_setup
from kernel_agent.magic.view import _ANSWER_HEADING
from kernel_agent.notebook.html import page_title


def test_page_title_is_the_tasks_first_line_shortened() -> None:
    nb = nbformat.v4.new_notebook(metadata={"kernel_agent": {"task": "Why did sales fall?\n\nDetails follow."}})
    assert page_title(nb) == "kernel-agent: Why did sales fall?"
    nb.metadata["kernel_agent"]["task"] = "x" * 200
    assert len(page_title(nb)) == len("kernel-agent: ") + 80 and page_title(nb).endswith("…")
    assert page_title(nbformat.v4.new_notebook()) == "kernel-agent run"


def test_merged_setup_keeps_one_copy_of_each_import() -> None:
    merged = _merged_setup(
        "import pandas as pd\nimport numpy as np\ndata = 1\n",
        "# shared\nimport pandas as pd\nimport json\ndf = pd.read_parquet('df.parquet')\n",
    )
    assert merged.count("import pandas as pd") == 1 and "import json" in merged
    assert merged.index("data = 1") < merged.index("df = pd.read_parquet")


def test_the_models_own_answer_heading_is_dropped() -> None:
    assert _ANSWER_HEADING.sub("", "## Answer\n\nIt is 5.", count=1) == "It is 5."
    assert _ANSWER_HEADING.sub("", "# Final answer:\nIt is 5.", count=1) == "It is 5."
    assert _ANSWER_HEADING.sub("", "## Summary\nIt is 5.", count=1) == "## Summary\nIt is 5."
