"""The execute engine's verdicts (pure) and the kernel seam's shape."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from kernel_agent.kernel.engine import Outcome, Verdict, classify
from kernel_agent.kernel.interface import Kernel
from kernel_agent.kernel.providers.attached import AttachedProvider
from kernel_agent.kernel.providers.base import KernelProvider
from kernel_agent.kernel.providers.local import LocalProvider
from kernel_agent.kernel.sandbox.limits import Limits
from kernel_agent.kernel.session import AsyncKernelSession
from kernel_agent.result import ErrorInfo

LIMITS = Limits(memory_mb=4096)


def verdict(
    outcome: Outcome, reply: dict[str, Any] | None = None, error: ErrorInfo | None = None, **kw: object
) -> Verdict:
    options = {"limits": LIMITS, "timeout": 2.0, "grace": 1.0, **kw}
    return classify(outcome, reply or {}, error, **options)  # type: ignore[arg-type]


def test_a_finished_request_is_ok_or_error_from_the_reply_and_the_outputs() -> None:
    assert verdict(Outcome.IDLE, {"status": "ok"}) == Verdict("ok")
    assert verdict(Outcome.IDLE, {"status": "error"}).status == "error"
    assert verdict(Outcome.IDLE, {}, ErrorInfo("ValueError", "x")).status == "error"
    assert verdict(Outcome.IDLE, {"status": "aborted"}) == Verdict(
        "error", note="the request was aborted by the kernel"
    )


def test_an_error_caused_by_our_limit_names_the_limit() -> None:
    note = verdict(Outcome.IDLE, {"status": "error"}, ErrorInfo("MemoryError", "")).note
    assert "memory limit of 4,096 MB" in note


def test_the_timeout_ladder_outcomes() -> None:
    assert verdict(Outcome.INTERRUPTED) == Verdict("timeout", note="stopped by an interrupt after 2s")
    restarted = verdict(Outcome.RESTARTED)
    assert (restarted.status, restarted.state_lost, restarted.restart) == ("timeout", True, False)
    stuck = verdict(Outcome.STUCK, owns_kernel=False)
    assert (stuck.status, stuck.state_lost) == ("timeout", False) and "left as it is" in stuck.note


@pytest.mark.parametrize("owns", [True, False])
def test_a_death_loses_state_and_restarts_only_a_kernel_we_own(owns: bool) -> None:
    died = verdict(Outcome.DIED, death="signal SIGKILL", owns_kernel=owns)
    assert (died.status, died.state_lost, died.restart) == ("died", True, owns)
    assert died.note.startswith("the kernel died (signal SIGKILL)")
    assert died.note.endswith("; the kernel was restarted") is owns
    exited = verdict(Outcome.EXITED, owns_kernel=owns)
    assert exited.note.startswith("the code asked the kernel to exit") and exited.restart is owns


def test_every_outcome_the_pipeline_can_end_in_has_a_verdict() -> None:
    for outcome in Outcome:
        if outcome is not Outcome.DEADLINE:  # never final: the ladder turns it into another outcome
            assert verdict(outcome).status in ("ok", "error", "timeout", "died")


def test_the_session_is_a_kernel_and_the_providers_fit_the_seam() -> None:
    assert isinstance(AsyncKernelSession(), Kernel)
    wanted = {name for name, _ in inspect.getmembers(KernelProvider) if not name.startswith("_")}
    for provider in (LocalProvider, AttachedProvider):
        assert wanted <= {name for name, _ in inspect.getmembers(provider)} | {"owns_kernel", "limits", "client"}
