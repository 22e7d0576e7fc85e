"""The three conversation protocols: task -> messages, reply -> ``Step``, result -> messages.

Pure: no network, no kernel, no file I/O (Pillow only re-encodes PNG bytes in memory)::

    deepanalyze  DeepAnalyze-8B's own tags and wire format, as its API server sends
                 them: no system prompt, "# Instruction ... # Data" + "File N:" blocks,
                 stop=["</Code>"] plus vLLM's add_generation_prompt/stop_token_ids/
                 max_new_tokens; output goes back raw as {"role": "execute", "content": ...}
                 (the <Execute> wrapper is only for people: ``transcript.py``)
    tags         the same tags taught to any chat model by a system prompt, no ``stop``
                 (text after the first </Code> is dropped); output goes back as a user message
    tools        OpenAI function calling with one tool, ``execute_python(code)``;
                 a reply without a tool call is the answer

A run with any of them::

    protocol = get_protocol("tags")
    messages = protocol.initial_messages(PromptContext(task="...", data_summary="..."))
    while True:
        reply = await complete(model, messages, protocol.request_options())  # model.chat.complete
        step = protocol.parse(reply)                      # never raises
        messages.append(protocol.assistant_message(reply, step))
        if step.answer is not None:
            break
        if step.code is None:                             # step.problem says why
            messages += protocol.nudge_messages(step)
            continue
        result = await session.execute(step.code)
        messages += protocol.feedback_messages(step, Feedback(result.to_llm_text(), tuple(result.images)))

For ``tools`` every tool call of a reply is answered (the first by
``feedback_messages`` or ``nudge_messages``, the others as "not run"), so the
history stays valid for the API. Parsing is linear in the reply's length.

Owns the lookup (``get_protocol``: the ``kernel_agent.protocols`` entry points,
``names.protocol_names``; ours are registered there as a third party's are) and
re-exports what callers need. One protocol a file: ``base.py`` (``Protocol``, ``Step``,
``Feedback``), ``deepanalyze.py``, ``tags.py``, ``tools.py`` (with the
``execute_python`` tool). The wording the model reads is ``prompts.py`` (which
also defines ``PromptContext``), scanning tagged text ``tagparse.py``,
shrinking figures ``images.py``.
"""

from __future__ import annotations

from ..languages import PYTHON, Language
from ..names import PROTOCOL_REGISTRY, PROTOCOLS
from .base import Feedback, Protocol, ProtocolSettings, Step
from .deepanalyze import DEEPANALYZE_MAX_NEW_TOKENS, DEEPANALYZE_STOP_TOKEN_IDS, DeepAnalyzeProtocol
from .images import MAX_IMAGE_SIDE, MAX_IMAGES, downscale_png
from .prompts import DATA_FORMATS, DataFormat, FileInfo, PromptContext, environment_lines
from .tags import CODE_STOP_TOKEN_ID, TagsProtocol
from .tools import EXECUTE_PYTHON_TOOL, ToolsProtocol

__all__ = [
    "CODE_STOP_TOKEN_ID",
    "DATA_FORMATS",
    "DEEPANALYZE_MAX_NEW_TOKENS",
    "DEEPANALYZE_STOP_TOKEN_IDS",
    "EXECUTE_PYTHON_TOOL",
    "MAX_IMAGES",
    "MAX_IMAGE_SIDE",
    "PROTOCOLS",
    "DataFormat",
    "DeepAnalyzeProtocol",
    "Feedback",
    "FileInfo",
    "PromptContext",
    "Protocol",
    "ProtocolSettings",
    "Step",
    "TagsProtocol",
    "ToolsProtocol",
    "downscale_png",
    "environment_lines",
    "get_protocol",
]


def get_protocol(
    name: str,
    *,
    vision: bool = False,
    data_format: DataFormat = "files",
    vllm_extras: bool = True,
    max_new_tokens: int = DEEPANALYZE_MAX_NEW_TOKENS,
    language: Language = PYTHON,
) -> Protocol:
    """The protocol registered as ``name`` (``names.protocol_names()``), made with these settings.

    ``data_format``, ``vllm_extras`` and ``max_new_tokens`` configure
    ``deepanalyze`` (see ``DeepAnalyzeProtocol``); the others ignore them.
    Raises ``ConfigError`` for an unknown name or data format, or for
    ``vision`` with ``deepanalyze`` (DeepAnalyze-8B reads no images), or when a registered
    protocol cannot be loaded or made. ``language`` is the kernel's
    (``languages.language_of``): the words, code fence and tool name the model is shown.
    """
    settings = ProtocolSettings(
        vision=vision,
        data_format=data_format,
        vllm_extras=vllm_extras,
        max_new_tokens=max_new_tokens,
        language=language,
    )
    protocol: Protocol = PROTOCOL_REGISTRY.make(name, settings)  # checked to be one
    return protocol
