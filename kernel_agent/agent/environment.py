"""What the model knows about its environment: ``Environment`` and ``probe``, the one place every mode asks.

Owns the list of packages analyst models reach for, the probe that asks the kernel which of them it
has and which names the code defined so far (one ``user_expressions`` round trip: ``find_spec`` and
the distribution's version, nothing imported; each global's type and shape), and the line added to a
``ModuleNotFoundError``'s feedback naming what is installed that does the job (``seaborn is not
installed here; matplotlib 3.9.2 is``), and ``PromptContext`` with ``prompt_context``, the one view every
mode's prompt is built from: the task, the data description (``data.data_summary``: each file's columns, dtypes, missing
counts, dirty columns and first rows) and the kernel as probed. Run, resume, service threads, the plan's
request and each plan task take their ``Environment`` from ``probe`` and their prompt's facts from
``prompt_context``; the protocols render it (``protocols/prompts.py``). The probe's
expressions are the kernel language's; what comes back is a claim of the kernel's, parsed without
trusting it (``literal_eval`` of bounded text, strings only).
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .datafiles.data import DataFile, data_summary

if TYPE_CHECKING:
    from ..kernel.interface import Kernel

__all__ = [
    "MAX_ENTRY",
    "MAX_NAMES",
    "MAX_PROBE_TEXT",
    "PACKAGES",
    "Environment",
    "FileInfo",
    "PromptContext",
    "missing",
    "module_hint",
    "names_expression",
    "parse_list",
    "probe",
    "probe_expression",
    "host_packages",
    "prompt_context",
]

MAX_NAMES = 40  # names listed in a prompt; the rest are counted
MAX_ENTRY = 120  # characters of one "name: type shape" entry
MAX_PROBE_TEXT = 64_000  # characters of a probe's answer parsed at all
# What the setup cell and IPython define: not the analysis's names.
_SETUP_NAMES = ("In", "Out", "get_ipython", "exit", "quit", "open", "data", "DataFiles", "SimpleNamespace", "random")

PACKAGES = (
    "pandas",
    "numpy",
    "matplotlib",
    "seaborn",
    "scipy",
    "sklearn",
    "statsmodels",
    "pyarrow",
    "openpyxl",
    "polars",
    "plotly",
    "sympy",
    "networkx",
    "xgboost",
    "lightgbm",
)
_DIST = {"sklearn": "scikit-learn"}
# What does the job when a module is missing, best first.
_INSTEAD = {
    "seaborn": ("matplotlib",),
    "plotly": ("matplotlib",),
    "bokeh": ("matplotlib",),
    "altair": ("matplotlib",),
    "polars": ("pandas",),
    "pyspark": ("pandas",),
    "dask": ("pandas",),
    "sklearn": ("scipy", "statsmodels", "numpy"),
    "xgboost": ("sklearn",),
    "lightgbm": ("sklearn",),
    "catboost": ("sklearn",),
    "statsmodels": ("scipy", "sklearn"),
    "scipy": ("numpy",),
    "tensorflow": ("sklearn",),
    "torch": ("sklearn",),
    "prophet": ("statsmodels",),
    "openpyxl": ("pandas",),
    "pyarrow": ("pandas",),
}
_MISSING = re.compile(r"No module named '([^'.]+)")


def probe_expression() -> str:
    """A Python expression for the kernel: ``['pandas 2.2.3', ...]`` for each package that imports there."""
    pairs = repr([(module, _DIST.get(module, module)) for module in PACKAGES])
    return (
        f"[m + ' ' + __import__('importlib.metadata').metadata.version(d) for m, d in {pairs} "
        "if __import__('importlib.util').util.find_spec(m)]"
    )


def host_packages() -> tuple[str, ...]:
    """What ``probe_expression`` gives in a kernel that runs this interpreter, asked here: ``find_spec`` and
    the distribution's version, nothing imported. For a prompt made before the kernel has started."""
    found = []
    for module, distribution in ((module, _DIST.get(module, module)) for module in PACKAGES):
        try:
            if importlib.util.find_spec(module) is not None:
                found.append(f"{module} {importlib.metadata.version(distribution)}")
        except (ImportError, ValueError):  # a broken install: the kernel's probe would skip it too
            continue
    return tuple(found)


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
        return (
            f"{wanted} is not installed here and cannot be installed; use what is: {', '.join(installed)}."
            if installed
            else ""
        )
    return f"{wanted} is not installed here (and cannot be installed); {' or '.join(alternatives)} is."


def names_expression() -> str:
    """A Python expression for the kernel: ``['df: DataFrame 944x8', 'model: RegressionResultsWrapper', ...]``,
    one entry per global the analysis defined (modules, classes, IPython's and the setup cell's names left out)."""
    shape = (
        "(' ' + 'x'.join(map(str, v.shape)) if isinstance(getattr(v, 'shape', None), tuple) else "
        "' len ' + str(len(v)) if isinstance(v, (list, tuple, dict, set)) else '')"
    )
    return (
        f"[k + ': ' + type(v).__name__ + {shape} for k, v in list(globals().items()) "
        f"if not k.startswith('_') and k not in {_SETUP_NAMES!r} and not isinstance(v, type) "
        "and type(v).__name__ != 'module'][:200]"
    )


@dataclass(frozen=True)
class Environment:
    """What the kernel has, as probed: ``packages`` (``"pandas 2.2.3"``) and ``names`` (``"df: DataFrame 3x2"``)."""

    packages: tuple[str, ...] = ()
    names: tuple[str, ...] = ()

    @property
    def missing(self) -> tuple[str, ...]:
        return missing(self.packages)

    def names_line(self) -> str:
        """The prompt line naming what the code defined so far ("" when nothing)."""
        if not self.names:
            return ""
        shown = ", ".join(f"`{entry}`" for entry in self.names[:MAX_NAMES])
        more = f" and {len(self.names) - MAX_NAMES} more" if len(self.names) > MAX_NAMES else ""
        return f"Defined in the kernel so far (reuse them, do not reload): {shown}{more}."


async def probe(kernel: Kernel, *, packages: str = "", names: str = "") -> Environment:
    """Ask ``kernel`` which analysis packages it has and what the code defined so far, in one silent round
    trip. ``packages`` and ``names`` are expressions in the kernel's language that evaluate to a list of
    strings (for Python: ``probe_expression()``, ``names_expression()``); "" skips one.

    Raises ``KernelError`` when the kernel does not answer."""
    expressions = {key: text for key, text in (("packages", packages), ("names", names)) if text}
    answer = await kernel.evaluate(expressions) if expressions else {}
    return Environment(parse_list(answer.get("packages")), parse_list(answer.get("names")))


def parse_list(text: str | None) -> tuple[str, ...]:
    """The list of strings a probe printed (its ``repr``); () for anything else: the kernel's answer is not
    trusted, so it is parsed only when bounded, as a literal, and only its strings kept, each bounded."""
    if not text or len(text) > MAX_PROBE_TEXT:
        return ()
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return ()
    if not isinstance(value, list):
        return ()
    return tuple(" ".join(item.split())[:MAX_ENTRY] for item in value if isinstance(item, str))


@dataclass(frozen=True)
class FileInfo:
    """One data file as the ``deepanalyze`` prompt lists it: name, size in bytes, our summary."""

    name: str
    size: int
    summary: str = ""


@dataclass(frozen=True)
class PromptContext:
    """What the model is told about its environment.

    ``data_summary`` is markdown about the data files; ``files`` lists them
    one by one (DeepAnalyze's ``File N:`` blocks); ``packages`` are
    ``"name version"`` strings; ``preloaded`` says what the setup cell defined;
    ``names`` what the code defined so far (``"df: DataFrame 3x2"``, from ``environment.probe``).
    """

    task: str
    data_summary: str = ""
    packages: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()  # the common analysis packages that are not installed
    preloaded: str = ""
    files: tuple[FileInfo, ...] = ()
    names: tuple[str, ...] = ()


def prompt_context(
    environment: Environment,
    task: str,
    files: Sequence[DataFile],
    *,
    preloaded: str = "",
    missing: Sequence[str] | None = None,
    opens: Callable[[DataFile, str], str] | None = None,
    live: str = "",
) -> PromptContext:
    """What a prompt tells the model, the same in every mode: ``task``; the data description
    (``data_summary``: each file under its name and ``data`` attribute with its columns, dtypes, missing
    counts, dirty columns and first rows, bounded); the packages ``environment`` found and the common ones
    ``missing`` (the kernel language's, ``Language.missing``; by default Python's); ``preloaded``, what the
    setup cell defined (``Language.setup_words``; "" without one); the names defined so far; ``opens``, the kernel
    language's line that opens a database file read-only (``Language.opens``); ``live``, the live data sources'
    part of the data section (``Preparation.live_words``). Raises nothing."""
    summary = data_summary(files, opens=opens) if files or not live else ""
    return PromptContext(
        task=task,
        data_summary="\n\n".join(part for part in (summary, live) if part),
        packages=environment.packages,
        missing=tuple(environment.missing if missing is None else missing),
        preloaded=preloaded,
        files=tuple(FileInfo(f.name, f.size, f.summary) for f in files),
        names=environment.names,
    )
