"""The MCP server's pure parts: results as content blocks, workspace file confinement, CLI usage errors."""

from __future__ import annotations

import base64
import io
import subprocess
import sys
from pathlib import Path

import pytest
from mcp.types import ContentBlock, TextContent
from PIL import Image

from kernel_agent.errors import WorkspaceFileError
from kernel_agent.kernel.partial import OutputChunk, OutputTail
from kernel_agent.mcp import files
from kernel_agent.mcp.content import ContentLimits, execution_content, image_block
from kernel_agent.mcp.progress import progress_message
from kernel_agent.result import ErrorInfo, ExecutionResult, png_size


def png(width: int, height: int) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), "white").save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def figure_output(data: str) -> dict[str, object]:
    return {"output_type": "display_data", "data": {"image/png": data, "text/plain": "<Figure>"}, "metadata": {}}


def test_large_images_are_scaled_down_and_small_ones_pass_unchanged() -> None:
    small = png(40, 30)
    assert image_block(small, 1024).data == small
    scaled = image_block(png(3000, 1000), 600)
    assert scaled.mime_type == "image/png" and png_size(scaled.data) == (600, 200)
    assert image_block("not base64 at all", 10).data == "not base64 at all"


def text_of(block: ContentBlock) -> str:
    assert isinstance(block, TextContent), block
    return block.text


def test_execution_content_has_status_text_then_images_within_limits() -> None:
    result = ExecutionResult(
        status="ok", outputs=tuple(figure_output(png(20, 20)) for _ in range(3)), execution_count=4
    )
    content = execution_content(result, ContentLimits(max_images=2))
    assert [block.type for block in content.content] == ["text", "image", "image", "text"]
    assert text_of(content.content[0]).startswith("status: ok [4]")
    assert "1 more figure(s) not sent" in text_of(content.content[-1])
    assert content.structured_content["figures"] == 3 and not content.is_error


def test_errors_and_lost_state_are_data_with_the_cut_named() -> None:
    long = {"output_type": "stream", "name": "stdout", "text": "y" * 50_000}
    failed = ExecutionResult(status="error", outputs=(long,), error=ErrorInfo("ValueError", "bad"))
    content = execution_content(failed, ContentLimits(max_chars=2000))
    text = text_of(content.content[0])
    assert "characters omitted" in text and len(text) < 2500 and "ValueError: bad" in text
    died = ExecutionResult(status="died", state_lost=True, note="out of memory")
    assert execution_content(died, ContentLimits()).is_error  # isError: a failure the calling model sees
    summary = execution_content(died, ContentLimits()).structured_content
    assert summary["status"] == "died" and summary["state_lost"] and summary["note"] == "out of memory"


def test_paths_are_confined_to_the_workspace(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "secret.txt").write_text("no")
    (tmp_path / "ws" / "link").symlink_to(tmp_path / "secret.txt")
    for bad in ("../secret.txt", "/etc/passwd", "link", "", "a\x00b"):
        with pytest.raises(WorkspaceFileError):
            files.read_file(tmp_path / "ws", bad)
    with pytest.raises(WorkspaceFileError, match="outside"):
        files.write_file(tmp_path / "ws", "../escape.txt", "x")
    assert not (tmp_path / "escape.txt").exists()


def test_reading_listing_and_writing_files(tmp_path: Path) -> None:
    entry = files.write_file(tmp_path, "sub/data.bin", base64.b64encode(b"\x00\x01binary").decode(), "base64")
    assert entry.path == "sub/data.bin" and entry.size == 8
    files.write_file(tmp_path, "long.txt", "z" * 100)
    read = files.read_file(tmp_path, "long.txt", max_chars=10)
    assert read.kind == "text" and read.text == "z" * 10 and read.truncated
    assert files.read_file(tmp_path, "sub/data.bin").kind == "binary"
    with pytest.raises(WorkspaceFileError, match="not valid base64"):
        files.write_file(tmp_path, "bad.bin", "***", "base64")
    listed, total, unwalked = files.list_files(tmp_path, limit=1)
    assert total == 2 and [e.path for e in listed] == ["long.txt"] and unwalked is None


def test_the_cli_refuses_a_missing_data_file(tmp_path: Path) -> None:
    cli = str(Path(sys.executable).with_name("kernel-agent"))
    done = subprocess.run(
        [cli, "mcp", "--data", str(tmp_path / "missing.csv"), "--workspace", str(tmp_path / "ws")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2 and "missing.csv" in done.stderr
    assert not (tmp_path / "ws").exists()


def test_progress_messages_show_time_figures_and_the_output_tail() -> None:
    tail = OutputTail(max_chars=10)
    assert progress_message(3.2, tail) == "running for 3 s"
    tail(OutputChunk("0123456789abc\n", elapsed_s=1.0, figures=2))
    assert progress_message(4.0, tail) == "running for 4 s, 2 figures so far; output so far:\n…456789abc\n"
