"""OutputCollector and ExecutionResult on recorded iopub messages (pure: no kernel)."""

from __future__ import annotations

import base64
import io
from typing import Any

import nbformat
import pytest
from matplotlib.figure import Figure
from nbformat.v4 import output_from_msg

from kernel_agent.kernel.outputs import OutputCaps, OutputCollector, output_node
from kernel_agent.result import ExecutionResult, clip_middle, png_size

MSG_ID = "request-1"


def msg(msg_type: str, content: dict[str, Any], parent: str = MSG_ID) -> dict[str, Any]:
    return {
        "header": {"msg_type": msg_type},
        "msg_type": msg_type,
        "parent_header": {"msg_id": parent},
        "content": content,
    }


def stream(text: str, name: str = "stdout", parent: str = MSG_ID) -> dict[str, Any]:
    return msg("stream", {"name": name, "text": text}, parent)


def display(data: dict[str, Any], display_id: str | None = None, kind: str = "display_data") -> dict[str, Any]:
    content: dict[str, Any] = {
        "data": data,
        "metadata": {},
        "transient": {"display_id": display_id} if display_id else {},
    }
    if kind == "execute_result":
        content["execution_count"] = 3
    return msg(kind, content)


def png(width: int = 4, height: int = 3) -> str:
    buffer = io.BytesIO()
    Figure(figsize=(width / 100, height / 100), dpi=100).savefig(buffer, format="png")
    return base64.b64encode(buffer.getvalue()).decode()


def collect(messages: list[dict[str, Any]], caps: OutputCaps | None = None) -> OutputCollector:
    collector = OutputCollector(MSG_ID, caps)
    for m in [msg("status", {"execution_state": "busy"}), *messages, msg("status", {"execution_state": "idle"})]:
        collector.feed(m)
    collector.finish()
    return collector


RECORDED = [
    stream("hello\n"),
    display({"text/plain": "<Figure>", "image/png": png()}, "d1"),
    display({"text/plain": "42"}, kind="execute_result"),
    msg("error", {"ename": "ValueError", "evalue": "bad", "traceback": ["\x1b[31mValueError\x1b[0m: bad"]}),
]


@pytest.mark.parametrize("message", RECORDED, ids=lambda m: m["msg_type"])
def test_output_node_is_exactly_what_nbformat_builds(message: dict[str, Any]) -> None:
    ours = output_node(message["msg_type"], message["content"])
    assert ours == output_from_msg(message)
    nbformat.validate(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(outputs=[ours])]))


def test_only_this_requests_messages_are_kept() -> None:
    collector = collect([stream("mine\n"), stream("a background thread's\n", parent="other"), stream("mine too\n")])
    assert collector.outputs == [output_node("stream", {"name": "stdout", "text": "mine\nmine too\n"})]
    assert collector.idle and collector.started


def test_streams_coalesce_by_name_and_keep_order() -> None:
    outputs = collect([stream("a"), stream("b"), stream("warn", "stderr"), stream("c")]).outputs
    assert [(o["name"], o["text"]) for o in outputs] == [("stdout", "ab"), ("stderr", "warn"), ("stdout", "c")]


def test_clear_output_wait_clears_just_before_the_next_output() -> None:
    clear = msg("clear_output", {"wait": True})
    outputs = collect([stream("0\n"), clear, stream("1\n"), clear, stream("2\n")]).outputs
    assert [o["text"] for o in outputs] == ["2\n"]
    assert collect([stream("x"), clear]).outputs == [output_node("stream", {"name": "stdout", "text": "x"})]
    assert collect([stream("x"), msg("clear_output", {"wait": False})]).outputs == []


def test_update_display_data_replaces_by_display_id() -> None:
    update = msg(
        "update_display_data", {"data": {"text/plain": "'new'"}, "metadata": {}, "transient": {"display_id": "d1"}}
    )
    outputs = collect(
        [display({"text/plain": "'old'"}, "d1"), display({"text/plain": "'other'"}, "d2"), update]
    ).outputs
    assert [o["data"]["text/plain"] for o in outputs] == ["'new'", "'other'"]
    assert all("transient" not in o for o in outputs)


def test_carriage_returns_resolve_like_a_terminal() -> None:
    outputs = collect([stream("\r1/3"), stream("\r2/3"), stream("\r3/3\n"), stream("done\r\n")]).outputs
    assert outputs[0]["text"] == "3/3\ndone\n"


def test_text_cap_keeps_head_and_tail_and_counts() -> None:
    collector = collect([stream("h" * 60), stream("m" * 10_000), stream("the end\n")], OutputCaps(max_output_bytes=100))
    text = "".join(o["text"] for o in collector.outputs)
    assert text.startswith("h" * 60) and text.endswith("the end\n")
    assert collector.dropped_chars == 60 + 10_000 + 8 - 100
    assert "output cap of 100 characters reached" in text


def test_one_budget_for_text_and_every_display() -> None:
    """Displays and streams share the budget: a display past it is not kept (counted, said), an update that
    would grow past it is not applied, and the kernel's own note of what it did not send is always kept."""
    big = {"text/html": "<p>" + "z" * 60 + "</p>"}
    not_sent = msg(
        "display_data",
        {
            "data": {"text/plain": "[kernel-agent: ... were not sent]"},
            "metadata": {"kernel_agent": {"output_not_sent": 5000}},
            "transient": {},
        },
    )
    update = msg(
        "update_display_data", {"data": {"text/plain": "u" * 500}, "metadata": {}, "transient": {"display_id": "d1"}}
    )
    collector = collect(
        [stream("a" * 40), display({"text/plain": "small"}, "d1"), display(big), display(big), update, not_sent],
        OutputCaps(max_output_bytes=120),
    )
    kinds = [o["output_type"] for o in collector.outputs]
    assert kinds == ["stream", "display_data", "display_data", "display_data", "stream"]
    assert collector.outputs[1]["data"]["text/plain"] == "small"  # the update past the budget was not applied
    assert collector.dropped_displays == 2 and collector.dropped_chars == 67 + 500 + 5000
    assert "2 displays among them" in collector.outputs[-1]["text"]


def test_image_cap_counts_what_it_drops() -> None:
    figure = {"text/plain": "<Figure>", "image/png": png()}
    collector = collect([display(figure) for _ in range(5)], OutputCaps(max_images=2))
    result = ExecutionResult("ok", tuple(collector.outputs), dropped_images=collector.dropped_images)
    assert len(result.images) == 2 and collector.dropped_images == 3
    assert "3 images not kept" in result.to_llm_text()


def test_error_info_has_no_ansi() -> None:
    collector = collect([RECORDED[3]])
    assert collector.error is not None and collector.error.traceback == ("ValueError: bad",)


def test_llm_text_names_images_and_clips_errors_toward_the_tail() -> None:
    image = display({"text/plain": "<Figure>", "image/png": png(64, 48)})
    result = ExecutionResult("ok", (output_node("display_data", image["content"]),))
    assert "[image 1: png 64x48]" in result.to_llm_text()
    long_error = output_node("error", {"ename": "E", "evalue": "v", "traceback": ["x" * 5000, "CAUSE: here"]})
    text = ExecutionResult("error", (long_error,)).to_llm_text(max_chars=500)
    assert text.rstrip().endswith("CAUSE: here") and "characters omitted" in text and len(text) < 700


def test_png_size_and_clip_middle() -> None:
    assert png_size(png(64, 48)) == (64, 48)
    assert png_size("bm90IGEgcG5n") is None
    clipped = clip_middle("a" * 1000 + "b" * 1000, 200)
    assert clipped.startswith("a") and clipped.endswith("b") and "1860 characters omitted" in clipped
