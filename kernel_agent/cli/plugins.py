"""``kernel-agent plugins``: every installed plug-in, by entry-point group, and where each comes from.

A thin front end on ``plugins.installed()`` (as ``llm plugins`` is on llm's): for each ``kernel_agent.*``
group, each entry's name, the object it points at (``module:object``) and the distribution (name and
version) that registered it, ours included; ``--json`` gives the same as a list of objects. What a
third party's metadata says is shown on one printable line (``safe.terminal``), never as it is.
"""

from __future__ import annotations

import json

import click

from .. import plugins as registries
from ..safe.terminal import one_line

__all__ = ["plugins"]


@click.command()
@click.option("--json", "as_json", is_flag=True, help="A JSON list of {group, name, object, distribution, version}.")
def plugins(as_json: bool) -> None:
    """List the installed plug-ins: each kernel_agent.* entry point and the package it comes from."""
    found = registries.installed()
    if as_json:
        listed = [
            {
                "group": entry.group,
                "name": entry.name,
                "object": entry.value,
                "distribution": entry.distribution,
                "version": entry.version,
            }
            for entry in found
        ]
        click.echo(json.dumps(listed, indent=2))
        return
    for group in dict.fromkeys(entry.group for entry in found):
        click.echo(one_line(group))
        rows = [
            (one_line(entry.name), one_line(entry.value), one_line(f"{entry.distribution} {entry.version}".strip()))
            for entry in found
            if entry.group == group
        ]
        name_width, object_width = (max(len(row[column]) for row in rows) for column in (0, 1))
        for name, value, source in rows:
            click.echo(f"  {name:<{name_width}}  {value:<{object_width}}  {source or '(no distribution)'}")
