"""A revoked key's open work ends on this replica: its event streams close, its running runs stop.

Owns ``Revocations``: the streams open here, by owner (a key's id), and a watcher that asks the keys table
every ``interval`` seconds which keys are revoked while anything is open here (``kernel-agent keys revoke``
is another process, on any machine, so each replica asks the database every replica shares; nothing is
asked while nothing is open). A revoked owner's streams end with ``KEY_REVOKED`` and its runs executing
here are cancelled through ``cancel_runs`` (``cancelled``, their completed rounds kept, as a user's cancel).
Which runs execute here, and how a run is cancelled, is the service's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, TypeVar

from sqlalchemy.exc import SQLAlchemyError

from .keys import Keys

__all__ = ["KEY_REVOKED", "REVOKED_POLL_S", "Revocations"]

log = logging.getLogger(__name__)

T = TypeVar("T")
REVOKED_POLL_S = 1.0
KEY_REVOKED: dict[str, Any] = {
    "event": "error",
    "message": "the service key of this request was revoked: this stream ends here",
    "error_type": "KeyRevoked",
    "round": None,
}


class Revocations:
    """Streams open here by owner, and the watcher that ends a revoked owner's streams and runs.
    ``open_runs()`` names the owners of the runs executing here; ``cancel_runs(owner)`` stops them."""

    def __init__(
        self,
        keys: Keys,
        open_runs: Callable[[], set[str]],
        cancel_runs: Callable[[str], Awaitable[None]],
        interval: float = REVOKED_POLL_S,
    ) -> None:
        self.keys = keys
        self._open_runs = open_runs
        self._cancel_runs = cancel_runs
        self.interval = interval
        self._streams: dict[str, set[asyncio.Event]] = {}

    @contextlib.contextmanager
    def watching(self, owner: str) -> Iterator[asyncio.Event]:
        """An event set when ``owner``'s key is revoked, for as long as the ``with`` lasts."""
        revoked = asyncio.Event()
        self._streams.setdefault(owner, set()).add(revoked)
        try:
            yield revoked
        finally:
            streams = self._streams.get(owner, set())
            streams.discard(revoked)
            if not streams:
                self._streams.pop(owner, None)

    async def stream(
        self, owner: str, events: AsyncIterator[T], revoked_item: T, ends: Callable[[T], bool] = lambda _item: False
    ) -> AsyncIterator[T]:
        """``events`` until they end, or until ``owner``'s key is revoked: then ``revoked_item``, and the end.

        A revocation seen here wins over an item that came at the same moment; an item that ``ends`` the
        stream (the run's last event: a run cancelled because of that revocation, by another replica) is
        checked against the keys table first, so a revoked owner's stream ends with ``revoked_item`` on
        every replica, whichever noticed first."""
        with self.watching(owner) as revoked:
            stop = asyncio.ensure_future(revoked.wait())
            try:
                while True:
                    step = asyncio.ensure_future(anext(events))
                    await asyncio.wait({step, stop}, return_when=asyncio.FIRST_COMPLETED)
                    if step.done() and not stop.done():
                        try:
                            item = step.result()
                        except StopAsyncIteration:
                            return
                        if ends(item) and await self._revoked_now(owner):
                            yield revoked_item
                            return
                        yield item
                        continue
                    step.cancel()
                    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                        await step
                    yield revoked_item
                    return
            finally:
                stop.cancel()
                closing = getattr(events, "aclose", None)
                if closing is not None:
                    await closing()

    async def _revoked_now(self, owner: str) -> bool:
        """Whether the database has ``owner``'s key revoked now (False when it cannot say: the item stands)."""
        try:
            return owner in await self.keys.revoked()
        except (SQLAlchemyError, OSError) as exc:
            log.warning("cannot read the revoked keys: %s", type(exc).__name__)
            return False

    async def run(self) -> None:
        """Check every ``interval`` seconds, while anything is open here, until cancelled."""
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.check()
            except (SQLAlchemyError, OSError) as exc:  # the next check asks again
                log.warning("cannot read the revoked keys: %s", type(exc).__name__)

    async def check(self) -> set[str]:
        """End what the revoked owners have open here; return those owners."""
        owners = set(self._streams) | self._open_runs()
        if not owners:
            return set()
        revoked = owners & await self.keys.revoked()
        for owner in revoked:
            streams = self._streams.get(owner, set())
            log.info("key %s was revoked: its %d streams here end and its runs here stop", owner, len(streams))
            for event in streams:
                event.set()
        await asyncio.gather(*(self._cancel_runs(owner) for owner in revoked))
        return revoked
