"""Export a ``Run`` as an executable notebook: ``build_notebook``, ``write_notebook``, ``export_run``.

Owns the notebook layout (cells, tags, where the ``kernel_agent`` metadata goes: its schema is
``metadata.py``'s); the atomic
write is the door's (``kernel/door.py``'s ``write_record``). Building is pure:
a ``Run`` in, an nbformat v4 ``NotebookNode`` out. Reading notebooks back is ``load.py``'s job;
replaying them is ``replay.py``'s.

Layout (every cell's ``metadata["kernel_agent"]["role"]`` names its part)::

    header      markdown  task, data files, model, protocol, "scripted" statement
    setup       code      RunInfo.setup_code with Run.setup_result (round 0)
    per round   thinking  markdown, collapsed (<details>), a reasoning model's hidden
                          reasoning_content, if it sent any
                reasoning markdown, if the model wrote any
                note      markdown, when there is something to flag (protocol
                          problem, timeout, kernel death, never executed)
                code      exactly Round.code with its real outputs
    answer      markdown  the answer, or why the run stopped, or "in progress"

The round's record (status, usage, artifacts, raw reply, ...) sits on the
round's last cell. Failed code is tagged ``raises-exception``; code that timed
out, killed the kernel or never ran is tagged ``skip-execution``.

The *clean* view keeps only what the answer rests on: the setup, every round
whose code ran ok, failed cells that later kept cells depend on (see
``deps.needed_failures``), and the answer round's reasoning.
Execution counts are renumbered 1..n. ``export_run`` writes both views:
``run.ipynb`` and ``.run.clean.ipynb`` (``clean_path``).
"""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path, PurePath
from typing import Any, Literal

from .._nbformat import NotebookNode, nbformat
from ..errors import NotebookError, WorkspaceFileError
from ..kernel.door import write_record, write_records
from ..records import PYTHON3_KERNELSPEC, Round, Run, Turn
from ..result import ExecutionResult
from .deps import needed_failures, unreplayed_dependencies, unreplayed_sources
from .kinds import first_turn_provenance, kind_of
from .metadata import METADATA_KEY, result_record, round_record, run_metadata
from .text import NotebookText

_VALIDATOR_BACKEND = "fastjsonschema"
NBFORMAT = nbformat.v4.nbformat
NBFORMAT_MINOR = nbformat.v4.nbformat_minor

__all__ = [
    "KERNELSPEC",
    "METADATA_KEY",
    "RAISES_TAG",
    "SCRIPTED_STATEMENT",
    "SKIP_TAG",
    "View",
    "answer_body",
    "build_notebook",
    "clean_path",
    "export_run",
    "legacy_clean_path",
    "notebook_text",
    "warm_up",
    "write_notebook",
]

View = Literal["full", "clean"]
_ANSWER_HEADING = re.compile(r"(?:#{1,6}\s*|\*\*|__)?\s*(?:final\s+)?answer\s*:?\s*(?:\*\*|__)?\s*:?", re.IGNORECASE)

RAISES_TAG = "raises-exception"
SKIP_TAG = "skip-execution"
# What a notebook, report or page made from scripted replies says (a plan run's too).
SCRIPTED_STATEMENT = (
    "**The model replies in this notebook were scripted:** they were played back from a "
    "file, not written by a language model."
)
# Rounds whose code must not run again as-is: it hung, killed the kernel, was stopped, or never ran.
GUARDED_STATUSES = frozenset({"timeout", "died", "cancelled"})
GUARD_HEADER = (
    "# kernel-agent: not run on Run All (recorded status: {status}); "
    "the code is commented out below and kept as-is in this cell's metadata (kernel_agent.code)"
)
KERNELSPEC = PYTHON3_KERNELSPEC

_NO_NAMES: frozenset[str] = frozenset()
_STOP_REASONS = {
    "max_rounds": "it reached the maximum number of rounds",
    "stuck": "the model stopped making progress",
    "llm_error": "the model endpoint failed",
    "cancelled": "it was cancelled",
    "disk_quota": "the workspace went over its disk quota",
    "answer": "the model gave no answer text",
}


def build_notebook(
    run: Run, *, view: View = "full", notebook_dir: str | os.PathLike[str] | None = None
) -> NotebookNode:
    """The notebook of ``run`` in the ``full`` or ``clean`` view. Pure: nothing is written.

    ``notebook_dir`` is where the notebook will live (default: the folder of
    ``run.notebook_path``); the workspace is recorded relative to it when the
    two share more than the filesystem root. Raises ``ValueError`` for an
    unknown view.
    """
    if view not in ("full", "clean"):
        raise ValueError(f"unknown notebook view {view!r}; expected 'full' or 'clean'")
    if notebook_dir is None and run.notebook_path is not None:
        notebook_dir = Path(run.notebook_path).parent
    # Not new_notebook(): it validates the empty notebook; the whole one is validated once, when written.
    nb = nbformat.from_dict({"nbformat": NBFORMAT, "nbformat_minor": NBFORMAT_MINOR, "metadata": {}, "cells": []})
    nb.metadata["kernelspec"] = dict(run.info.kernelspec or KERNELSPEC)
    nb.metadata["language_info"] = {"name": run.info.language, **copy.deepcopy(run.info.language_info)}
    nb.metadata[METADATA_KEY] = run_metadata(run, view, _portable_workspace(run.info.workspace, notebook_dir))
    cells = [_markdown(_header_text(run, view), "header")]
    if run.info.setup_code.strip():
        cells.append(_setup_cell(run))
    chosen = (
        [(rnd, _NO_NAMES) for rnd in run.rounds] if view == "full" else _clean_rounds(run.rounds, run.info.language)
    )
    turns = run.all_turns()
    for number, turn in enumerate(turns, start=1):
        if number > 1:
            text = f"## Follow-up question {number - 1}\n\n{turn.task}" + _changed_provenance(turns[number - 2], turn)
            cells.append(_markdown(text, "question", turn=number))
        mine = [
            (rnd, kept)
            for rnd, kept in chosen
            if rnd.index >= turn.first_round and (number == len(turns) or rnd.index <= turn.last_round)
        ]
        for rnd, kept_for in mine:
            cells.extend(_round_cells(rnd, kept_for))
        final = _markdown(_final_text(run) if number == len(turns) else _turn_answer_text(turn), "answer", turn=number)
        last = mine[-1][0] if mine else None
        if last is not None and last.answer is not None and not _has_cells(last):
            final.metadata[METADATA_KEY].update(round_record(last))  # the answer round has no cell of its own
        cells.append(final)
    _mark_unreplayed_dependencies(cells, run)
    _apply_display_updates(cells, run)
    if view == "clean":
        _renumber(cells)
    else:
        _keep_counts_increasing(cells)
    nb.cells = cells
    _assign_ids(cells)
    return nb


def warm_up() -> None:
    """Compile the notebook validator now (once per process), e.g. in a thread while a run
    prepares, rather than in its first save. Raises nothing."""
    _validator(NBFORMAT, NBFORMAT_MINOR)


def _validator(major: Any, minor: Any) -> Any:
    """nbformat's validator for ``major.minor`` on the fastjsonschema backend, compiled once per process
    (nbformat keeps it); None for a version nbformat has no schema for. Named here, not taken from
    ``NBFORMAT_VALIDATOR``: on the jsonschema backend every save would take ~15x longer (13 ms instead
    of 0.8 ms for a 250 kB notebook)."""
    return nbformat.validator.get_validator(major, minor, name=_VALIDATOR_BACKEND)


def _validate(nb: NotebookNode) -> None:
    """Raise ``nbformat.ValidationError`` unless ``nb`` matches the schema of its own version.

    The fast validator decides; an invalid notebook then goes through ``nbformat.validate``, whose
    jsonschema message names the offending field (the price is paid on the error path only).
    """
    validator = _validator(nb.get("nbformat"), nb.get("nbformat_minor"))
    try:
        if validator is None:
            raise nbformat.ValidationError("no schema for this notebook's version")
        validator.validate(nb)
    except nbformat.ValidationError:
        nbformat.validate(nb)
        raise


def write_notebook(
    nb: NotebookNode, path: str | os.PathLike[str], *, durable: bool = True, text: NotebookText | None = None
) -> Path:
    """Validate ``nb`` and write it to ``path`` atomically; return the path.

    The text goes through the door's one record writer (``kernel/door.py``'s ``write_record``): a
    temporary file with a random name beside ``path``, renamed over it, so an interruption leaves the
    old file or the new one, never a torn one, and a link planted at ``path`` is replaced, never
    written through. ``durable`` is the door's rule (file and folder fsynced); without it a killed
    process still loses nothing, only a power cut or an OS crash may, until a later durable write.
    ``text`` serialises it, reusing what it wrote of the same file before (``NotebookText``); the
    result is the same. Raises ``NotebookError`` when ``nb`` is invalid or cannot be serialised (the
    old file is untouched) or the file cannot be written.
    """
    path = Path(path)
    _write(nb, path, durable, text)
    return path


def export_run(run: Run, path: str | os.PathLike[str], texts: tuple[NotebookText, NotebookText] | None = None) -> Path:
    """Write the full view to ``path`` and the clean view to ``clean_path(path)``; return ``path``.

    Both files are complete and durable when it returns (the door's ``write_records``: each file
    fsynced, then the folder once). ``texts`` serialise the two views (as ``write_notebook``'s
    ``text``). Raises ``NotebookError`` as ``write_notebook`` does; both views are validated before
    either is written.
    """
    path = Path(path)
    full, clean = texts or (None, None)
    full_text = notebook_text(build_notebook(run, view="full", notebook_dir=path.parent), path, full)
    clean_text = notebook_text(build_notebook(run, view="clean", notebook_dir=path.parent), clean_path(path), clean)
    files = {path.name: full_text.encode("utf-8"), clean_path(path).name: clean_text.encode("utf-8")}
    try:  # one batch: both files fsynced, then their folder once
        os.makedirs(path.parent, exist_ok=True)
        write_records(path.parent, files, durable=True)
    except (OSError, WorkspaceFileError) as exc:
        raise NotebookError(f"cannot write notebook {path}: {exc}", path=str(path)) from exc
    return path


def notebook_text(nb: NotebookNode, path: str | os.PathLike[str], text: NotebookText | None = None) -> str:
    """``nb`` validated and serialised, as it would be written to ``path`` (named in errors), by ``text``
    when given. Raises ``NotebookError`` for an invalid notebook or one that cannot be serialised."""
    try:
        if text is not None:  # validates the cells it has not written before, then writes as nbformat does
            return text(nb, _validate) + "\n"
        _validate(nb)
        # The v4 writer itself: nbformat.writes would validate the notebook a second time.
        return nbformat.v4.writes_json(nb) + "\n"  # as nbformat.write ends the file
    except nbformat.ValidationError as exc:
        raise NotebookError(f"refusing to write an invalid notebook to {path}: {exc.message}", path=str(path)) from exc
    except (TypeError, ValueError) as exc:
        raise NotebookError(f"cannot serialise the notebook for {path}: {exc}", path=str(path)) from exc


def _write(nb: NotebookNode, path: Path, durable: bool = True, serialise: NotebookText | None = None) -> None:
    """Validate, serialise and write ``path`` through the door (``write_record``), durable or not."""
    text = notebook_text(nb, path, serialise)
    try:
        write_record(path, text.encode("utf-8"), durable=durable)
    except (OSError, WorkspaceFileError) as exc:
        raise NotebookError(f"cannot write notebook {path}: {exc}", path=str(path)) from exc


def clean_path(path: str | os.PathLike[str]) -> Path:
    """Where the clean view of the notebook at ``path`` goes: ``run.ipynb`` -> ``.run.clean.ipynb``, beside it.

    Beside it, so the setup cell's step into the workspace (relative to the notebook's folder) holds for both
    views; a dot name, so a glob for a folder's notebooks (``replay agent-runs/*.ipynb``) finds each run once.
    """
    path = Path(path)
    stem = path.stem if path.suffix == ".ipynb" else path.name
    return path.with_name(f"{'' if stem.startswith('.') else '.'}{stem}.clean.ipynb")


def legacy_clean_path(path: str | os.PathLike[str]) -> Path:
    """Where runs before 0.4 wrote the clean view: ``run.ipynb`` -> ``run.clean.ipynb`` (read, never written)."""
    path = Path(path)
    stem = path.stem if path.suffix == ".ipynb" else path.name
    return path.with_name(f"{stem}.clean.ipynb")


# -- cells -----------------------------------------------------------------------------------------


def _markdown(text: str, role: str, **meta: Any) -> NotebookNode:
    # Cells are built as plain nodes (ids come from _assign_ids): nbformat's new_*_cell validate
    # each one, which made an export 4x slower; the notebook is validated once when written.
    metadata = {METADATA_KEY: {"role": role, **meta}}
    return nbformat.from_dict({"cell_type": "markdown", "id": role, "metadata": metadata, "source": text})


def _header_text(run: Run, view: View) -> str:
    info = run.info
    files = ", ".join(f"`{name}`" for name in info.data_files) or "none"
    first = run.turns[0].task if run.turns else info.task  # follow-ups have sections of their own
    if kind_of(run) == "mcp":  # no model of ours: the client ran the code
        lines = [f"# MCP session\n\n{first.strip()}\n", f"- **Data files:** {files}", f"- **Client:** `{info.model}`"]
    else:
        model, protocol = first_turn_provenance(run)  # a follow-up's own are in its turn's metadata
        lines = [
            f"# Task\n\n{first.strip()}\n",
            f"- **Data files:** {files}",
            # the model, not where it is served: a notebook is shared, the endpoint is the operator's (the host
            # stays in the metadata, for `kernel-agent show`)
            f"- **Model:** `{model}`" if model else "- **Model:** unknown",
            f"- **Protocol:** `{protocol}`" if protocol else "- **Protocol:** unknown",
        ]
    if info.scripted:
        lines.append("\n" + SCRIPTED_STATEMENT)
    if view == "clean":
        lines.append(
            "\n*Clean view: failed attempts and rounds without code are left out and execution "
            "counts are renumbered. The full notebook has every attempt.*"
        )
    return "\n".join(lines)


def _setup_cell(run: Run) -> NotebookNode:
    cell = _code_cell(run.info.setup_code, run.setup_result)
    cell.metadata[METADATA_KEY] = {"role": "setup", "round": 0, **result_record(run.setup_result)}
    cell.metadata["jupyter"] = {"source_hidden": True}  # JupyterLab folds it: the rounds are what a reader came for
    if cell.source != run.info.setup_code:
        cell.metadata[METADATA_KEY]["code"] = run.info.setup_code
    return cell


def _round_cells(rnd: Round, kept_for: frozenset[str]) -> list[NotebookNode]:
    cells = []
    if rnd.reasoning_content.strip():
        cells.append(_markdown(_thinking_text(rnd.reasoning_content), "thinking", round=rnd.index))
    if rnd.reasoning.strip():
        cells.append(_markdown(rnd.reasoning, "reasoning", round=rnd.index))
    note = _note_text(rnd, kept_for)
    if note:
        cells.append(_markdown(note, "note", round=rnd.index))
    if rnd.code is not None:
        cell = _code_cell(rnd.code, rnd.result)
        cell.metadata[METADATA_KEY] = {"role": "code", "round": rnd.index}
        if cell.source != rnd.code:
            cell.metadata[METADATA_KEY]["code"] = rnd.code
        cells.append(cell)
    if cells:
        cells[-1].metadata[METADATA_KEY].update(round_record(rnd))
    return cells


def _has_cells(rnd: Round) -> bool:
    return bool(rnd.reasoning_content.strip() or rnd.reasoning.strip() or rnd.problem or rnd.code is not None)


def _thinking_text(thinking: str) -> str:
    """The hidden reasoning, folded: ``<details>`` renders collapsed in Jupyter, nbconvert and GitHub."""
    body = _escape(thinking.strip())
    return (
        f"<details>\n<summary>Model reasoning ({len(thinking.strip()):,} characters)</summary>\n\n{body}\n\n</details>"
    )


def _code_cell(code: str, result: ExecutionResult | None) -> NotebookNode:
    cell = nbformat.from_dict({
        "cell_type": "code",
        "id": "code",
        "execution_count": result.execution_count if result else None,
        "metadata": {},
        "outputs": list(result.outputs) if result else [],  # from_dict copies every container
        "source": code,
    })  # fmt: skip
    if result is None or result.status in GUARDED_STATUSES:
        cell.metadata["tags"] = [SKIP_TAG]
        cell.source = guard_source(code, result.status if result else "not-run")
    elif result.status == "error":
        cell.metadata["tags"] = [RAISES_TAG]
    return cell


def guard_source(code: str, status: str) -> str:
    """``code`` commented out, under a line saying why.

    Stock JupyterLab and ``nbconvert --execute`` ignore ``skip-execution``, so
    a cell that hung or killed the kernel would do it again on Run All. The
    commented form shows the code and does nothing; the original is kept in
    the cell's ``kernel_agent.code`` metadata, which loading and replay read.
    """
    lines = [f"# {line}" if line else "#" for line in code.splitlines()]
    return "\n".join([GUARD_HEADER.format(status=status), *lines])


def _note_text(rnd: Round, kept_for: frozenset[str]) -> str:
    parts = []
    if rnd.problem:
        parts.append(f"**Protocol problem:** {_escape(rnd.problem)}")
    result = rnd.result
    skipped = (
        "It is kept for the record, commented out and tagged `skip-execution`, so neither a replay "
        "nor Run All runs it; the original code is in the cell's metadata."
    )
    note = f" ({_escape(result.note)})" if result is not None and result.note else ""
    if rnd.code is not None and result is None:
        parts.append(f"**Not executed:** the run ended before the code below ran. {skipped}")
    elif result is not None and result.status == "timeout":
        state = _lost_text(result) if result.state_lost else "Variables were kept."
        parts.append(f"**Timed out** after {result.duration_s:.1f} s{note}. {state} {skipped}")
        if kept_for:
            names = ", ".join(f"`{name}`" for name in sorted(kept_for))
            parts.append(
                f"**Kept although it timed out:** later cells use {names}, set here before the interrupt. "
                "Running it again would hang again, so those cells are marked (`kernel_agent.unreplayed`) "
                "and allowed to fail: a replay reports them as expected."
            )
    elif result is not None and result.status == "cancelled":
        parts.append(
            f"**Cancelled** after {result.duration_s:.1f} s: the run was stopped while this code ran; "
            f"its output up to then is kept. {skipped}"
        )
    elif result is not None and result.status == "died":
        parts.append(f"**The kernel died** while running the code below{note}. {_lost_text(result)} {skipped}")
    elif result is not None and result.status == "error" and result.note:
        parts.append(f"**Limit reached:** {_escape(result.note)}.")
    elif kept_for:
        names = ", ".join(f"`{name}`" for name in sorted(kept_for))
        parts.append(f"**Kept although it failed:** later cells use {names}, set here before the error.")
    return "\n\n".join("> " + part.replace("\n", "\n> ") for part in parts)


def _lost_text(result: ExecutionResult) -> str:
    """What the restart cost, never contradicting the rebuild the note reports."""
    if not result.rebuilt_cells and not result.lost_names:
        return "All variables were lost."
    missing = ", ".join(f"`{name}`" for name in result.lost_names)
    return (
        f"Earlier cells were re-run as noted; names now missing: {missing}."
        if missing
        else "Earlier cells were re-run as noted; no names are missing."
    )


def _escape(text: str) -> str:
    """Plain text in markdown: ``<Code>`` in a protocol message must show, not vanish as an HTML tag."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def answer_body(answer: str) -> str:
    """``answer`` without a heading of its own that says only "Answer" (``## Answer``, ``**Final answer:**``): the
    notebook's heading says it once."""
    lines = answer.strip().splitlines()
    if lines and _ANSWER_HEADING.fullmatch(lines[0].strip()):
        return "\n".join(lines[1:]).strip()
    return answer


def _changed_provenance(before: Turn, turn: Turn) -> str:
    """A follow-up's model and protocol, when either differs from the turn before's ("" otherwise)."""
    if (turn.model, turn.protocol) == (before.model, before.protocol) or not (turn.model or turn.protocol):
        return ""
    return f"\n\n*Model `{turn.model or 'unknown'}` · protocol `{turn.protocol or 'unknown'}`*"


def _turn_answer_text(turn: Turn) -> str:
    if turn.answer is not None:
        return f"## Answer\n\n{answer_body(turn.answer)}"
    reason = _STOP_REASONS.get(turn.stop_reason, turn.stop_reason) if turn.stop_reason else "it was resumed"
    return f"## No answer\n\nThis question stopped without an answer: {reason}."


def _final_text(run: Run) -> str:
    if kind_of(run) == "mcp":  # its close is kept where a run keeps its answer
        if run.answer is not None:
            return f"## Session ended\n\n{run.answer}"
        return f"## Session open\n\nThe session is still open ({len(run.rounds)} code executions so far)."
    if run.answer is not None:
        return f"## Answer\n\n{answer_body(run.answer)}"
    if run.stop_reason is None:
        return f"## In progress\n\nThe run has not finished yet ({len(run.rounds)} rounds so far)."
    text = f"## No answer\n\nThe run stopped without an answer: {_STOP_REASONS.get(run.stop_reason, run.stop_reason)}."
    if run.error:
        text += f"\n\n**Error:**\n\n```text\n{run.error}\n```"
    return text


def _apply_display_updates(cells: list[NotebookNode], run: Run) -> None:
    """Let a cell's ``update_display_data`` for a display shown by an earlier cell update that cell, as Jupyter does."""
    results = {0: run.setup_result, **{rnd.index: rnd.result for rnd in run.rounds}}
    shown: dict[str, list[dict[str, Any]]] = {}
    for cell in cells:
        result = results.get(cell.metadata[METADATA_KEY].get("round")) if cell.cell_type == "code" else None
        if result is None:
            continue
        for update in result.display_updates:
            for output in shown.get(update.display_id, []):
                output["data"] = nbformat.from_dict(copy.deepcopy(update.data))
                output["metadata"] = nbformat.from_dict(copy.deepcopy(update.metadata))
        for display_id, index in result.display_ids:
            if index < len(cell.outputs):
                shown.setdefault(display_id, []).append(cell.outputs[index])


def _renumber(cells: list[NotebookNode]) -> None:
    count = 0
    for cell in cells:
        if cell.cell_type != "code" or cell.execution_count is None:
            continue
        count += 1
        cell.execution_count = count
        for out in cell.outputs:
            if out.get("output_type") == "execute_result":
                out["execution_count"] = count


def _mark_unreplayed_dependencies(cells: list[NotebookNode], run: Run) -> None:
    """Cells that read what a skipped (timed-out, crashed) cell left: marked, and allowed to raise.

    ``kernel_agent.unreplayed`` names what they read and from which rounds; replay reports
    such a cell's error as expected, and Run All goes on past it.
    """
    depends = unreplayed_dependencies(run.rounds, run.info.language)
    for cell in cells:
        meta = cell.metadata[METADATA_KEY]
        if cell.cell_type != "code" or meta.get("role") != "code" or meta.get("round") not in depends:
            continue
        meta["unreplayed"] = list(depends[meta["round"]])
        tags = cell.metadata.setdefault("tags", [])
        if SKIP_TAG not in tags and RAISES_TAG not in tags:
            tags.append(RAISES_TAG)


def _keep_counts_increasing(cells: list[NotebookNode]) -> None:
    """A resumed turn's new kernel counts from 1 again: shift its counts past the earlier turns'.

    The shift is chosen at the first code cell after each follow-up question, so a kernel restart within a turn keeps
    its counts as Jupyter showed
    them, and counts that already increase (a re-exported loaded run) are left alone.
    """
    last, shift, turn_open = 0, 0, False
    for cell in cells:
        turn_open = turn_open or cell.metadata[METADATA_KEY].get("role") == "question"
        if cell.cell_type != "code" or cell.execution_count is None:
            continue
        if turn_open:
            shift, turn_open = max(0, last + 1 - cell.execution_count), False
        cell.execution_count += shift
        last = max(last, cell.execution_count)
        for out in cell.outputs:
            if out.get("output_type") == "execute_result":
                out["execution_count"] = cell.execution_count


def _assign_ids(cells: list[NotebookNode]) -> None:
    """Stable ids (``round-3-code``) so that rewriting after each round does not churn them."""
    seen: set[str] = set()
    for cell in cells:
        meta = cell.metadata[METADATA_KEY]
        base = meta["role"]
        if base in ("thinking", "reasoning", "note", "code"):
            base = f"round-{meta['round']}-{base}"
        elif base in ("question", "answer") and meta.get("turn", 1) > 1:
            base = f"turn-{meta['turn']}-{base}"
        cell_id, n = base, 1
        while cell_id in seen:
            n += 1
            cell_id = f"{base}-{n}"
        seen.add(cell_id)
        cell["id"] = cell_id


# -- metadata --------------------------------------------------------------------------------------


def _portable_workspace(workspace: str, notebook_dir: str | os.PathLike[str] | None) -> str:
    """The workspace relative to the notebook's folder (POSIX), so a committed example replays elsewhere."""
    if not workspace or notebook_dir is None:
        return workspace
    target, base = os.path.abspath(workspace), os.path.abspath(notebook_dir)
    try:
        common = os.path.commonpath([target, base])
    except ValueError:  # different drives
        return target
    if os.path.dirname(common) == common:  # only the root in common: a relative path would be fragile
        return target
    return PurePath(os.path.relpath(target, base)).as_posix()


# -- the clean view --------------------------------------------------------------------------------


def _clean_rounds(rounds: tuple[Round, ...], language: str = "python") -> list[tuple[Round, frozenset[str]]]:
    needed = needed_failures(rounds, language)
    sources = unreplayed_sources(
        rounds, language
    )  # a timed-out cell whose names later cells read: kept, guarded, explained
    chosen = []
    for pos, rnd in enumerate(rounds):
        if rnd.status == "ok" and rnd.code and rnd.code.strip():
            chosen.append((rnd, _NO_NAMES))
        elif pos in needed:
            chosen.append((rnd, frozenset(needed[pos])))
        elif rnd.index in sources:
            chosen.append((rnd, frozenset(sources[rnd.index])))
        elif rnd.answer is not None and rnd.code is None:
            chosen.append((rnd, _NO_NAMES))
    return chosen
