"""A kernel template outlives many kernels, so its temp folder may be cleaned away under it (systemd-tmpfiles' age
rule on a long-running service, a test's temp dir): when the template then dies, it is still restarted and the
next kernel is still forked from it, not refused with the folder's absence."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

import pytest

from kernel_agent.kernel.providers.forked import TemplateProvisioner
from kernel_agent.kernel.sandbox.template import TEMPLATE_FOLDER_PREFIX, Template, TemplateKey, template_for
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


def template_folders() -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob(f"{TEMPLATE_FOLDER_PREFIX}*"))


@pytest.mark.kernel
def test_a_template_whose_folder_was_cleaned_away_is_restarted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(OWN, f"folder-{os.getpid()}")
    before = template_folders()
    with KernelSession(tmp_path / "first", allow_env=(OWN,)) as first:
        template = template_of(first)
        (folder,) = template_folders() - before  # this template's, made as it started
        shutil.rmtree(folder)
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
