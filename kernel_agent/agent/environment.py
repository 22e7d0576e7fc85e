"""What the model is told about the kernel's Python environment: which analysis packages import there.

Owns the list of packages analyst models reach for, the probe that asks the kernel which of them it
has (one ``user_expressions`` round trip: ``find_spec`` and the distribution's version, nothing
imported), and the line added to a ``ModuleNotFoundError``'s feedback naming what is installed that
does the job (``seaborn is not installed here; matplotlib 3.9.2 is``). Pure apart from the probe's
text; the agent runs it and the protocols render the prompt line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["PACKAGES", "missing", "module_hint", "probe_expression"]

PACKAGES = ("pandas", "numpy", "matplotlib", "seaborn", "scipy", "sklearn", "statsmodels", "pyarrow", "openpyxl",
            "polars", "plotly", "sympy", "networkx", "xgboost", "lightgbm")
_DIST = {"sklearn": "scikit-learn"}
# What does the job when a module is missing, best first.
_INSTEAD = {
    "seaborn": ("matplotlib",), "plotly": ("matplotlib",), "bokeh": ("matplotlib",), "altair": ("matplotlib",),
    "polars": ("pandas",), "pyspark": ("pandas",), "dask": ("pandas",),
    "sklearn": ("scipy", "statsmodels", "numpy"), "xgboost": ("sklearn",), "lightgbm": ("sklearn",),
    "catboost": ("sklearn",), "statsmodels": ("scipy", "sklearn"), "scipy": ("numpy",),
    "tensorflow": ("sklearn",), "torch": ("sklearn",), "prophet": ("statsmodels",),
    "openpyxl": ("pandas",), "pyarrow": ("pandas",),
}
_MISSING = re.compile(r"No module named '([^'.]+)")


def probe_expression() -> str:
    """A Python expression for the kernel: ``['pandas 2.2.3', ...]`` for each package that imports there."""
    pairs = repr([(module, _DIST.get(module, module)) for module in PACKAGES])
    return (f"[m + ' ' + __import__('importlib.metadata').metadata.version(d) for m, d in {pairs} "
            "if __import__('importlib.util').util.find_spec(m)]")


def missing(installed: Sequence[str]) -> tuple[str, ...]:
    """The probed packages that are not installed (``installed`` as the probe gives it)."""
    have = {entry.split(" ", 1)[0] for entry in installed}
    return tuple(module for module in PACKAGES if module not in have)


def module_hint(evalue: str, installed: Sequence[str]) -> str:
    """One line for a ``ModuleNotFoundError`` whose message is ``evalue``: what is installed here that
    does the job; "" when the message names no module or nothing installed stands in."""
    found = _MISSING.search(evalue)
    if not found:
        return ""
    wanted = found.group(1)
    versions = dict(entry.split(" ", 1) for entry in installed if " " in entry)
    alternatives = [f"{name} {versions[name]}" for name in _INSTEAD.get(wanted, ()) if name in versions]
    if not alternatives:
        return f"{wanted} is not installed here and cannot be installed; use what is: {', '.join(installed)}." \
            if installed else ""
    return f"{wanted} is not installed here (and cannot be installed); {' or '.join(alternatives)} is."
