"""Where plug-ins are found: one ``Registry`` per entry-point group, every group read in one scan.

Owns the mechanism (find a name, load its object, check it is what the group gives, say the choices,
list what is installed); what an entry point of a group must be is its owner's to say, by the
``Registry`` it declares (the group, the type it gives, and whether an entry is that value or a
factory called with ``make``'s arguments)::

    group                     owner                            an entry point is
    kernel_agent.models       model/registry.py                make(name, ModelSettings) -> ChatModel
    kernel_agent.protocols    agent/names.py                   make(ProtocolSettings) -> Protocol
    kernel_agent.providers    kernel/providers/registry.py     make(ProviderSettings) -> KernelProvider
    kernel_agent.languages    agent/languages.py               a Language
    kernel_agent.sources      sources/registry.py              a SourceKind (the URI schemes it claims)

Ours are registered by our own pyproject, as a third party's are by theirs. The installed
distributions' entry points are scanned once a process (``importlib.metadata`` reads every
``entry_points.txt`` on ``sys.path``, tens of milliseconds), on first use or ahead by ``warm()``
(the service calls it in a worker thread, not on its event loop); ``forget()`` drops the scan (a
test that installs a package). Names are compared in lower case; where two distributions register
one name, the first on ``sys.path`` wins, as an import would. ``installed()`` lists every
``kernel_agent.*`` group's entries with the distribution each comes from (``kernel-agent plugins``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import import_module
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from .errors import ConfigError, KernelAgentError

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

__all__ = ["Choices", "Installed", "Registry", "forget", "installed", "warm"]

_PREFIX = "kernel_agent."
T = TypeVar("T")


@cache
def _scan() -> dict[str, dict[str, EntryPoint]]:
    """Every ``kernel_agent.*`` group's entry points by name: one pass over the installed distributions."""
    from importlib.metadata import entry_points  # ~20 ms to import: not for a process that reads no registry

    everything = entry_points()
    found: dict[str, dict[str, EntryPoint]] = {}
    for group in sorted(group for group in everything.groups if group.startswith(_PREFIX)):
        named = found.setdefault(group, {})
        for entry in everything.select(group=group):
            named.setdefault(entry.name.strip().lower(), entry)
    return found


def warm() -> None:
    """Scan the installed entry points now (blocking: call it off an event loop), so no lookup waits."""
    _scan()


def forget() -> None:
    """Drop the scan: the next lookup reads ``sys.path`` again (a package was installed or removed)."""
    _scan.cache_clear()


class Choices(Sequence[str]):
    """A registry's names as a sequence read when used (argparse's and click's ``choices``), not when made."""

    def __init__(self, names: Callable[[], tuple[str, ...]]) -> None:
        self._names = names

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...

    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        return self._names()[index]

    def __len__(self) -> int:
        return len(self._names())

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._names()

    def __repr__(self) -> str:
        return repr(self._names())


@dataclass(frozen=True)
class Installed:
    """One installed entry point: its ``group``, ``name``, the ``value`` it points at (``module:object``) and
    the distribution it comes from (``distribution``/``version``: "" when the metadata does not say)."""

    group: str
    name: str
    value: str
    distribution: str
    version: str


def installed() -> tuple[Installed, ...]:
    """Every ``kernel_agent.*`` group's entry points, groups and names in alphabetical order (the one that
    wins for each name, as lookups see them)."""
    return tuple(
        Installed(group, name, entry.value, *((entry.dist.name, entry.dist.version) if entry.dist else ("", "")))
        for group, named in sorted(_scan().items())
        for name, entry in sorted(named.items())
    )


class Registry(Generic[T]):
    """One entry-point ``group``: its ``names()`` (``ours`` first, then the others sorted) and ``make(name)``.

    ``kind`` names what the group holds in messages ("protocol", "model plug-in", ...); ``gives`` is the
    type ``make`` returns (a runtime-checkable ``typing.Protocol`` will do), or its ``"module:Name"`` where
    importing it here would load what a front end must not load at import; ``factory``: an entry point is
    a callable that ``make``'s arguments are passed to, else it is the value itself.
    """

    def __init__(
        self, group: str, kind: str, gives: type[Any] | str, ours: tuple[str, ...] = (), *, factory: bool = True
    ) -> None:
        self.group = group
        self.kind = kind
        self.gives = gives
        self.ours = ours
        self.factory = factory
        self.choices = Choices(self.names)

    def __repr__(self) -> str:
        return f"<Registry {self.group}>"

    def entry_points(self) -> dict[str, EntryPoint]:
        """The installed entry points by name (lower case)."""
        return _scan().get(self.group, {})

    def names(self) -> tuple[str, ...]:
        """Every registered name: ours first, in our order, then the others in alphabetical order."""
        found = self.entry_points()
        return (
            *(name for name in self.ours if name in found),
            *sorted(name for name in found if name not in self.ours),
        )

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.strip().lower() in self.entry_points()

    def entry(self, name: str) -> EntryPoint:
        """The entry point registered as ``name``. Raises ``ConfigError`` listing the choices when none is."""
        entry = self.entry_points().get(name.strip().lower())
        if entry is None:
            raise ConfigError(f"unknown {self.kind} {name!r}; choose one of: {', '.join(self.names()) or 'none'}")
        return entry

    def _load(self, name: str) -> Any:
        """The object ``name``'s entry point names, imported (``make`` checks it). Raises ``ConfigError`` for an
        unknown name or one whose package cannot be imported (our own errors, e.g. ``ExtraMissingError``, pass
        through)."""
        entry = self.entry(name)
        try:
            return entry.load()
        except KernelAgentError:
            raise
        except Exception as exc:  # a third party's package: its import error is the installation's to fix
            raise ConfigError(f"the {self.kind} {name!r} ({entry.value}) cannot be loaded: {exc}") from exc

    def preload(self, name: str) -> None:
        """Import ``name``'s entry point now (blocking: call it off an event loop), so that ``make`` does not.
        Raises nothing: a name that cannot be loaded says so when it is made."""
        with contextlib.suppress(KernelAgentError):
            self._load(name)

    def make(self, name: str, *arguments: object) -> T:
        """What ``name``'s entry point gives: its object, or what it makes of ``arguments`` when the group's
        entries are factories. Raises ``ConfigError`` for an unknown name (listing the choices), an entry whose
        package cannot be imported, and an object that is not what the group gives; a factory's own
        ``ConfigError`` (and our ``ExtraMissingError``) pass through."""
        loaded = self._load(name)
        made = loaded(*arguments) if self.factory else loaded
        gives = self._gives()
        if not isinstance(made, gives):
            verb = "made" if self.factory else "is"
            value = self.entry(name).value
            raise ConfigError(
                f"the {self.kind} {name!r} ({value}) {verb} a {type(made).__name__}, not a {gives.__name__}"
            )
        made_value: T = made
        return made_value

    def _gives(self) -> type[Any]:
        if isinstance(self.gives, type):
            return self.gives
        module, _, name = self.gives.partition(":")
        gives: type[Any] = getattr(import_module(module), name)
        return gives
