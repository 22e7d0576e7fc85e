"""The kernel's environment: what model-written code may see of ours.

Owns the rule that the kernel gets an *allow-list* of the agent's
environment: the locale, ``PATH``, the interpreter's and the numeric
libraries' settings, and whatever the caller names in ``allow``. Everything
else (``OPENAI_API_KEY``, ``MYSQL_PWD``, ``GITHUB_PAT``, ``HTTPS_PROXY``
with a password, ``REDIS_URL``, ``SENTRY_DSN``, ...) stays out, whatever it
is called. ``gateway_environment`` is the same rule for a kernel on a Jupyter
gateway: what the start request carries. ``is_secret_name`` remains for
front ends that must warn before handing a secret-looking name over. Pure functions.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

__all__ = ["ALLOWED_NAMES", "SECRET_MARKERS", "gateway_environment", "is_secret_name", "kernel_environment"]

SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
_SECRET_NAMES = frozenset({"OPENAI_BASE_URL", "AWS_SESSION_TOKEN", "DATABASE_URL", "NETRC"})
ALLOWED_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "TMPDIR",
        "TERM",
        "TZ",
        "LANG",
        "LANGUAGE",
        "COLUMNS",
        "NO_COLOR",
        "SOURCE_DATE_EPOCH",
        "PYTHONPATH",
        "PYTHONHASHSEED",
        "PYTHONIOENCODING",
        "PYTHONUTF8",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONWARNINGS",
        "PYTHONUNBUFFERED",
        "VIRTUAL_ENV",
        "CONDA_PREFIX",
        "CONDA_DEFAULT_ENV",
        "MPLBACKEND",
        "OMP_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "MKL_NUM_THREADS",
        "NUMEXPR_MAX_THREADS",
        "NUMEXPR_NUM_THREADS",
        "VECLIB_MAXIMUM_THREADS",
    }
)
_ALLOWED_PREFIXES = ("LC_",)
# The Jupyter gateway convention: KERNEL_* names in the client's environment are meant for the gateway
# (Enterprise Gateway's KERNEL_USERNAME, KERNEL_NAMESPACE, ...). Ours (KERNEL_AGENT_*) are not.
_GATEWAY_PREFIX = "KERNEL_"
_OWN_PREFIX = "KERNEL_AGENT_"


def is_secret_name(name: str) -> bool:
    """True for a variable name that may hold a credential."""
    upper = name.upper()
    return any(marker in upper for marker in SECRET_MARKERS) or upper in _SECRET_NAMES


def kernel_environment(
    base: Mapping[str, str] | None = None,
    *,
    extra: Mapping[str, str] | None = None,
    allow: Iterable[str] = (),
) -> dict[str, str]:
    """The environment to start a kernel with.

    The names of ``ALLOWED_NAMES`` (and ``LC_*``) and those listed in ``allow``,
    taken from ``base`` (default ``os.environ``); then ``extra`` laid on top
    (explicit extras are the caller's choice and are kept as given).
    """
    allowed = ALLOWED_NAMES | {name.upper() for name in allow}
    source = os.environ if base is None else base
    env = {
        name: value
        for name, value in source.items()
        if name.upper() in allowed or name.upper().startswith(_ALLOWED_PREFIXES)
    }
    env.update(extra or {})
    return env


def gateway_environment(
    extra: Mapping[str, str] | None = None, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The ``env`` a gateway kernel's start request carries.

    The ``KERNEL_*`` names of ``base`` (default ``os.environ``), as Jupyter
    Server's own gateway client sends them (Enterprise Gateway authorizes by
    ``KERNEL_USERNAME``), except our ``KERNEL_AGENT_*`` settings; then
    ``extra`` on top. Secret-looking names are dropped from both.
    """
    source = os.environ if base is None else base
    env = {
        name: value
        for name, value in source.items()
        if name.startswith(_GATEWAY_PREFIX) and not name.startswith(_OWN_PREFIX)
    }
    env.update(extra or {})
    return {name: value for name, value in env.items() if not is_secret_name(name)}
