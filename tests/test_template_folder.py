"""A kernel template outlives many kernels and may be killed with its owner: it keeps nothing on disk (its log has no
name), so nothing of it is left behind whatever ends it, and a template that dies is restarted for the next kernel."""

from __future__ import annotations

import os
import signal
import tempfile
import time
from pathlib import Path

import pytest

from kernel_agent.kernel.providers.forked import TemplateProvisioner
from kernel_agent.kernel.sandbox.template import Template, TemplateKey, template_for
from kernel_agent.kernel.session_sync import KernelSession

FORKED = "; start: forked from a warmed template"
OWN = "KERNEL_AGENT_TEST_OWN_TEMPLATE"  # a variable only these kernels are given: a template of their own


def template_of(session: KernelSession) -> Template:
    """The template ``session``'s kernel was forked from (asserted forked, not started cold)."""
    assert session.async_session.confinement.endswith(FORKED), session.async_session.confinement
    manager = session.async_session.manager
    assert manager is not None and isinstance(manager.provisioner, TemplateProvisioner)
    made = manager.provisioner
    return template_for(TemplateKey.make(made.template_env, [Path(p) for p in made.extra_read]))


def temp_entries() -> set[str]:
    return {entry.name for entry in Path(tempfile.gettempdir()).iterdir() if not entry.name.startswith("kernel-agent-")}


@pytest.mark.kernel
def test_a_template_keeps_nothing_on_disk_and_is_restarted_when_it_dies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(OWN, f"own-{os.getpid()}")
    before = temp_entries()
    with KernelSession(tmp_path / "first", allow_env=(OWN,)) as first:
        template = template_of(first)
        assert template.starts == 1 and temp_entries() == before  # the kernels' runtime dirs aside: nothing new
        pid, starts = template.pid, template.starts
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while template.alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not template.alive()
    with KernelSession(tmp_path / "next", allow_env=(OWN,)) as following:
        assert template_of(following) is template and template.starts == starts + 1
        assert following.execute("1 + 1").result_text == "2"
    assert temp_entries() == before
