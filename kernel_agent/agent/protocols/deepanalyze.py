"""DeepAnalyze-8B's own protocol: ``DeepAnalyzeProtocol``, on the wire as DeepAnalyze's API server sends it.

No system prompt, ``# Instruction`` + ``# Data`` with ``File N:`` blocks,
``stop=["</Code>"]`` plus vLLM's ``add_generation_prompt``/``stop_token_ids``/
``max_new_tokens``; output goes back raw as ``{"role": "execute", ...}`` (the
``<Execute>`` wrapper is only for people: ``transcript.py``). Replies parse
as in ``tags.py``. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from .base import Feedback, Step
from .prompts import DataFormat, PromptContext, deepanalyze_task
from .tags import CODE_STOP_TOKEN_ID, TagProtocol

__all__ = ["DEEPANALYZE_MAX_NEW_TOKENS", "DEEPANALYZE_STOP_TOKEN_IDS", "DeepAnalyzeProtocol"]

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
    message, without the ``<Execute>`` wrapper people see.
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

    def initial_messages(self, ctx: PromptContext) -> list[dict[str, Any]]:
        return [{"role": "user", "content": deepanalyze_task(ctx, self.data_format)}]

    def feedback_messages(self, step: Step, feedback: Feedback) -> list[dict[str, Any]]:
        return [{"role": "execute", "content": feedback.text}]
