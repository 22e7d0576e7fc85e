"""The kernel's environment: what model-written code may see of ours.

Owns the rule that the kernel never sees the agent's credentials: variables
whose names contain KEY, TOKEN, SECRET or PASSWORD (and a few known
credential names) are dropped unless explicitly allowed. Pure functions.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

__all__ = ["SECRET_MARKERS", "is_secret_name", "kernel_environment"]

SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
_SECRET_NAMES = frozenset({"OPENAI_BASE_URL", "AWS_SESSION_TOKEN", "DATABASE_URL", "NETRC"})
# Variables the agent itself uses and the kernel has no business reading.
_AGENT_PREFIXES = ("KERNEL_AGENT_",)
# Set by pytest in *its* process; ipykernel reads it and stops capturing C-level output,
# so a kernel started from a test would behave unlike one started anywhere else.
_NOT_INHERITED = frozenset({"PYTEST_CURRENT_TEST"})


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

    ``base`` (default ``os.environ``) minus secret-looking and agent-internal
    names, except those listed in ``allow``; then ``extra`` laid on top
    (explicit extras are the caller's choice and are kept as given).
    """
    allowed = {name.upper() for name in allow}
    source = os.environ if base is None else base
    env = {
        name: value
        for name, value in source.items()
        if name.upper() in allowed
        or not (is_secret_name(name) or name.upper().startswith(_AGENT_PREFIXES) or name in _NOT_INHERITED)
    }
    env.update(extra or {})
    return env
