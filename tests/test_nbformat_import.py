"""``kernel_agent._nbformat``: nbformat without compiling rfc3987_syntax's grammar at import, same answers.

Each probe runs in a fresh interpreter (what a command or a server start pays), and reports what it saw.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

HELPERS = "rfc3987_syntax.syntax_helpers"  # the module whose import compiles the grammar


def probe(code: str) -> dict[str, Any]:
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    value: dict[Any, Any] = json.loads(run.stdout.splitlines()[-1])
    return value


def test_reading_and_writing_notebooks_does_not_compile_the_grammar() -> None:
    seen = probe(
        "import sys, json\n"
        "import kernel_agent.notebook.export, kernel_agent.notebook.load, kernel_agent.kernel.outputs\n"
        f"print(json.dumps({{'jsonschema': 'jsonschema' in sys.modules, 'helpers': {HELPERS!r} in sys.modules}}))"
    )
    assert seen == {"jsonschema": True, "helpers": False}


def test_jsonschema_still_checks_iri_formats_with_the_real_grammar() -> None:
    seen = probe(
        "import sys, json\n"
        "import kernel_agent._nbformat\n"
        "import jsonschema\n"
        "checker = jsonschema.FormatChecker()\n"
        "good = checker.conforms('https://example.org/a?b#c', 'iri')\n"
        "bad = checker.conforms('not an iri at all', 'iri')\n"
        "import rfc3987_syntax\n"
        "tree = rfc3987_syntax.parse('iri', 'https://example.org/')\n"
        f"print(json.dumps({{'good': good, 'bad': bad, 'parsed': tree.data, 'helpers': {HELPERS!r} in sys.modules}}))"
    )
    assert seen == {"good": True, "bad": False, "parsed": "iri", "helpers": True}


def test_a_process_that_imported_jsonschema_first_is_left_as_it_is() -> None:
    seen = probe(
        "import sys, json\n"
        "import jsonschema\n"
        "real = sys.modules.get('rfc3987_syntax')\n"
        "from kernel_agent._nbformat import defer_rfc3987_grammar\n"
        "print(json.dumps({'registered': defer_rfc3987_grammar(), 'same': sys.modules.get('rfc3987_syntax') is real,"
        f" 'helpers': {HELPERS!r} in sys.modules}}))"
    )
    assert seen == {"registered": False, "same": True, "helpers": True}


def test_notebooks_still_validate_and_refuse() -> None:
    seen = probe(
        "import json\n"
        "from kernel_agent._nbformat import nbformat\n"
        "nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell('1+1')])\n"
        "nbformat.validate(nb)\n"
        "nb.cells[0]['cell_type'] = 'nonsense'\n"
        "try:\n"
        "    nbformat.validate(nb)\n"
        "    refused = False\n"
        "except nbformat.ValidationError:\n"
        "    refused = True\n"
        "print(json.dumps({'refused': refused}))"
    )
    assert seen == {"refused": True}
