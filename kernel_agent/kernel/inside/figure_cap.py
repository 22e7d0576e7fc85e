"""The figure cap inside the kernel: ``install``, ``FigureCap``.

Owns not rendering matplotlib figures past the session's image cap: the
cap's ``display_formatter.format`` wrapper closes a figure past
``max_images`` in the current cell instead of rendering it to PNG (300
figures take ~39 s to render on a 2-core machine, enough for a timeout to
kill a cell that would otherwise succeed), and says after the cell how many
were not rendered. Runs *in the kernel process*: the session points
``PYTHONSTARTUP`` at ``startup.py``, which calls ``install()`` with the
cap from ``FIGURE_CAP_ENV``. The count of figures not rendered goes out as a
``display_data`` whose metadata ``outputs.py`` reads into ``dropped_images``.
Does not own the session's own output caps (``outputs.py``, which still
drops images past the cap from any source).
Imports neither IPython nor matplotlib at module level.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["FIGURE_CAP_ENV", "NOT_RENDERED_KEY", "STARTUP_FILE", "FigureCap", "figure_cap_env", "install"]

FIGURE_CAP_ENV = "KERNEL_AGENT_FIGURE_CAP"
USER_STARTUP_ENV = "KERNEL_AGENT_USER_STARTUP"  # the user's own PYTHONSTARTUP, run after ours
NOT_RENDERED_KEY = "kernel_agent"  # display metadata key of the "not rendered" count
STARTUP_FILE = Path(__file__).with_name("startup.py")


class FigureCap:
    """Counts the figures rendered in the running cell and skips (closes) those past ``limit``."""

    def __init__(self, shell: Any, limit: int) -> None:
        self.shell = shell
        self.limit = limit
        self.rendered = 0
        self.skipped = 0
        self._format = shell.display_formatter.format

    def format(self, obj: Any, include: Any = None, exclude: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
        """``DisplayFormatter.format``, except that a figure past the cap is closed, not rendered."""
        figure = _is_figure(obj)
        if figure and self.rendered >= self.limit:
            self.skipped += 1
            _close(obj)
            return {}, {}  # IPython's display() publishes nothing for an empty format
        data, metadata = self._format(obj, include=include, exclude=exclude)
        if figure and any(key.startswith("image/") for key in data):
            self.rendered += 1
        return data, metadata

    def pre_run_cell(self, *args: Any) -> None:
        self.rendered = self.skipped = 0

    def post_run_cell(self, *args: Any) -> None:
        skipped, self.skipped = self.skipped, 0
        if not skipped:
            return
        from IPython.display import display

        # Our session's collector reads the count from the metadata and states it with its other
        # caps; any other front end shows the text.
        text = (
            f"[kernel-agent: {skipped} more figure(s) not rendered: the cap is {self.limit} figures per cell; "
            "they were closed. Draw fewer, or save them with fig.savefig() to look at them.]"
        )
        display({"text/plain": text}, raw=True, metadata={NOT_RENDERED_KEY: {"figures_not_rendered": skipped}})


def figure_cap_env(limit: int) -> dict[str, str]:
    """The kernel environment that installs a cap of ``limit`` figures per cell at start-up.

    A ``PYTHONSTARTUP`` of the user's own is handed over and still runs, after the cap.
    """
    env = {"PYTHONSTARTUP": str(STARTUP_FILE), FIGURE_CAP_ENV: str(limit)}
    user_startup = os.environ.get("PYTHONSTARTUP", "")
    if user_startup and user_startup != str(STARTUP_FILE):
        env[USER_STARTUP_ENV] = user_startup
    return env


def install(limit: int | None = None, shell: Any = None) -> FigureCap | None:
    """Cap the figures rendered per cell in this IPython ``shell`` (default: the running one).

    ``limit`` defaults to ``FIGURE_CAP_ENV``; None or nothing to cap (no
    shell, no limit) installs nothing and returns None. At start-up (no
    ``limit`` given) it then runs the user's own ``PYTHONSTARTUP``, if any.
    Raises nothing of its own.
    """
    user_startup = ""
    if limit is None:
        raw = os.environ.pop(FIGURE_CAP_ENV, "")
        limit = int(raw) if raw.isdigit() else None
        user_startup = _restore_user_startup()
    if shell is None:
        from IPython import get_ipython

        shell = get_ipython()
    if shell is None:
        return None
    cap = None
    if limit is not None:
        cap = FigureCap(shell, limit)
        shell.display_formatter.format = cap.format
        shell.events.register("pre_run_cell", cap.pre_run_cell)
        shell.events.register("post_run_cell", cap.post_run_cell)
    if user_startup:
        shell.safe_execfile(user_startup, shell.user_ns)  # as IPython would have, had we not taken its place
    return cap


def _restore_user_startup() -> str:
    """Put the user's ``PYTHONSTARTUP`` back (or drop ours) for the code's own subprocesses; return it."""
    user_startup = os.environ.pop(USER_STARTUP_ENV, "")
    if user_startup:
        os.environ["PYTHONSTARTUP"] = user_startup
    elif os.environ.get("PYTHONSTARTUP") == str(STARTUP_FILE):
        del os.environ["PYTHONSTARTUP"]
    return user_startup


def _is_figure(obj: Any) -> bool:
    figure = sys.modules.get("matplotlib.figure")  # not imported yet: no figure exists
    return figure is not None and isinstance(obj, figure.Figure)


def _close(figure: Any) -> None:
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is not None:
        pyplot.close(figure)
