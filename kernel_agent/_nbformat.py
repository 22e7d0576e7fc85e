"""nbformat for every module here, imported without building a grammar nobody asked for.

nbformat imports jsonschema, and jsonschema's format checkers import ``rfc3987_syntax`` when it
is installed (JupyterLab's dependencies bring it), which compiles a Lark grammar at import: about
1.1 s of the 1.3 s ``import nbformat`` costs on an idle 2-core machine, paid by every command
that reads or writes a notebook, every server start and every MCP connect. Notebooks never use the
``iri`` formats that grammar checks, so before nbformat is first imported ``rfc3987_syntax`` is
registered as a stand-in whose ``is_valid_syntax`` (the one name jsonschema takes) imports the
real grammar on its first call, and whose other names load it on first use. Validation gives the
same answers, only later; a process that imported jsonschema before us is left as it is.

Import ``nbformat`` and ``NotebookNode`` from here, never straight from nbformat.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Any

__all__ = ["NotebookNode", "defer_rfc3987_grammar", "nbformat"]

_GRAMMAR = "rfc3987_syntax"
_HELPERS = "rfc3987_syntax.syntax_helpers"  # the module that compiles the grammar at import


def defer_rfc3987_grammar() -> bool:
    """Register the stand-in for ``rfc3987_syntax``; True when it was registered (jsonschema not
    imported yet, the package installed and not imported either)."""
    if "jsonschema" in sys.modules or _GRAMMAR in sys.modules:
        return False
    spec = importlib.util.find_spec(_GRAMMAR)
    if spec is None or spec.submodule_search_locations is None:
        return False
    stand_in = types.ModuleType(_GRAMMAR, "rfc3987_syntax, its grammar compiled on first use (kernel_agent._nbformat)")
    stand_in.__spec__ = spec
    stand_in.__path__ = list(spec.submodule_search_locations)  # its submodules import as usual
    stand_in.__file__ = spec.origin

    def is_valid_syntax(term: str, value: str) -> bool:
        return bool(importlib.import_module(_HELPERS).is_valid_syntax(term, value))

    def __getattr__(name: str) -> Any:  # a module's own __getattr__ (PEP 562)
        return getattr(importlib.import_module(_HELPERS), name)

    stand_in.is_valid_syntax = is_valid_syntax  # type: ignore[attr-defined]  # a module made at runtime
    stand_in.__getattr__ = __getattr__  # type: ignore[method-assign]  # PEP 562: a module's own __getattr__
    sys.modules[_GRAMMAR] = stand_in
    return True


defer_rfc3987_grammar()

import nbformat  # noqa: E402 - after the stand-in is in place
from nbformat import NotebookNode  # noqa: E402
