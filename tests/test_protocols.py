"""Pure unit tests of kernel_agent.agent.protocols: prompts, parsing, history messages."""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence

import pytest
from PIL import Image

from kernel_agent.agent.protocols import (
    EXECUTE_PYTHON_TOOL,
    MAX_IMAGES,
    PROTOCOLS,
    DeepAnalyzeProtocol,
    Feedback,
    FileInfo,
    PromptContext,
    Step,
    TagsProtocol,
    ToolsProtocol,
    downscale_png,
    get_protocol,
)
from kernel_agent.errors import ConfigError
from kernel_agent.model.chat import ModelReply, ToolCall
from kernel_agent.model.messages import ChatMessage, ContentPart
from kernel_agent.records import Round, Run, RunInfo, Turn
from kernel_agent.result import ExecutionResult, png_size

CTX = PromptContext(
    task="Which region sells most?",
    data_summary="## sales.csv\n3 columns: region, units, price",
    packages=("pandas 2.2.3", "numpy 2.1.0"),
    preloaded="pd, np, plt are imported; `data` names the data files",
)


def da(text: str, finish_reason: str | None = None, stop_reason: str | int | None = None) -> Step:
    return DeepAnalyzeProtocol().parse(ModelReply(text, finish_reason=finish_reason, stop_reason=stop_reason))


def tags(text: str, finish_reason: str | None = None, stop_reason: str | int | None = None) -> Step:
    return TagsProtocol().parse(ModelReply(text, finish_reason=finish_reason, stop_reason=stop_reason))


def text_of(message: ChatMessage) -> str:
    """The message's content, which must be plain text (not parts, not None)."""
    content = message["content"]
    assert isinstance(content, str), message
    return content


def parts_of(message: ChatMessage) -> list[ContentPart]:
    """The message's content, which must be a list of text and image parts."""
    content = message["content"]
    assert isinstance(content, list), message
    return content


def tool_call_id_of(message: ChatMessage) -> str:
    """The call a message answers, which must be a tool message."""
    assert message["role"] == "tool", message
    return message["tool_call_id"]


def png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(out, format="PNG")
    return out.getvalue()


def b64png(width: int, height: int) -> str:
    return base64.b64encode(png(width, height)).decode()


def assert_valid_tool_history(messages: Sequence[ChatMessage]) -> None:
    """Every assistant tool call is answered by a tool message before the next assistant turn."""
    pending: list[str] = []
    for message in messages:
        if message["role"] == "assistant":
            assert not pending, f"unanswered tool calls {pending}"
            pending = [call["id"] for call in message.get("tool_calls", [])]
        elif message["role"] == "tool":
            assert message["tool_call_id"] in pending, message
            pending.remove(message["tool_call_id"])
        else:
            assert not pending, f"{message['role']} message before tool calls {pending} were answered"
    assert not pending


# -- get_protocol -------------------------------------------------------------


def test_get_protocol_returns_each_protocol() -> None:
    assert PROTOCOLS == ("tools", "tags", "deepanalyze")
    assert isinstance(get_protocol("deepanalyze"), DeepAnalyzeProtocol)
    assert isinstance(get_protocol(" Tags "), TagsProtocol)
    tools = get_protocol("tools", vision=True)
    assert isinstance(tools, ToolsProtocol) and tools.vision
    assert [get_protocol(n).name for n in PROTOCOLS] == list(PROTOCOLS)


def test_unknown_protocol_is_a_config_error_listing_the_valid_names() -> None:
    with pytest.raises(ConfigError) as info:
        get_protocol("json")
    assert isinstance(info.value, ValueError)
    for name in PROTOCOLS:
        assert name in str(info.value)


def test_deepanalyze_refuses_vision() -> None:
    with pytest.raises(ConfigError, match="deepanalyze"):
        get_protocol("deepanalyze", vision=True)


def test_request_options() -> None:
    assert get_protocol("deepanalyze").request_options() == {
        "stop": ["</Code>"],
        "extra_body": {"add_generation_prompt": False, "stop_token_ids": [151676, 151645], "max_new_tokens": 32768},
    }
    assert get_protocol("deepanalyze", vllm_extras=False).request_options() == {"stop": ["</Code>"]}
    assert get_protocol("deepanalyze", max_new_tokens=100).request_options()["extra_body"]["max_new_tokens"] == 100
    assert get_protocol("tags").request_options() == {}
    options = get_protocol("tools").request_options()
    assert options == {"tools": [EXECUTE_PYTHON_TOOL], "tool_choice": "auto"}
    options["tools"][0]["function"]["name"] = "changed"
    assert EXECUTE_PYTHON_TOOL["function"]["name"] == "execute_python"


def test_execute_python_tool_schema() -> None:
    function = EXECUTE_PYTHON_TOOL["function"]
    assert EXECUTE_PYTHON_TOOL["type"] == "function"
    assert function["name"] == "execute_python"
    assert function["parameters"]["required"] == ["code"]
    assert function["parameters"]["properties"]["code"]["type"] == "string"


def test_protocols_are_frozen_values() -> None:
    assert get_protocol("tools", vision=True) == ToolsProtocol(vision=True)
    with pytest.raises(AttributeError):
        get_protocol("tags").vision = True


# -- initial messages -----------------------------------------------------------


def test_deepanalyze_prompt_is_one_user_message_in_its_own_shape() -> None:
    ctx = PromptContext(task="  Which region sells most?\n", files=(FileInfo("sales.csv", 2150, "CSV · 3 rows"),))
    messages = get_protocol("deepanalyze").initial_messages(ctx)
    assert messages == [{
        "role": "user",
        "content": '# Instruction\nWhich region sells most?\n\n# Data\nFile 1:\n{\n    "name": "sales.csv",\n'
                   '    "size": "2.1KB"\n}\n\n',
    }]  # fmt: skip


def test_deepanalyze_rich_data_adds_the_summary_under_each_file_block() -> None:
    files = (FileInfo("b.txt", 0, ""), FileInfo("a.csv", 10, "CSV · 1 row\nColumns: `x` int64"))  # listed sorted
    content = get_protocol("deepanalyze", data_format="rich").initial_messages(PromptContext("t", files=files))[0]
    assert content["content"] == (
        '# Instruction\nt\n\n# Data\nFile 1:\n{\n    "name": "a.csv",\n    "size": "0.0KB"\n}\n'
        "CSV · 1 row\nColumns: `x` int64\n\n"
        'File 2:\n{\n    "name": "b.txt",\n    "size": "0.0KB"\n}\n\n'
    )
    with pytest.raises(ConfigError, match="rich"):
        get_protocol("deepanalyze", data_format="markdown")  # type: ignore[arg-type]


def test_prompt_without_data_has_no_data_section() -> None:
    content = text_of(get_protocol("deepanalyze").initial_messages(PromptContext(task="t"))[0])
    assert content == "# Instruction\nt"


@pytest.mark.parametrize("protocol", ["deepanalyze", "tags", "tools"])
def test_a_task_already_in_deepanalyze_shape_gets_no_second_heading(protocol: str) -> None:
    task = "# Instruction\nFind the top region.\n\n# Data\nsales figures by region"
    ctx = PromptContext(task=task, data_summary="## sales.csv", files=(FileInfo("sales.csv", 1024),))
    content = text_of(get_protocol(protocol).initial_messages(ctx)[-1])
    assert content.count("# Instruction") == 1 and content.count("# Data") == 1
    assert "# Task" not in content
    assert ("File 1:" if protocol == "deepanalyze" else "## sales.csv") in content


@pytest.mark.parametrize("name", ["tags", "tools"])
def test_chat_prompts_have_a_system_message_and_the_task(name: str) -> None:
    system, user = get_protocol(name).initial_messages(CTX)
    assert system["role"] == "system" and user["role"] == "user"
    assert text_of(user).startswith("# Task\nWhich region sells most?")
    assert "## sales.csv" in text_of(user)
    for needle in ("persistent", "working directory", "pandas 2.2.3", "pd, np, plt are imported", "captured"):
        assert needle in text_of(system)
    assert "placeholder" in text_of(system)
    assert "you will see them as images" in text_of(get_protocol(name, vision=True).initial_messages(CTX)[0])


def test_tags_system_prompt_teaches_the_format() -> None:
    system = text_of(get_protocol("tags").initial_messages(CTX)[0])
    for needle in ("<Code>", "</Code>", "<Execute>", "<Answer>", "one <Code> block per reply"):
        assert needle in system


def test_tools_system_prompt_names_the_tool() -> None:
    system = text_of(get_protocol("tools").initial_messages(CTX)[0])
    assert "execute_python" in system and "without calling the tool" in system


# -- deepanalyze parsing ----------------------------------------------------------

FENCED = "<Analyze>\nLoad the data.\n</Analyze>\n<Code>\n```python\nimport pandas as pd\nprint(1)\n```\n"


def test_stop_on_code_puts_the_closing_tag_back() -> None:
    step = da(FENCED, finish_reason="stop", stop_reason="</Code>")
    assert step.reply_text == FENCED + "</Code>"
    assert step.code == "import pandas as pd\nprint(1)"
    assert step.answer is None and step.problem is None
    assert step.reasoning == "**Analyze**\n\nLoad the data."


def test_stop_reason_with_the_closing_tag_already_present_changes_nothing() -> None:
    text = FENCED + "</Code>"
    step = da(text, finish_reason="stop", stop_reason="</Code>")
    assert step.reply_text == text and step.problem is None and step.code == "import pandas as pd\nprint(1)"


def test_unclosed_code_without_a_stop_is_repaired_and_reported() -> None:
    step = da(FENCED, finish_reason=None, stop_reason=None)
    assert step.reply_text.endswith("```\n</Code>")
    assert step.code == "import pandas as pd\nprint(1)"
    assert step.problem == "unclosed <Code> repaired"


def test_finish_stop_without_stop_reason_counts_as_the_requested_stop() -> None:
    # llama.cpp, Ollama and OpenAI honour `stop` but do not say which one fired.
    assert da(FENCED, finish_reason="stop").problem is None
    assert tags(FENCED, finish_reason="stop").problem == "unclosed <Code> repaired"


def test_eos_reported_by_vllm_is_not_the_stop() -> None:
    step = da(FENCED, finish_reason="stop", stop_reason=151645)
    assert step.problem == "unclosed <Code> repaired" and step.code is not None


def test_the_code_stop_token_id_counts_as_the_stop() -> None:
    step = da(FENCED, finish_reason="stop", stop_reason=151676)
    assert step.reply_text == FENCED + "</Code>" and step.problem is None


def test_repair_closes_an_unclosed_fence() -> None:
    step = da("<Code>\n```python\nx = 1\nprint(x)", finish_reason=None)
    assert step.reply_text == "<Code>\n```python\nx = 1\nprint(x)\n```\n</Code>"
    assert step.code == "x = 1\nprint(x)"


def test_reply_cut_at_the_token_limit_is_reported() -> None:
    step = da("<Code>\nfor i in range(", finish_reason="length")
    assert step.code == "for i in range("
    assert step.problem is not None
    assert "token limit" in step.problem and "unclosed <Code> repaired" in step.problem


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ("\n```python\nx = 1\n```\n", "x = 1"),
        ("\n```\nx = 1\n```\n", "x = 1"),
        ("\n```Python\nx = 1\n```\n", "x = 1"),
        ("\nx = 1\nprint(x)\n", "x = 1\nprint(x)"),
        ("\n    x = 1\n    if x:\n        print(x)\n", "x = 1\nif x:\n    print(x)"),
        ("```python print(1)```", "print(1)"),
        ("\n```python\na = 1\n```\nthen\n```python\nprint(a)\n```\n", "a = 1\n\nprint(a)"),
        ('\nprint("<Answer>no</Answer>")\n', 'print("<Answer>no</Answer>")'),
    ],
)
def test_code_extraction(body: str, code: str) -> None:
    step = da(f"<Code>{body}</Code>")
    assert step.code == code and step.answer is None and step.problem is None


def test_empty_code_block_is_a_problem() -> None:
    step = da("<Analyze>hm</Analyze><Code>\n```python\n```\n</Code>")
    assert step.code is None and step.answer is None and step.problem == "empty <Code> block"


def test_answer_ends_the_run() -> None:
    step = da("<Understand>\nEast leads.\n</Understand>\n<Answer>\nEast sells **most**.\n</Answer>")
    assert step.answer == "East sells **most**."
    assert step.code is None and step.problem is None
    assert step.reasoning == "**Understand**\n\nEast leads."


def test_unclosed_answer_runs_to_the_end_of_the_reply() -> None:
    step = da("<Answer>\nEast, by 12%.\nMore detail")
    assert step.answer == "East, by 12%.\nMore detail"
    assert step.reply_text == "<Answer>\nEast, by 12%.\nMore detail\n</Answer>"
    assert step.problem == "unclosed <Answer> repaired"
    assert da("<Answer>x", stop_reason="</Answer>").problem is None


def test_empty_answer_is_not_an_answer() -> None:
    step = da("<Answer>  </Answer>")
    assert step.answer is None and step.problem == "empty <Answer> block"


def test_answer_before_code_wins() -> None:
    step = da("<Answer>done</Answer><Code>print(1)</Code>")
    assert step.answer == "done" and step.code is None


def test_code_before_answer_runs_and_the_rest_is_dropped() -> None:
    step = da("<Code>print(1)</Code>\n<Execute>\n1\n</Execute>\n<Answer>it is 1</Answer>")
    assert step.code == "print(1)" and step.answer is None
    assert step.reply_text == "<Code>print(1)</Code>"
    assert step.problem == "text after </Code> dropped"


def test_file_and_prose_go_into_reasoning_without_raw_tags() -> None:
    text = (
        "Intro words.\n<Analyze>Plan</Analyze>\n<File>\n- [chart.png](chart.png)\n</File>\n"
        "</Understand>\n<Code>x = 1</Code>"
    )
    step = da(text)
    assert step.reasoning == "Intro words.\n\n**Analyze**\n\nPlan\n\n**Files**\n\n- [chart.png](chart.png)"
    assert step.code == "x = 1"


def test_tags_mentioned_in_prose_are_shown_as_code() -> None:
    step = da("<think>I should write a <Code> block.</think>\n<Code>x = 1</Code>")
    assert step.code == "x = 1"
    assert step.reasoning == "**Thinking**\n\nI should write a `<Code>` block."


def test_unclosed_analyze_before_code_is_tolerated() -> None:
    step = da("<Analyze>\nPlan it.\n<Code>\nx = 1\n</Code>")
    assert step.code == "x = 1" and step.problem is None
    assert step.reasoning == "**Analyze**\n\nPlan it."


@pytest.mark.parametrize("text", ["", "   \n\t", "\n\n"])
def test_empty_reply(text: str) -> None:
    step = da(text)
    assert step == Step(reply_text=text, reasoning="", code=None, answer=None, problem="empty reply")


@pytest.mark.parametrize(
    "text",
    ["Let me think about this.", "<Analyze>only analysis</Analyze>", "</Code></Answer> stray", "<Analyze>open"],
)
def test_reply_without_code_or_answer(text: str) -> None:
    step = da(text)
    assert step.code is None and step.answer is None
    assert step.problem == "no <Code> or <Answer> tag"
    assert "</" not in step.reasoning and "<Analyze>" not in step.reasoning


def test_deepanalyze_history_messages() -> None:
    protocol = DeepAnalyzeProtocol()
    reply = ModelReply(FENCED, stop_reason="</Code>")
    step = protocol.parse(reply)
    assert protocol.assistant_message(reply, step) == {"role": "assistant", "content": FENCED + "</Code>"}
    feedback = protocol.feedback_messages(step, Feedback("   region  units\n0  East  12\n"))
    # Raw, as DeepAnalyze's server sends it: the <Execute> wrapper is only in the transcript people read.
    assert feedback == [{"role": "execute", "content": "   region  units\n0  East  12\n"}]


def test_deepanalyze_ignores_images() -> None:
    step = da("<Code>x</Code>")
    messages = DeepAnalyzeProtocol().feedback_messages(step, Feedback("[image 1: png 10x10]\n", (b64png(10, 10),)))
    assert messages == [{"role": "execute", "content": "[image 1: png 10x10]\n"}]


def test_nudge_restates_the_format() -> None:
    step = da("just prose")
    [nudge] = DeepAnalyzeProtocol().nudge_messages(step)
    assert nudge["role"] == "user"
    for needle in ("no <Code> or <Answer> tag", "<Code>", "<Answer>"):
        assert needle in text_of(nudge)


def test_empty_reply_gets_a_placeholder_in_history() -> None:
    reply = ModelReply("")
    step = TagsProtocol().parse(reply)
    assert TagsProtocol().assistant_message(reply, step) == {"role": "assistant", "content": "(empty reply)"}


# -- tags parsing ----------------------------------------------------------------


def test_tags_drops_hallucinated_execution() -> None:
    text = "<Analyze>a</Analyze>\n<Code>\nprint(2)\n</Code>\n<Execute>\n2\n</Execute>\n<Answer>2</Answer>"
    step = tags(text)
    assert step.reply_text == "<Analyze>a</Analyze>\n<Code>\nprint(2)\n</Code>"
    assert step.code == "print(2)" and step.answer is None
    assert step.problem == "text after </Code> dropped"


def test_tags_whitespace_after_code_is_not_a_problem() -> None:
    step = tags("<Code>\nprint(2)\n</Code>\n\n  ")
    assert step.problem is None and step.reply_text == "<Code>\nprint(2)\n</Code>"


def test_tags_python_fence_outside_code_is_taken() -> None:
    text = "I'll count rows.\n```python\nprint(len(df))\n```\nIt prints 3."
    step = tags(text)
    assert step.code == "print(len(df))"
    assert step.reply_text == "I'll count rows.\n<Code>\n```python\nprint(len(df))\n```\n</Code>"
    assert step.reasoning == "I'll count rows."
    assert step.problem == "code outside <Code>; text after the code dropped"


def test_tags_unclosed_python_fence_outside_code() -> None:
    step = tags("```python\nx = 1\n")
    assert step.code == "x = 1" and step.problem == "code outside <Code>"
    assert step.reply_text == "<Code>\n```python\nx = 1\n```\n</Code>"


def test_tags_other_fences_are_not_code() -> None:
    step = tags("Output looks like:\n```\n0 1\n```\n")
    assert step.code is None and step.problem == "no <Code> or <Answer> tag"


def test_tags_feedback_is_a_user_message() -> None:
    step = tags("<Code>x</Code>")
    messages = TagsProtocol().feedback_messages(step, Feedback("Traceback ...\nNameError: x\n", (b64png(9, 9),)))
    assert messages == [{"role": "user", "content": "<Execute>\nTraceback ...\nNameError: x\n</Execute>"}]
    [nudge] = TagsProtocol().nudge_messages(tags("nothing"))
    assert nudge["role"] == "user" and "<Code>" in text_of(nudge)


def test_tags_vision_feedback_carries_images() -> None:
    step = tags("<Code>x</Code>")
    feedback = Feedback("[image 1: png 2000x1000]\n", (b64png(2000, 1000),))
    [message] = TagsProtocol(vision=True).feedback_messages(step, feedback)
    text, image = parts_of(message)
    assert text == {"type": "text", "text": "<Execute>\n[image 1: png 2000x1000]\n</Execute>"}
    assert image_size(image) == (768, 384)


def test_one_megabyte_hostile_replies_parse() -> None:
    """A quadratic scan would take minutes here and hit the suite's timeout; its speed is in bench/ (models.parse)."""
    mb = 1_000_000
    code = "x = 1\n" * (mb // 6)
    replies = [
        "<Code>" * (mb // 6),
        "</Code>" * (mb // 7),
        "```\n" * (mb // 4),
        "`" * mb,
        "<" * mb,
        "<Analyze>" + "words " * (mb // 6),
        "<Analyze>a<Understand>" * (mb // 22),
        "```python\n" + code,
        "<Answer>" + "a" * mb,
        f"<Code>\n```python\n{code}```\n</Code>",
    ]
    for protocol in (DeepAnalyzeProtocol(), TagsProtocol()):
        steps = [protocol.parse(ModelReply(text)) for text in replies]
        assert steps[-2].answer == "a" * mb
        assert steps[-1].code == code.rstrip()


# -- tools -----------------------------------------------------------------------


def call(code: str = "print(1)", id: str = "call_a") -> ToolCall:
    return ToolCall(id=id, name="execute_python", arguments=f'{{"code": {code!r}}}'.replace("'", '"'))


def test_tools_text_without_a_call_is_the_answer() -> None:
    step = ToolsProtocol().parse(ModelReply("  East sells most.\n", finish_reason="stop"))
    assert step.answer == "East sells most." and step.code is None and step.problem is None
    assert step.tool_call_id is None


def test_tools_empty_reply_is_nudged_by_a_user_message() -> None:
    protocol = ToolsProtocol()
    step = protocol.parse(ModelReply(""))
    assert step.answer is None and step.code is None and step.problem == "empty reply"
    [nudge] = protocol.nudge_messages(step)
    assert nudge["role"] == "user" and "execute_python" in text_of(nudge)


def test_tools_one_call() -> None:
    protocol = ToolsProtocol()
    reply = ModelReply("Counting rows.", tool_calls=(call("print(len(df))"),), finish_reason="tool_calls")
    step = protocol.parse(reply)
    assert step.code == "print(len(df))" and step.tool_call_id == "call_a"
    assert step.reasoning == "Counting rows." and step.problem is None and step.answer is None
    assistant = protocol.assistant_message(reply, step)
    assert assistant == {
        "role": "assistant",
        "content": "Counting rows.",
        "tool_calls": [
            {
                "id": "call_a",
                "type": "function",
                "function": {"name": "execute_python", "arguments": '{"code": "print(len(df))"}'},
            }
        ],
    }
    feedback = protocol.feedback_messages(step, Feedback("3\n", (b64png(5, 5),)))
    assert feedback == [{"role": "tool", "tool_call_id": "call_a", "content": "3\n"}]
    assert_valid_tool_history([assistant, *feedback])


def test_tools_call_without_text_has_null_content() -> None:
    reply = ModelReply("", tool_calls=(call(),))
    step = ToolsProtocol().parse(reply)
    assert ToolsProtocol().assistant_message(reply, step)["content"] is None


def test_tools_fenced_code_in_arguments_is_unwrapped() -> None:
    step = ToolsProtocol().parse(ModelReply("", tool_calls=(call("```python\nx = 1\n```"),)))
    assert step.code == "x = 1"


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ('{"code": "print(1)"', "malformed tool arguments"),
        ("", "malformed tool arguments"),
        ('["print(1)"]', "malformed tool arguments"),
        ('{"source": "print(1)"}', "malformed tool arguments"),
        ('{"code": 3}', "malformed tool arguments"),
        ('{"code": "  "}', "empty code"),
    ],
)
def test_tools_bad_arguments_still_answer_the_call(arguments: str, problem: str) -> None:
    protocol = ToolsProtocol()
    reply = ModelReply("", tool_calls=(ToolCall("call_x", "execute_python", arguments),))
    step = protocol.parse(reply)
    assert step.code is None and step.answer is None and step.tool_call_id == "call_x"
    assert step.problem is not None and step.problem.startswith(problem)
    nudge = protocol.nudge_messages(step)
    assert tool_call_id_of(nudge[0]) == "call_x"
    assert problem in text_of(nudge[0]) and '{"code"' in text_of(nudge[0])
    assert_valid_tool_history([protocol.assistant_message(reply, step), *nudge])


def test_invalid_json_arguments_are_explained_with_the_parsers_message_and_position() -> None:
    step = ToolsProtocol().parse(
        ModelReply("", tool_calls=(ToolCall("call_x", "execute_python", '{"code": "x = 1",}'),))
    )
    assert step.problem == (
        "malformed tool arguments: invalid JSON (Expecting property name enclosed in double "
        "quotes: line 1 column 18 (char 17))"
    )


def test_tools_unknown_tool() -> None:
    step = ToolsProtocol().parse(ModelReply("", tool_calls=(ToolCall("c", "shell", '{"code": "ls"}'),)))
    assert step.code is None and step.problem == "unknown tool 'shell'" and step.tool_call_id == "c"


def test_tools_several_calls_run_the_first_and_answer_all() -> None:
    protocol = ToolsProtocol()
    calls = (call("a = 1", "c1"), call("b = 2", "c2"), ToolCall("c3", "execute_python", "{bad"))
    reply = ModelReply("", tool_calls=calls)
    step = protocol.parse(reply)
    assert step.code == "a = 1" and step.tool_call_id == "c1"
    assert step.skipped_tool_call_ids == ("c2", "c3")
    assert step.problem == "2 more tool call(s) not run (one per turn)"
    assistant = protocol.assistant_message(reply, step)
    assert [c["id"] for c in assistant["tool_calls"]] == ["c1", "c2", "c3"]
    feedback = protocol.feedback_messages(step, Feedback("ok\n"))
    assert [(tool_call_id_of(m), text_of(m).startswith("Not run")) for m in feedback] == [
        ("c1", False),
        ("c2", True),
        ("c3", True),
    ]
    assert_valid_tool_history([assistant, *feedback, {"role": "assistant", "content": "done"}])


def test_tools_missing_ids_are_made_consistent() -> None:
    protocol = ToolsProtocol()
    reply = ModelReply("", tool_calls=(ToolCall("", "execute_python", '{"code": "1"}'), ToolCall("", "x", "{}")))
    step = protocol.parse(reply)
    assert step.tool_call_id == "call_0" and step.skipped_tool_call_ids == ("call_1",)
    assistant = protocol.assistant_message(reply, step)
    assert_valid_tool_history([assistant, *protocol.feedback_messages(step, Feedback("1\n"))])


def image_url_of(part: ContentPart) -> str:
    """The part's image URL, which must be an image part."""
    assert part["type"] == "image_url", part
    return part["image_url"]["url"]


def image_size(part: ContentPart) -> tuple[int, int] | None:
    url = image_url_of(part)
    assert url.startswith("data:image/png;base64,")
    return png_size(url.removeprefix("data:image/png;base64,"))


def test_tools_vision_sends_downscaled_images_in_a_user_message() -> None:
    protocol = ToolsProtocol(vision=True)
    reply = ModelReply("", tool_calls=(call("plot()", "c1"), call("x", "c2")))
    step = protocol.parse(reply)
    images = (b64png(1600, 1200), b64png(300, 200))
    messages = protocol.feedback_messages(step, Feedback("[image 1: png 1600x1200]\n[image 2: png 300x200]\n", images))
    assert [m["role"] for m in messages] == ["tool", "tool", "user"]
    assert messages[0]["content"] == "[image 1: png 1600x1200]\n[image 2: png 300x200]\n"
    intro, first, second = parts_of(messages[2])
    assert intro["type"] == "text"
    assert image_size(first) == (768, 576)
    assert image_size(second) == (300, 200)
    assert image_url_of(second).endswith(images[1])  # small images are sent as they are
    assert_valid_tool_history([protocol.assistant_message(reply, step), *messages])


def test_tools_without_vision_sends_no_images() -> None:
    step = ToolsProtocol().parse(ModelReply("", tool_calls=(call(),)))
    messages = ToolsProtocol().feedback_messages(step, Feedback("[image 1: png 5x5]\n", (b64png(5, 5),)))
    assert messages == [{"role": "tool", "tool_call_id": "call_a", "content": "[image 1: png 5x5]\n"}]


def test_vision_caps_images_and_survives_bad_ones() -> None:
    protocol = ToolsProtocol(vision=True)
    step = protocol.parse(ModelReply("", tool_calls=(call(),)))
    images = ("bm90IGEgcG5n",) + tuple(b64png(4, 4) for _ in range(MAX_IMAGES + 1))
    parts = parts_of(protocol.feedback_messages(step, Feedback("x", images))[-1])[1:]
    assert parts[0] == {"type": "text", "text": "[image 1 could not be decoded]"}
    assert [p["type"] for p in parts[1:MAX_IMAGES]] == ["image_url"] * (MAX_IMAGES - 1)
    assert parts[-1] == {"type": "text", "text": "[2 more images not shown]"}


def test_downscale_png() -> None:
    small = png(100, 50)
    assert downscale_png(small) is small
    big = downscale_png(png(3000, 1000))
    assert png_size(base64.b64encode(big).decode()) == (768, 256)
    assert png_size(base64.b64encode(downscale_png(png(500, 2000), max_side=100)).decode()) == (25, 100)
    with pytest.raises(ValueError):
        downscale_png(b"not an image")


def test_only_the_chat_protocols_are_told_which_files_the_code_wrote() -> None:
    feedback = Feedback("saved\n", files="[files written: plot.png (2048 bytes, created)]\n")
    step = da("<Code>x</Code>")
    assert DeepAnalyzeProtocol().feedback_messages(step, feedback) == [{"role": "execute", "content": "saved\n"}]
    tagged = TagsProtocol().feedback_messages(tags("<Code>x</Code>"), feedback)[0]["content"]
    assert tagged == "<Execute>\nsaved\n[files written: plot.png (2048 bytes, created)]\n</Execute>"


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("DeepAnalyze-8B", "deepanalyze"),
        ("deepanalyze-8b", "deepanalyze"),
        ("RUC-DataLab/DeepAnalyze-8B", "deepanalyze"),
        ("gpt-4o-mini", "tools"),
        (None, "tools"),
        ("my-deepanalyze-clone", "tools"),
    ],
)
def test_the_models_name_chooses_its_protocol_unless_one_is_asked_for(model: str | None, expected: str) -> None:
    from kernel_agent.agent.config import AgentConfig

    config = AgentConfig.resolve(environ={}, model=model)
    assert config.protocol.name == expected
    assert ("DeepAnalyze's" in config.protocol.reason) == (expected == "deepanalyze")
    asked = AgentConfig.resolve(environ={}, model=model, protocol="tags")
    assert (asked.protocol.name, asked.protocol.reason) == ("tags", "asked for")


def test_a_missing_module_is_answered_with_what_is_installed_that_does_the_job() -> None:
    from kernel_agent.agent.environment import missing, module_hint

    installed = ("pandas 2.2.3", "numpy 2.1.0", "matplotlib 3.9.2", "scipy 1.14.1")
    assert module_hint("No module named 'seaborn'", installed) == (
        "seaborn is not installed here (and cannot be installed); matplotlib 3.9.2 is."
    )
    assert module_hint("No module named 'sklearn.linear_model'", installed).startswith(
        "sklearn is not installed here (and cannot be installed); scipy 1.14.1 or numpy 2.1.0 is"
    )
    assert "use what is: pandas 2.2.3" in module_hint("No module named 'weird_thing'", installed)
    assert module_hint("something else", installed) == ""
    assert "seaborn" in missing(installed) and "pandas" not in missing(installed)


# -- resuming a run ---------------------------------------------------------------


def _two_turn_run() -> Run:
    def ran(index: int, code: str, printed: str, thought: str) -> Round:
        result = ExecutionResult("ok", outputs=({"output_type": "stream", "name": "stdout", "text": printed},))
        return Round(
            index, reply=f"<Analyze>{thought}</Analyze>\n<Code>\n{code}\n", reasoning=thought, code=code, result=result
        )

    rounds = (
        ran(1, "x = 6", "", "Set x."),
        ran(2, "print(x * 7)", "42\n", "Multiply."),
        Round(3, reply="<Answer>42</Answer>", answer="42"),
        ran(4, "print(x * 14)", "84\n", "Double."),
        Round(5, reply="<Answer>84</Answer>", answer="84"),
    )
    turns = (Turn("What is 6*7?", 1, 3, answer="42"),)
    info = RunInfo(task="What is 6*7?\n\nFollow-up: Double it", question="Double it")
    return Run(info=info, rounds=rounds, answer="84", turns=turns)


def test_deepanalyze_resume_replays_each_turn_as_its_server_would() -> None:
    ctx = PromptContext(task="ignored", files=(FileInfo("sales.csv", 2048),))
    messages = get_protocol("deepanalyze").resume_messages(ctx, _two_turn_run(), "Triple it")
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    assert messages[0]["content"] == "What is 6*7?" and messages[2]["content"] == "Double it"
    assert messages[1]["content"] == (
        "<Analyze>Set x.</Analyze>\n<Code>\nx = 6\n</Code>\n<Execute>\n[no output]\n"
        "</Execute>\n<Analyze>Multiply.</Analyze>\n<Code>\nprint(x * 7)\n</Code>\n"
        "<Execute>\n42\n</Execute>\n<Answer>42</Answer>"
    )
    assert text_of(messages[4]).startswith("# Instruction\nTriple it\n\n# Data\nFile 1:\n")


def test_deepanalyze_resume_trims_the_oldest_rounds_first_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    import kernel_agent.agent.protocols.deepanalyze as deepanalyze

    monkeypatch.setattr(deepanalyze, "REPLAY_CHARS", 200)
    messages = get_protocol("deepanalyze").resume_messages(PromptContext(task="t"), _two_turn_run(), "Triple it")
    first, second = text_of(messages[1]), text_of(messages[3])
    assert first == "[2 earlier round(s) left out to fit the context]\n<Answer>42</Answer>"
    assert "print(x * 14)" in second and "<Answer>84</Answer>" in second  # the latest rounds are kept whole


@pytest.mark.parametrize("name", ["tags", "tools"])
def test_resume_in_other_protocols_sends_back_the_reasoning(name: str) -> None:
    messages = get_protocol(name).resume_messages(PromptContext(task="What is 6*7?"), _two_turn_run(), "Triple it")
    briefing = text_of(messages[-1])
    assert "Your reasoning: Multiply." in briefing and "print(x * 7)" in briefing and briefing.endswith("Triple it")
