"""``kernel-agent kernelspec install``: the kernel-agent kernelspec where Jupyter finds it."""

from __future__ import annotations

import click

from ...agent.settings import Table, option
from ..edge import edge
from ..options import table_options

__all__ = ["KERNELSPEC", "kernelspec"]

KERNELSPEC = Table(
    option("kernelspec install", "user", bool, False, "Install for the current user"),
    option(
        "kernelspec install",
        "prefix",
        str,
        None,
        "Install under this prefix (e.g. a virtualenv's sys.prefix)",
        metavar="P",
        optional=True,
    ),
)


@click.group()
def kernelspec() -> None:
    """Manage the kernel-agent Jupyter kernelspec (for JupyterLab)."""


@kernelspec.command("install")
@table_options(*KERNELSPEC.values())
def kernelspec_install(user: bool, prefix: str | None) -> None:
    """Install the kernel-agent kernelspec where Jupyter finds it."""
    if user and prefix:
        raise click.UsageError("--user and --prefix cannot be used together")
    from ...kernel.kernelspec import install_kernelspec

    with edge():
        where = install_kernelspec(user=user, prefix=prefix)
    click.echo(f"installed the kernel-agent kernelspec in {where}")
