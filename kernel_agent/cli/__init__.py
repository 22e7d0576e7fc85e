"""The ``kernel-agent`` command line: ``main`` is the console script.

Thin front end (read → run → render): ``app`` assembles the click commands (``commands/``, a module each),
``drive`` the event loop, signals and exit codes of a run, ``render`` the
live, quiet and JSON renderings of the event stream, ``show`` the review of
finished runs, ``demo`` the demo's choice of model. Only this package
imports click and rich.
"""

from __future__ import annotations

from .app import cli, main

__all__ = ["cli", "main"]
