"""The kernel's language, in one place: what differs between a Python kernel and an R one (or any other).

Owns one ``Language`` per language the agent knows (``PYTHON``, ``R``) and ``language_of``, which
picks it from the kernel's own ``language_info``: the ``Language`` registered under that name in the
``kernel_agent.languages`` entry points (an entry point is a ``Language``; ours are registered there as a
third party's are), else a generic profile (its name and fence, no setup beyond the working folder).
A profile holds what the layers above the kernel would otherwise assume: the words and code fence the
model is shown, the tools protocol's function name, the setup cell (data paths, figures as PNG, a fixed
seed) and the line that describes it, the line that opens a database file read-only, the probe for
installed packages and the hint for a package that is missing. The protocols and the loop take a
``Language``; nothing above the kernel layer assumes Python.

Pure: strings in, strings out; the loop runs the probe and the setup cell.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import quote

from ..plugins import Registry
from . import environment
from .datafiles.data import (
    SEED,
    DataFile,
    data_attributes,
    data_helper_words,
    opened_beside,
    preload_code,
    preload_description,
)

__all__ = [
    "LANGUAGES",
    "LANGUAGE_GROUP",
    "LANGUAGE_REGISTRY",
    "PYTHON",
    "R",
    "Language",
    "get_language",
    "language_names",
    "language_of",
]


@dataclass(frozen=True)
class Language:
    """What the agent needs to know of a kernel's language."""

    key: str  # language_info's name, lower case
    name: str  # as the model reads it
    fence: str  # the code fence's info string
    fences: tuple[str, ...]  # info strings a reply may use for it
    tool: str  # the tools protocol's function name
    kernel_words: str  # what runs the code, for the prompt
    figure_words: str  # how figures come back
    setup: Callable[[Sequence[DataFile | str]], str]  # the setup cell for these data files
    setup_words: Callable[[Sequence[DataFile | str]], str]  # one line on what the setup cell defined
    plain_setup: str  # the setup cell without the preload
    beside: Callable[[str, str | None], str]  # the setup cell's step into the workspace (opened in Jupyter)
    probe: str = ""  # an expression listing installed packages ("" for none), or code printing them
    probe_prints: bool = False  # the probes are code run quietly (kernels without user_expressions)
    names_probe: str = ""  # an expression (or code printing) "name: type shape" for each name defined so far
    parse_probe: Callable[[str | None], tuple[str, ...]] = lambda text: ()
    packages: tuple[str, ...] = ()  # the common analysis packages, probed
    hint: Callable[[str, str, Sequence[str]], str] = lambda ename, evalue, installed: ""
    comment: str = "#"
    # how the code opens a database file read-only, given the file and its data name ("" else)
    opens: Callable[[DataFile, str], str] = lambda file, source: ""

    @property
    def fence_line(self) -> re.Pattern[str]:
        """A line opening a code block in this language."""
        names = "|".join(re.escape(name) for name in self.fences)
        return re.compile(rf"^[ \t]*```[ \t]*(?:{names})[ \t]*$", re.M | re.I)

    def missing(self, installed: Sequence[str]) -> tuple[str, ...]:
        """The probed packages that are not installed (``installed`` as the probe gives it)."""
        have = {entry.split(" ", 1)[0] for entry in installed}
        return tuple(name for name in self.packages if name not in have)


# -- Python -----------------------------------------------------------------------------------------


def _python_hint(ename: str, evalue: str, installed: Sequence[str]) -> str:
    return environment.module_hint(evalue, installed) if ename == "ModuleNotFoundError" else ""


_READ_ONLY = "the copy is read-only, so is the connection: a write fails"


def _python_opens(file: DataFile, source: str) -> str:
    name = json.dumps(file.name, ensure_ascii=False)
    if file.kind == "sqlite":
        uri = json.dumps(f"file:{quote(file.name)}?mode=ro", ensure_ascii=False)
        opened = f'`con = sqlite3.connect({uri}, uri=True)` and query it with `pd.read_sql_query("SELECT …", con)`'
    elif file.kind == "duckdb":
        opened = f'`con = duckdb.connect({name}, read_only=True)` and query it with `con.sql("SELECT …").df()`'
    else:
        return ""
    at_once = f'`df = sql("SELECT …", source={json.dumps(source, ensure_ascii=False)})`'
    return f"Open it read-only with {opened}, or in one step with {at_once} (the setup cell's) ({_READ_ONLY})."


PYTHON = Language(
    key="python",
    name="Python",
    fence="python",
    fences=("python", "python3", "py", "ipython"),
    tool="execute_python",
    kernel_words="a persistent Jupyter (IPython) kernel",
    figure_words="Figures drawn with matplotlib (plt) are captured automatically when the code finishes",
    setup=preload_code,
    setup_words=preload_description,
    plain_setup="%matplotlib inline\n",
    beside=opened_beside,
    probe=environment.probe_expression(),
    parse_probe=environment.parse_list,
    packages=environment.PACKAGES,
    names_probe=environment.names_expression(),
    hint=_python_hint,
    opens=_python_opens,
)


# -- R ----------------------------------------------------------------------------------------------

R_PACKAGES = (
    "readr",
    "dplyr",
    "tidyr",
    "ggplot2",
    "data.table",
    "readxl",
    "jsonlite",
    "lubridate",
    "stringr",
    "broom",
    "MASS",
    "survival",
    "lme4",
    "caret",
    "randomForest",
    "forecast",
    "arrow",
    "DBI",
    "RSQLite",
    "duckdb",
)
_R_MISSING = re.compile(r"there is no package called [‘'`\"]?([A-Za-z0-9._]+)")


def _r_string(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)  # a JSON string is a valid R string literal for our names


def _r_setup(files: Sequence[DataFile | str]) -> str:
    pairs = [f"{name} = {_r_string(file)}" for name, file in data_attributes(files).items()]
    listed = ", ".join(pairs)
    if len(pairs) > 1 or len(listed) > 60:
        listed = "\n" + ",\n".join(f"    {pair}" for pair in pairs) + "\n"
    return (
        "# Figures inline as PNG; a fixed seed; `data` names the data files' paths.\n"
        'options(jupyter.plot_mimetypes = "image/png", repr.plot.width = 7, repr.plot.height = 5, width = 120)\n'
        f"set.seed({SEED})\n"
        f"data <- list({listed})\n"
    )


def _r_setup_words(files: Sequence[DataFile | str]) -> str:
    helper = data_helper_words(files, kind="is a list of", access="$")
    return (
        f"plots show inline as PNG; the random seed is {SEED}; {helper}. Read the files with base R "
        "(read.csv, read.delim) or the packages listed as installed; a database file with DBI, as its "
        "`# Data` entry says."
    )


def _r_opens(file: DataFile, source: str) -> str:
    name = _r_string(file.name)
    if file.kind == "sqlite":
        connect = f"DBI::dbConnect(RSQLite::SQLite(), {name}, flags = RSQLite::SQLITE_RO)"
    elif file.kind == "duckdb":
        connect = f"DBI::dbConnect(duckdb::duckdb(), {name}, read_only = TRUE)"
    else:
        return ""
    return (
        f'Open it read-only with `con <- {connect}` and query it with `DBI::dbGetQuery(con, "SELECT …")` '
        f"({_READ_ONLY}; DBI and {'RSQLite' if file.kind == 'sqlite' else 'duckdb'} must be installed: see the "
        "installed packages)."
    )


def _r_beside(setup: str, workspace: str | None) -> str:
    if not workspace:
        return setup
    return (
        f"if (dir.exists({_r_string(workspace)})) setwd({_r_string(workspace)})  "
        "# opened in Jupyter beside the run's workspace: work there\n" + setup
    )


def _r_probe_code() -> str:
    names = ", ".join(_r_string(name) for name in R_PACKAGES)
    return (
        f"local(cat(unlist(lapply(c({names}), function(x) if (nzchar(system.file(package = x))) "
        "paste(x, as.character(utils::packageVersion(x))))), sep = '|'))"
    )


def _r_names_code() -> str:
    return (
        "local({ns <- setdiff(ls(globalenv()), 'data'); if (length(ns)) cat(vapply(ns, function(n) {"
        "v <- get(n, envir = globalenv()); d <- dim(v); paste0(n, ': ', class(v)[1], if (!is.null(d)) "
        "paste0(' ', paste(d, collapse = 'x')) else if (is.atomic(v) && length(v) > 1) "
        "paste0(' length ', length(v)) else '')}, ''), sep = '|')})"
    )


def _r_parse_probe(text: str | None) -> tuple[str, ...]:
    """What an R probe printed (``readr 2.1.4|dplyr 1.1.0``, ``df: data.frame 3x2|x: numeric``): the kernel's
    claim, so bounded as ``environment.parse_list`` bounds it."""
    if not text or len(text) > environment.MAX_PROBE_TEXT:
        return ()
    return tuple(" ".join(entry.split())[: environment.MAX_ENTRY] for entry in text.split("|") if entry.strip())


def _r_hint(ename: str, evalue: str, installed: Sequence[str]) -> str:
    found = _R_MISSING.search(evalue)
    if not found:
        return ""
    have = ", ".join(installed) if installed else "base R (stats, graphics, utils)"
    return f"{found.group(1)} is not installed here and cannot be installed; use base R or what is: {have}."


R = Language(
    key="r",
    name="R",
    fence="r",
    fences=("r", "R", "rscript"),
    tool="execute_r",
    kernel_words="a persistent Jupyter kernel running R (IRkernel)",
    figure_words="Plots (base graphics or ggplot2 objects printed) are captured as PNG when the code finishes",
    setup=_r_setup,
    setup_words=_r_setup_words,
    plain_setup="",
    beside=_r_beside,
    probe=_r_probe_code(),
    probe_prints=True,
    parse_probe=_r_parse_probe,
    names_probe=_r_names_code(),
    packages=R_PACKAGES,
    hint=_r_hint,
    opens=_r_opens,
)

LANGUAGE_GROUP = "kernel_agent.languages"
LANGUAGES = ("python", "r")  # ours
LANGUAGE_REGISTRY: Registry[Language] = Registry(LANGUAGE_GROUP, "language", Language, LANGUAGES, factory=False)


def language_names() -> tuple[str, ...]:
    """Every installed language's name (a kernel's ``language_info`` name, lower case): ours first."""
    return LANGUAGE_REGISTRY.names()


def get_language(name: str) -> Language:
    """The ``Language`` registered as ``name``. Raises ``ConfigError`` for an unknown name (listing the
    choices), or an entry point that cannot be loaded or is not a ``Language``."""
    return LANGUAGE_REGISTRY.make(name)


def _generic(key: str, name: str) -> Language:
    return Language(
        key=key,
        name=name,
        fence=key,
        fences=(key, name),
        tool="execute_code",
        kernel_words=f"a persistent Jupyter kernel running {name}",
        figure_words="Images the code displays are captured",
        setup=lambda files: "",
        setup_words=lambda files: "",
        plain_setup="",
        beside=lambda setup, workspace: setup,
    )


def language_of(language_info: dict[str, object] | None) -> Language:
    """The profile for a kernel whose ``kernel_info_reply`` says ``language_info`` (None: Python): the one
    registered under its name, else a generic one. Raises ``ConfigError`` as ``get_language`` does."""
    name = str((language_info or {}).get("name") or "python")
    if name.lower() in LANGUAGE_REGISTRY:
        return get_language(name)
    return _generic(re.sub(r"[^a-z0-9_+-]", "", name.lower()) or "code", name)
