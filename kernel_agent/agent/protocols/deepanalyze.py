"""DeepAnalyze-8B's own protocol: ``DeepAnalyzeProtocol``, on the wire as DeepAnalyze's API server sends it.

No system prompt, ``# Instruction`` + ``# Data`` with ``File N:`` blocks,
``stop=["</Code>"]`` plus vLLM's ``add_generation_prompt``/``stop_token_ids``/
``max_new_tokens``; output goes back raw as ``{"role": "execute", ...}`` (the
``<Execute>`` wrapper is only for people: ``transcript.py``). Replies parse
as in ``tags.py``. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

from ...errors import ConfigError
from ...model.chat import ModelReply
from ...model.messages import ChatMessage
from ...records import Round, Run
from ...result import RebuildReport
from .base import Feedback, ProtocolSettings, Step
from .prompts import DATA_FORMATS, DataFormat, PromptContext, deepanalyze_task, execute_block
from .tags import CODE_STOP_TOKEN_ID, TagProtocol

__all__ = [
    "DEEPANALYZE_MAX_NEW_TOKENS",
    "DEEPANALYZE_STOP_TOKEN_IDS",
    "REPLAY_CHARS",
    "DeepAnalyzeProtocol",
    "round_transcript",
]

# The earlier turns a follow-up replays: about 6,000 tokens at four characters a token; oldest rounds go first.
REPLAY_CHARS = 24_000
REPLAY_OUTPUT_CHARS = 2_000  # one round's output inside the replay

# DeepAnalyze's API/config.py: vLLM stops on these token ids (the first ends a <Code> block, the
# second is Qwen's <|im_end|>), and asks for up to MAX_NEW_TOKENS.
DEEPANALYZE_STOP_TOKEN_IDS = (CODE_STOP_TOKEN_ID, 151645)
DEEPANALYZE_MAX_NEW_TOKENS = 32768


@dataclass(frozen=True)
class DeepAnalyzeProtocol(TagProtocol):
    """DeepAnalyze-8B's native loop, on the wire exactly as DeepAnalyze's API server sends it.

    No system prompt; one user message ``# Instruction`` + ``# Data`` with a
    ``File N:`` JSON block per file (``data_format="rich"`` adds our summary
    under each block); ``stop=["</Code>"]`` and, with ``vllm_extras``, vLLM's
    ``add_generation_prompt: false``, ``stop_token_ids`` and
    ``max_new_tokens``; execution output goes back raw in an ``execute``
    message, without the ``<Execute>`` wrapper people see (plus the one-line
    ``[about your reply: ...]`` when part of the reply was not used).
    """

    name: ClassVar[str] = "deepanalyze"
    requests_stop: ClassVar[bool] = True
    data_format: DataFormat = "files"
    vllm_extras: bool = True
    max_new_tokens: int = DEEPANALYZE_MAX_NEW_TOKENS

    def request_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"stop": ["</Code>"]}
        if self.vllm_extras:
            options["extra_body"] = {
                "add_generation_prompt": False,
                "stop_token_ids": list(DEEPANALYZE_STOP_TOKEN_IDS),
                "max_new_tokens": self.max_new_tokens,
            }
        return options

    def initial_messages(self, ctx: PromptContext) -> list[ChatMessage]:
        return [{"role": "user", "content": deepanalyze_task(ctx, self.data_format)}]

    def feedback_messages(self, step: Step, feedback: Feedback) -> list[ChatMessage]:
        # The raw output, as DeepAnalyze sends it; a partly used reply adds its one-line reason.
        return [{"role": "execute", "content": feedback.text + feedback.note}]

    def resume_messages(
        self, ctx: PromptContext, run: Run, question: str, report: RebuildReport | None = None
    ) -> list[ChatMessage]:
        """The conversation as DeepAnalyze's server sends a follow-up: each earlier turn as the user's
        question and one assistant message with its ``<Analyze>/<Code>/<Execute>/<Answer>`` transcript,
        then ``question`` as ``# Instruction`` + ``# Data``. Within ``REPLAY_CHARS``: the oldest rounds
        are left out first, and the first assistant message says how many."""
        turns = [
            (
                turn.task,
                [
                    round_transcript(r, fence=self.language.fence)
                    for r in run.rounds
                    if turn.first_round <= r.index <= turn.last_round and r.status != "no-code"
                ],
            )
            for turn in run.all_turns()
        ]
        left_out = _trim(turns, REPLAY_CHARS)
        messages: list[ChatMessage] = []
        for asked, pieces in turns:
            note = f"[{left_out} earlier round(s) left out to fit the context]\n" if left_out else ""
            left_out = 0
            messages.append({"role": "user", "content": asked})
            messages.append({"role": "assistant", "content": (note + "\n".join(pieces)).strip() or "(no reply)"})
        restored = f"\n\n(The kernel was restarted and its state rebuilt: {report.describe()}.)" if report else ""
        messages.append(
            {"role": "user", "content": deepanalyze_task(replace(ctx, task=question + restored), self.data_format)}
        )
        return messages


def round_transcript(round_: Round, max_chars: int = REPLAY_OUTPUT_CHARS, fence: str = "python") -> str:
    """One round as DeepAnalyze's transcript has it: the reply with its ``<Code>`` closed, then its output in
    ``<Execute>``. A round written in another protocol (tool calls, prose answers) is put into the tags."""
    step = DeepAnalyzeProtocol().parse(ModelReply(round_.reply, stop_reason="</Code>"))
    text = step.reply_text.strip()
    if (round_.code is not None and step.code is None) or (round_.answer is not None and step.answer is None):
        thought = round_.reasoning.strip()
        text = f"<Analyze>\n{thought}\n</Analyze>\n" if thought else ""
        text += (
            f"<Code>\n```{fence}\n{round_.code.strip()}\n```\n</Code>"
            if round_.code is not None
            else f"<Answer>\n{(round_.answer or '').strip()}\n</Answer>"
        )
    if round_.result is not None:
        text += "\n" + execute_block(round_.result.to_llm_text(max_chars=max_chars))
    return text


def _trim(turns: list[tuple[str, list[str]]], budget: int) -> int:
    """Drop the oldest rounds until the turns fit ``budget`` characters; how many were dropped."""
    size = sum(len(asked) + sum(len(piece) for piece in pieces) for asked, pieces in turns)
    dropped = 0
    for _asked, pieces in turns:
        while pieces and size > budget:
            size -= len(pieces.pop(0))
            dropped += 1
    return dropped


def deepanalyze_protocol(settings: ProtocolSettings) -> DeepAnalyzeProtocol:
    """The ``deepanalyze`` entry point of ``kernel_agent.protocols``. Raises ``ConfigError`` for ``vision``
    (DeepAnalyze-8B reads no images) or an unknown data format."""
    if settings.vision:
        raise ConfigError("the deepanalyze protocol cannot send images; use 'tags' or 'tools' for vision")
    if settings.data_format not in DATA_FORMATS:
        raise ConfigError(f"unknown data format {settings.data_format!r}; choose one of: {', '.join(DATA_FORMATS)}")
    return DeepAnalyzeProtocol(
        data_format=settings.data_format,  # type: ignore[arg-type]  # checked above
        vllm_extras=settings.vllm_extras,
        max_new_tokens=settings.max_new_tokens or DEEPANALYZE_MAX_NEW_TOKENS,
        language=settings.language,
    )
