"""``KernelAgentPersona``: the agent as a Jupyter AI v3 persona (``jupyter_ai.personas`` entry point).

A message to KernelAgent in a JupyterLab chat is a task: the persona runs ``AsyncAgent`` on it in a
sandboxed kernel of its own (or, with ``kernel = "notebook"``, opt-in, attached to the notebook's own kernel,
unconfined, which the chat says: ``kernels.py``), streams the reply into one chat message (``chat.py``) and writes each
round into the open notebook's shared document as it happens (``live.py``): its code as it starts, what
it prints as it runs, the finished round's cells (outputs, figures, execution count) when it ends. The notebook is
one the message names (``… in analysis.ipynb``), else ``<chat name>.ipynb`` beside the chat, created if
missing. Data files are paths the message names (relative to the chat's folder) and the message's
attachments; they are copied into the run's workspace, ``<chat name>-agent/`` beside the chat, so
the notebook's own kernel finds them when it re-runs the cells (the setup cell goes there). The run's
exported notebooks are written beside that workspace under dot names (``.<chat name>-agent.ipynb`` and its clean
view), so the chat's folder shows one notebook; ``replay`` and ``show`` work on them.

A follow-up message continues in the same kernel (every variable is still there) and appends to the
same notebooks. The chat's stop button (``cancel_response``), and JupyterLab's interrupt of the notebook's
kernel (``InterruptWatch``), interrupt the running code and end the run with that round kept, commented
out, as the export writes it.

The model comes from the persona's settings (``c.KernelAgentPersona.model``, ``base_url``,
``api_key`` in a Jupyter Server config file) or our environment variables (``KERNEL_AGENT_MODEL``,
``OPENAI_BASE_URL``, ``OPENAI_API_KEY``); neither the endpoint nor the key is shown in the chat or
written to the notebook's cells or a log (the run's own record keeps the endpoint's host in its metadata,
as every run's does). Live databases come from the Jupyter server's operator, never from a chat message (a
message is anyone's input): ``c.KernelAgentPersona.sources = ["shop=postgresql://ann@db/shop"]``, each queried
with ``sql()`` in the conversation's kernel through a broker of the conversation's own, opened with its kernel
(started given the broker's socket) and closed with it; the notebook's own kernel (``kernel = "notebook"``)
cannot be given a socket once started, so sources are refused there. The same setting gives the server's
own kernels (a notebook's Run All) the sources through one broker of the server's (``brokered.py``). With
``scripted_demo`` no model is asked: the bundled scripted replies play on the bundled sales data (unless the
message names files), as ``kernel-agent demo`` does, and the chat says so.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_ai_persona_manager import BasePersona, PersonaDefaults
from jupyterlab_chat.models import Message, NewMessage
from traitlets import Bool, Enum, Float, Integer, TraitType, Unicode

from ..agent.run.agent import AsyncAgent
from ..agent.run.live import LiveSources, split_data
from ..agent.settings import SETTINGS
from ..errors import ConfigError, KernelAgentError, SourceError
from ..events import CodeReady, Event, ExecutionFinished, ExecutionOutput, RoundFinished, RunFinished, RunStarted
from ..kernel.interface import KernelsAhead
from ..kernel.session import AsyncKernelSession
from ..kernel.workspace import fresh_folder, records_beside
from ..redact import redact
from .brokered import sources_trait
from .chat import ChatReply
from .kernels import InterruptWatch, notebook_kernel
from .live import LiveNotebook

if TYPE_CHECKING:
    from ..sources.base import SourceSpec

__all__ = ["KernelAgentPersona"]

log = logging.getLogger(__name__)

_REDRAW_S = 0.2  # the chat message is redrawn at most this often while the run goes (each page re-renders it whole)
_TRAIT_TYPES: dict[type, type[TraitType[Any, Any]]] = {str: Unicode, int: Integer, float: Float, bool: Bool}
_PATH = re.compile(r"[`'\"]?([\w./-]+\.[A-Za-z0-9]{1,8})[`'\"]?")


def setting_trait(name: str, note: str = "") -> TraitType[Any, Any]:
    """A ``c.KernelAgentPersona.<name>`` setting made from the agent setting's row: its type and help (with its
    environment variable and default); None (not set) lets the environment or the default decide."""
    row = SETTINGS[name]
    trait = _TRAIT_TYPES[row.type](None, allow_none=True, config=True, help=row.described(note))
    return trait.tag(setting=True)


class KernelAgentPersona(BasePersona):
    """KernelAgent in Jupyter AI's chat (see the module). One instance per chat, so one conversation:
    its agent, kernel, workspace and notebooks live as long as the chat's persona."""

    model = setting_trait("model")
    base_url = setting_trait("base_url")
    api_key = setting_trait("api_key")
    max_rounds = setting_trait("max_rounds", "per message")
    exec_timeout = setting_trait("exec_timeout")
    template = setting_trait("template")
    kernel = Enum(
        ["sandbox", "notebook"],
        default_value="sandbox",
        config=True,
        help="where the code runs: the agent's own sandboxed kernel, or (opt-in) the notebook's own "
        "kernel, unconfined, seeing your variables",
    )

    sources = sources_trait()

    scripted_demo = Bool(
        False,
        config=True,
        help="play the bundled scripted demo replies (no model is asked) on the bundled sales data, unless "
        "the message names files; the chat and the notebook say the replies are scripted",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._conversation: _Conversation | None = None
        self._running: asyncio.Task[None] | None = None
        self._watch: InterruptWatch | None = None

    @classmethod
    def setting_names(cls) -> tuple[str, ...]:
        """The agent settings this persona takes as its own settings (``setting_trait``), by keyword."""
        return tuple(cls.class_traits(setting=True))

    @property
    def defaults(self) -> PersonaDefaults:
        return PersonaDefaults(
            name="KernelAgent",
            description="Analyses your data by writing code in rounds in a sandboxed kernel; "
            "each round becomes cells in the open notebook.",
            avatar_path=str(Path(__file__).with_name("avatar.svg")),
            system_prompt="",
        )

    async def process_message(self, message: Message) -> None:
        task = _task_text(message.body, self.name)
        if not task:
            self.send_message(f"Tell me what to analyse, e.g. `@{self.name} what drives revenue in sales.csv?`")
            return
        try:
            conversation = self._conversation or self._new_conversation(task)
            data = self._data_files(message, task, conversation.folder)
            if self.scripted_demo and not data:
                from ..demo import dataset_path

                data = [str(dataset_path())]
            await conversation.open_notebook()
        except KernelAgentError as exc:
            self.send_message(f"**Cannot start:** {_escaped(str(exc))}")
            return
        self._conversation = conversation
        if self._watch is None:  # JupyterLab's stop button on the notebook stops the run as the chat's does
            self._watch = InterruptWatch(self._serverapp, self._watched, self.cancel_response)
        reply = ChatReply(notebook=conversation.notebook, kernel=self.kernel)
        message_id = self.chat.add_message(NewMessage(body=reply.body, sender=self.id))
        running = self._running = asyncio.ensure_future(self._run(conversation, task, data, reply, message_id))
        try:
            await asyncio.wait({running})
        finally:
            self._running = None
        if not running.cancelled():
            running.result()  # a failure of ours (not the run's): Jupyter AI reports it in the chat

    async def cancel_response(self) -> None:
        """The chat's stop button: interrupt the running code; the run ends with that round kept."""
        running = self._running
        if running is not None and not running.done():
            running.cancel()
            await asyncio.wait({running})

    async def shutdown(self) -> None:
        await super().shutdown()
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.close()
        await self.cancel_response()
        conversation, self._conversation = self._conversation, None
        if conversation is not None:
            await conversation.close()

    # ----------------------------------------------------------------- internals
    async def _run(
        self, conversation: _Conversation, task: str, data: list[str], reply: ChatReply, message_id: str
    ) -> None:
        redraw = _Redraw(lambda: self._draw(message_id, reply), _REDRAW_S)
        self.set_status("is analysing…")
        try:
            async for event in conversation.stream(task, data):
                reply.feed(event)
                match event:
                    case RunStarted() | RoundFinished() | RunFinished():  # the notebook is synced after these
                        await conversation.sync()
                    case CodeReady():
                        conversation.live.running(event.round, event.reasoning, event.code)
                    case ExecutionFinished():
                        result = event.result
                        conversation.live.finished(event.round, list(result.outputs), result.execution_count)
                    case ExecutionOutput():
                        conversation.live.output(event.round, event.text)
                redraw.request()
        except asyncio.CancelledError:
            reply.stopped()
            await conversation.sync()
        except KernelAgentError as exc:
            reply.failed(str(exc))
            log.warning("KernelAgent run failed: %s", conversation.hidden(str(exc)))
            await conversation.sync()
        finally:
            redraw.flush()
            self.clear_status()

    def _draw(self, message_id: str, reply: ChatReply) -> None:
        body = self._conversation.hidden(reply.body) if self._conversation is not None else reply.body
        self.chat.update_message(
            Message(id=message_id, body=body, time=time.time(), sender=self.id, raw_time=False), trigger_actions=[]
        )

    def _new_conversation(self, task: str) -> _Conversation:
        options: dict[str, Any] = {name: getattr(self, name) for name in self.setting_names()}
        if self.scripted_demo:  # the replies are written for the tags protocol; no model, no endpoint
            from ..demo import TYPING_DELAY_S, demo_model

            options = {
                "protocol": "tags",
                "chat_model": demo_model(delay=TYPING_DELAY_S),
                "max_rounds": options["max_rounds"],
                "exec_timeout": options["exec_timeout"],
            }
        settings = self._serverapp.web_app.settings
        chat_path = Path(self.get_chat_path(relative=True))
        named = _named_notebook(task, Path(self.get_chat_dir()))
        notebook = (chat_path.parent / named) if named else chat_path.with_suffix(".ipynb")
        live = LiveNotebook(settings["jupyter_server_ydoc"], settings["contents_manager"], notebook.as_posix())
        files, sources = split_data(list(self.sources))  # a password refused, never echoed
        if files:
            raise SourceError("KernelAgentPersona.sources takes live databases' URIs, NAME=postgresql://…, not files")
        if sources and self.kernel == "notebook":
            raise ConfigError(
                "live data sources need the agent's own kernel: the notebook's kernel was started without the "
                "broker's socket and cannot be given one (set KernelAgentPersona.kernel to 'sandbox')"
            )
        return _Conversation(
            options,
            Path(self.get_chat_dir()),
            notebook.as_posix(),
            live,
            self._serverapp if self.kernel == "notebook" else None,
            sources,
        )

    def _watched(self) -> str | None:
        """The notebook whose kernel's interrupt stops the run: while one runs, the one it writes into."""
        running, conversation = self._running, self._conversation
        return conversation.notebook if running is not None and not running.done() and conversation else None

    @property
    def _serverapp(self) -> Any:
        return self.parent.parent.serverapp

    def _data_files(self, message: Message, task: str, folder: Path) -> list[str]:
        """Files the message names (relative to the chat's folder, never above it) and its attachments."""
        named = [folder / match for match in _PATH.findall(task)]
        files = [p for p in named if p.suffix != ".ipynb" and _inside(p, folder) and p.is_file()]
        attached = self.chat.get_attachments()
        root = Path(self.parent.root_dir)
        for attachment_id in message.attachments or []:
            value = getattr(attached.get(attachment_id), "value", None)  # relative to the server's root
            path = root / value if isinstance(value, str) and value else None
            if path is not None and path.suffix != ".ipynb" and _inside(path, root) and path.is_file():
                files.append(path)  # a client's claim: never an absolute path or one above the root
        return [str(p) for p in dict.fromkeys(files)]


class _Conversation:
    """One chat's agent, its kernel (kept across messages), workspace and notebooks, and its live sources (open
    while its kernel lives)."""

    def __init__(
        self,
        options: dict[str, Any],
        folder: Path,
        notebook: str,
        live: LiveNotebook,
        serverapp: Any = None,
        sources: tuple[SourceSpec, ...] = (),
    ) -> None:
        self.folder = folder
        self.serverapp = serverapp  # given: the code runs in the notebook's own kernel, attached
        self.notebook = notebook
        self.live = live
        stem = Path(notebook).stem
        self.workspace = fresh_folder(folder / f"{stem}-agent")
        self.record = records_beside(self.workspace, hidden=True)  # the user's one notebook is ``notebook``
        self.agent = AsyncAgent(**options, session_factory=_HeldKernels(self))  # raises ConfigError
        self.session: AsyncKernelSession | None = None
        self.sources = sources
        self.live_sources: LiveSources | None = None

    async def open_sources(self) -> LiveSources | None:
        """The live sources, opened with their broker now when they are not (None without). Raises
        ``SourceError`` naming one that cannot be opened."""
        if self.sources and self.live_sources is None:
            live = LiveSources(self.sources)
            await live.open()
            self.live_sources = live
        return self.live_sources

    async def open_notebook(self) -> None:
        if self.live.document is None:
            await self.live.open()

    async def stream(self, task: str, data: list[str]) -> AsyncIterator[Event]:
        """The events of a run on ``task``: the first, or a follow-up once a run is recorded (a first message
        that failed before its run started leaves nothing to follow up); the live sources opened first (the
        agent reads them as the run starts)."""
        await self.open_sources()
        if not self.record.exists():
            events = self.agent.stream(task, data, self.workspace, self.record)
        else:
            events = self.agent.stream_resume(self.record, task, workspace=self.workspace, data=data, restore=False)
        async with aclosing(events):
            async for event in events:
                yield event

    def hidden(self, text: str) -> str:
        """``text`` without the endpoint or the key (a model error may name the endpoint)."""
        return redact(text, [self.agent.config.model.api_key, self.agent.config.model.base_url])

    async def kernel(self) -> AsyncKernelSession:
        if self.session is not None and not await self.session.is_alive():
            await self.session.close()
            self.session = None
        if self.session is None and self.serverapp is not None:
            self.session = await notebook_kernel(
                self.serverapp,
                self.notebook,
                self.workspace,
                lambda provider: self.agent.new_session(self.workspace, provider=provider),
            )
        if self.session is None:
            live = await self.open_sources()
            sockets = live.kernel_sockets() if live is not None else {}
            session = self.agent.new_session(self.workspace, sockets=sockets)
            await session.start()
            self.session = session
        return self.session

    async def sync(self) -> None:
        if self.record.exists():
            await self.live.sync_from(self.record)

    async def close(self) -> None:
        session, self.session = self.session, None
        live, self.live_sources = self.live_sources, None
        try:
            if session is not None:
                await session.close()
        finally:
            try:
                if live is not None:
                    await live.aclose()
            finally:
                await self.agent.close()


class _Redraw:
    """Draws the chat message at most every ``interval`` seconds while the run goes: the first change at once, the
    changes inside an interval together at its end. Every draw re-renders the whole message in each open page,
    whose main thread then also has the notebook's updates to show."""

    def __init__(self, draw: Any, interval: float) -> None:
        self.draw = draw
        self.interval = interval
        self.last = float("-inf")
        self.pending: asyncio.TimerHandle | None = None

    def request(self) -> None:
        if self.pending is not None:
            return
        wait = self.last + self.interval - time.monotonic()
        if wait <= 0:
            self._now()
        else:
            self.pending = asyncio.get_running_loop().call_later(wait, self._now)

    def flush(self) -> None:
        """Draw now (the run ended), nothing left pending."""
        if self.pending is not None:
            self.pending.cancel()
        self._now()

    def _now(self) -> None:
        self.pending = None
        self.last = time.monotonic()
        self.draw()


class _HeldKernels:
    """The conversation's ``KernelFactory``: its one kernel, in the chat's workspace. Its kernel is the agent's
    own kind (``new_session``), so what it is is known before it starts (``kernels_ahead``: the first
    request goes out while it starts), unless it is the notebook's kernel (any kernelspec the user chose)."""

    kernels_apart = False

    def __init__(self, conversation: _Conversation) -> None:
        self.conversation = conversation

    @property
    def live_sources(self) -> LiveSources | None:
        """The conversation's open live sources: its kernel is given their socket (``live.factory_sources``)."""
        return self.conversation.live_sources

    @property
    def kernels_ahead(self) -> KernelsAhead | None:
        conversation = self.conversation
        if conversation.serverapp is not None or conversation.session is not None:  # attached, or started already
            return None
        return conversation.agent.config.kernel.ahead()

    def __call__(self, _workspace: Path, /) -> _Held:
        return _Held(self.conversation)


class _Held:
    """What the agent's ``async with session_factory(workspace)`` gets: the conversation's kernel, started
    on first use and left running on exit (the conversation owns it, not the run)."""

    def __init__(self, conversation: _Conversation) -> None:
        self.conversation = conversation

    async def __aenter__(self) -> AsyncKernelSession:
        return await self.conversation.kernel()

    async def __aexit__(self, *exc: object) -> None:
        return None


def _task_text(body: str, name: str) -> str:
    """The message without the mention of the persona."""
    return re.sub(rf"@{re.escape(name)}\b", "", body).strip()


def _named_notebook(task: str, folder: Path) -> str | None:
    """A notebook the message names (``… in analysis.ipynb``), relative to the chat's folder."""
    for found in _PATH.finditer(task):
        match = found.group(1)
        if match.endswith(".ipynb") and _inside(folder / match, folder):
            return match
    return None


def _inside(path: Path, folder: Path) -> bool:
    return Path(path).resolve().is_relative_to(folder.resolve())


def _escaped(text: str) -> str:
    return text.replace("<", "&lt;").replace(">", "&gt;")
