"""``kernel-agent serve``: the HTTP service, its options the rows of ``server/config.SERVE``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from ...errors import ConfigError
from ...server.config import SERVE
from ..edge import edge
from ..options import agent_arguments, agent_options, kernel_options, table_options
from .common import ENVIRONMENT

__all__ = ["serve"]


@click.command(epilog=ENVIRONMENT)
@table_options(*SERVE.values())
@agent_options
@kernel_options
def serve(
    host: str,
    port: int,
    data_dir: str | None,
    keys_file: str | None,
    no_auth: bool,
    demo: bool,
    log_format: str,
    header_timeout: float,
    body_timeout: float,
    max_connections: int,
    **options: Any,
) -> None:
    """Serve the agent over HTTP: the web page at /, the native runs API and a DeepAnalyze/OpenAI-compatible
    /v1/chat/completions, with a live kernel per thread. Clients send ``Authorization: Bearer KEY``.

    With --demo every thread plays the scripted demo replies on the bundled sales data (the page says
    so); on a loopback address it needs no key unless keys are configured."""
    from ...agent.config import NO_MODEL_HELP, AgentConfig

    service = {name: options.pop(name) for name in SERVE if name in options}  # ServerConfig's own fields
    with edge(), _data_folder(data_dir, demo) as (folder, temporary):
        from ..._connections import listen
        from ...server.config import ConnectionLimits, ServerConfig, check_host, load_keys
        from ...server.origins import served_hosts
        from ...server.run import serve as run_server

        arguments = agent_arguments(options)
        keys = frozenset() if no_auth else load_keys(keys_file)
        stored = bool(keys) or no_auth or _stored_keys(service["database"], str(folder), host if demo else None)
        if demo:
            from ..demo import demo_serve

            agent = demo_serve(arguments)
            no_auth = no_auth or not stored  # on loopback: _stored_keys let it through
        elif not AgentConfig.resolve(**arguments).model.name:  # bad options fail now, not on every request
            raise ConfigError(NO_MODEL_HELP)
        else:
            agent = {k: v for k, v in arguments.items() if v is not None}
        check_host(host, auth=not no_auth)
        sockets = listen(host, port)  # a taken port is a usage error now, before a line is logged
        try:
            config = ServerConfig(
                folder,
                keys=frozenset() if no_auth else keys,
                auth=not no_auth,
                agent=agent,
                demo=demo,
                temporary=temporary,
                connections=ConnectionLimits(
                    header_timeout=header_timeout, body_timeout=body_timeout, max_connections=max_connections
                ),
                **{**service, "allowed_hosts": served_hosts(host, service["allowed_hosts"])},
            )
            run_server(config, host, port, log_format, sockets)  # type: ignore[arg-type]  # click.Choice gave one of its names
        finally:  # closed here too: a refusal after the bind (or a serve that never runs) keeps no port
            for sock in sockets:
                sock.close()


@contextlib.contextmanager
def _data_folder(data_dir: str | None, demo: bool) -> Iterator[tuple[Path, bool]]:
    """The service's data folder and whether it is temporary: the one given, else ``kernel-agent-data``
    here, else for ``--demo`` a temporary folder removed when the server exits (a demo leaves nothing)."""
    if data_dir is not None or not demo:
        yield Path(data_dir or "kernel-agent-data"), False
        return
    import signal
    import tempfile

    def exit_cleanly(number: int, frame: object) -> None:
        raise SystemExit(128 + number)  # uvicorn raises the SIGTERM it caught again as it ends: clean up first

    previous = signal.signal(signal.SIGTERM, exit_cleanly)
    try:
        with tempfile.TemporaryDirectory(prefix="kernel-agent-demo-") as folder:
            yield Path(folder), True
    finally:
        signal.signal(signal.SIGTERM, previous)


def _stored_keys(database: str | None, data_dir: str, loopback_demo: str | None) -> bool:
    """True when the service's database holds an active key. Raises ``ConfigError`` when it holds none
    (unless ``loopback_demo`` is a loopback host: the demo there needs no key)."""
    from ..._net import is_loopback
    from ...server.config import NO_KEY_HELP
    from ..keys import active_keys

    if active_keys(database, data_dir):
        return True
    if loopback_demo is not None and is_loopback(loopback_demo):
        return False
    raise ConfigError(NO_KEY_HELP)
