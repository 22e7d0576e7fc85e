"""The agent's memory helpers on plain values: stuck guard, resume briefing, clipping old feedback."""

from __future__ import annotations

from kernel_agent.agent.run.history import StuckGuard, clip_old_feedback, resume_context
from kernel_agent.kernel.outputs import output_node
from kernel_agent.model.messages import ChatMessage
from kernel_agent.records import Round
from kernel_agent.result import ErrorInfo, ExecutionResult, RebuildReport


def failing(index: int, code: str, reply: str | None = None) -> Round:
    result = ExecutionResult("error", error=ErrorInfo("NameError", "x"))
    return Round(index, reply=reply or f"reply {index}", code=code, result=result)


def test_stuck_guard_counts_consecutive_repeats_only() -> None:
    guard = StuckGuard(3)
    assert not guard.add(failing(1, "print(x)"))
    assert not guard.add(failing(2, "print(x)"))
    assert not guard.add(failing(3, "print(y)"))  # a different attempt resets the count
    assert not guard.add(failing(4, "print(y)"))
    assert guard.add(failing(5, "print(y)"))
    assert guard.reason == "stopped: the same failing code 3 times in a row"


def test_stuck_guard_also_catches_the_same_reply() -> None:
    guard = StuckGuard(2)
    assert not guard.add(Round(1, reply="I am not sure."))
    assert guard.add(Round(2, reply="I am  not sure. "))  # whitespace does not make it new
    assert "the same reply" in guard.reason


def test_the_same_words_with_new_code_are_not_the_same_reply() -> None:
    guard = StuckGuard(2)
    ok = ExecutionResult("ok")
    assert not guard.add(Round(1, reply="Running it.", code="print(1)", result=ok))
    assert not guard.add(Round(2, reply="Running it.", code="print(2)", result=ok))  # a tool call's words repeat
    assert guard.add(Round(3, reply="Running it.", code="print(2)", result=ok))


def test_a_repeated_failing_reply_is_said_to_be_the_same_failing_code() -> None:
    guard = StuckGuard(2)
    assert not guard.add(failing(1, "print(x)", reply="Running it."))
    assert guard.add(failing(2, "print(x)", reply="Running it."))  # both counts reach the limit at once
    assert guard.reason == "stopped: the same failing code 2 times in a row"


def test_clip_old_feedback_keeps_the_latest_rounds_and_drops_old_images() -> None:
    long = "a" * 3000 + "TAIL"
    messages: list[ChatMessage] = [
        {"role": "system", "content": "s" * 5000},
        {"role": "tool", "tool_call_id": "1", "content": long},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": long},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA"}},
            ],
        },
        {"role": "tool", "tool_call_id": "2", "content": long},
    ]
    sent = clip_old_feedback(messages, [range(1, 3), range(3, 4)], keep=1, clip_chars=500)
    assert sent[0] is messages[0] and sent[3] is messages[3]  # not feedback / the latest round: untouched
    clipped, parts = sent[1]["content"], sent[2]["content"]
    assert isinstance(clipped, str) and len(clipped) < 600 and clipped.endswith("TAIL")
    assert isinstance(parts, list) and parts[1] == {"type": "text", "text": "[image from an earlier round omitted]"}
    assert messages[1]["content"] == long  # the history itself is not changed
    assert clip_old_feedback(messages, [range(1, 3)], keep=1, clip_chars=500) is messages


def test_resume_briefing_lists_code_and_output_then_the_question() -> None:
    ok = Round(
        1,
        reply="r",
        code="total = 42",
        result=ExecutionResult("ok", (output_node("stream", {"name": "stdout", "text": "42\n"}),)),
    )
    answer = Round(2, reply="r", answer="It is 42.")
    report = RebuildReport(rerun=(0,), failed=((1, "NameError: name 'x' is not defined"),), missing=("total",))
    text = resume_context([ok, answer], "Double it", report=report)
    assert text.index("total = 42") < text.index("42\n") < text.index("It is 42.") < text.index("Double it")
    assert (
        "re-ran 0 rounds after the setup cell; round 1 failed on re-run (NameError: name 'x' is not defined); "
        "names now missing: total"
    ) in text
    assert "still holds the state" in resume_context([ok], "Double it")
