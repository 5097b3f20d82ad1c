"""Errors and exit codes, shared by every command.

Exit 0: done. Exit 1: a check failed (validation, parity, verification) — `CheckFailed`.
Exit 2: bad input — `UsageError`. Either prints exactly one `error: ...` line on stderr, with the
cause in that line, and no traceback.
"""

import argparse
import contextvars
import logging
import signal
import threading
from collections.abc import Callable
from pathlib import Path

from vlm_vision_onnx.core import console

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """Bad input the user must fix (unknown model, bad option, unreadable file, ...): exit code 2."""


class CheckFailed(Exception):
    """A check on the result failed (parity, validation, verification); nothing was written: exit code 1."""


class Parser(argparse.ArgumentParser):
    """argparse that reports bad options as one `error:` line (with a --help hint) and exit code 2, and
    takes `--verbose` (every parser and subcommand): third-party warnings on the console (`core.console`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # SUPPRESS: a subcommand's default cannot undo a --verbose given before the subcommand
        self.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS,
                          help="show third-party warnings and logs on the console (default: the stage's log.txt)")

    def parse_known_args(self, args=None, namespace=None):
        parsed, rest = super().parse_known_args(args, namespace)
        if getattr(parsed, "verbose", False):
            console.verbose()
        return parsed, rest

    def error(self, message: str):
        raise UsageError(f"{message} (see {self.prog} --help)")


#: The file or folder a command was pointed at (`subject`), named in its `error:` line when the message does not.
_SUBJECT: contextvars.ContextVar[str | None] = contextvars.ContextVar("subject", default=None)


def subject(path) -> None:
    """Say which input this command works on: a refusal (UsageError) that names neither it nor its file name gets
    it in front (`error: IN: ...`), so every refusal names the file it is about."""
    _SUBJECT.set(str(path) if path is not None else None)


def _message(err: BaseException) -> str:
    text = one_line(err)
    path = _SUBJECT.get()
    if path and path not in text and Path(path).name not in text and not text.startswith("-"):
        text = f"{path}: {text}"  # (an option's error names the option: it stays as it is)
    return text


def one_line(text: str) -> str:
    """`text` on one line: inner newlines become ' | ', surrounding blanks go."""
    return " | ".join(part.strip() for part in str(text).splitlines() if part.strip())


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main_wrapper(body: Callable[[], int]) -> int:
    """Run a command's body; map UsageError to exit 2 and CheckFailed to exit 1 with one `error:` line.

    MemoryError is reported as bad input too (the request was larger than the machine), and
    KeyboardInterrupt or SIGTERM (`kill`, a job scheduler) as an interrupted run (exit 130); both without a
    traceback. SIGTERM is turned into KeyboardInterrupt so that staged outputs are cleaned up on the way out.
    The body runs in `core.console.quiet()`: third-party warnings go to the stage's log.txt, not the console.
    """
    logging.getLogger("onnx_ir").setLevel(logging.ERROR)
    token = _SUBJECT.set(None)  # a command's input is its own: none from an earlier command in this process
    try:
        return _run(body)
    finally:
        _SUBJECT.reset(token)


def _run(body: Callable[[], int]) -> int:
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)
    with console.quiet():
        try:
            return body()
        except UsageError as err:
            print(f"error: {_message(err)}", file=console.stream())
            return EXIT_USAGE
        except CheckFailed as err:  # a check's finding names what failed (verify: the file in the package)
            print(f"error: {one_line(err)}", file=console.stream())
            return EXIT_FAILED
        except MemoryError:
            print("error: out of memory: the request needs more memory than this machine has; use smaller "
                  "inputs (fewer patches or images)", file=console.stream())
            return EXIT_USAGE
        except KeyboardInterrupt:
            print("error: interrupted; nothing was written", file=console.stream())
            return 130
