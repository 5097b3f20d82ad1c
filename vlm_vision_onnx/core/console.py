"""The console of a command: its own lines on stderr, third-party chatter in the stage's log.

Libraries the stages call write warnings that say nothing to the user: onnxscript's "Skipping constant
folding for op SequenceEmpty", torch.export's advisories, ORT transformer optimizer's logging, Python
warnings. While `quiet()` is active (every command, from `core.errors.main_wrapper`):
- `sys.stderr` is a buffer, so whatever a library prints or logs to it goes there: Python warnings,
  logging's last-resort handler and every handler that writes to stderr (those created before the
  command are pointed at the buffer for the block);
- the command's own lines (`core.progress.say`, the one-line errors) go to the real stderr through
  `stream()`;
- a stage folder, when it is published (`core.staging`), receives the buffer as `log.txt`.
`--verbose` on any command (`core.errors.Parser`) ends the quiet mode for the rest of the run: what was
buffered so far is printed, and everything goes to the console as it comes.
C-level output (ONNX Runtime's own log) is not Python's: `core.session` sets ORT's log level instead.
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

LOG_NAME = "log.txt"


class _Quiet:
    """The state of one quiet() block: the real stderr and the third-party text buffered so far."""

    def __init__(self) -> None:
        self.real = sys.stderr
        self.buffer = io.StringIO()
        self.repointed: list[tuple[logging.StreamHandler, object]] = []
        self.active = True


_state: _Quiet | None = None


def stream():
    """Where the command's own lines go: the real stderr (also while quiet)."""
    return _state.real if _state is not None and _state.active else sys.stderr


def _handlers() -> Iterator[logging.StreamHandler]:
    loggers = [logging.getLogger()] + [lg for lg in logging.Logger.manager.loggerDict.values()
                                       if isinstance(lg, logging.Logger)]
    for logger in loggers:
        for handler in logger.handlers:
            if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler):
                yield handler


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Send third-party stderr output (prints, logging, warnings) to a buffer for the block (see module doc).

    Nested blocks (a command calling another command's main) share the outer block's buffer."""
    global _state
    if _state is not None:
        yield
        return
    state = _Quiet()
    for handler in _handlers():  # handlers made before now hold the real stderr: point them at the buffer
        if handler.stream is state.real:
            state.repointed.append((handler, handler.stream))
            handler.setStream(state.buffer)
    sys.stderr = state.buffer
    _state = state
    try:
        yield
    finally:
        _release(state)
        _state = None


def _release(state: _Quiet) -> None:
    """Give the console back: stderr, the handlers' streams."""
    if not state.active:
        return
    state.active = False
    if sys.stderr is state.buffer:
        sys.stderr = state.real
    for handler, before in state.repointed:
        if handler.stream is state.buffer:
            handler.setStream(before)
    for handler in _handlers():  # handlers made during the block hold the buffer
        if handler.stream is state.buffer:
            handler.setStream(state.real)


def verbose() -> None:
    """`--verbose`: print what was buffered and let everything through for the rest of the run."""
    state = _state
    if state is None or not state.active:
        return
    _release(state)
    state.real.write(state.buffer.getvalue())
    state.real.flush()


def write_log(folder: Path) -> None:
    """Write the third-party text of this run so far to FOLDER/log.txt (when there was any, while quiet)."""
    state = _state
    if state is None or not state.active:
        return
    text = state.buffer.getvalue()
    if text:
        (Path(folder) / LOG_NAME).write_text(text)
