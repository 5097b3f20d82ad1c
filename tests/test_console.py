"""A quiet console: third-party warnings go to the stage's log.txt; `--verbose` shows them (core/console.py)."""

import logging
import subprocess
import sys
from pathlib import Path

from vlm_vision_onnx.core import console
from vlm_vision_onnx.core.errors import Parser, main_wrapper
from vlm_vision_onnx.core.progress import say

ROOT = Path(__file__).resolve().parents[1]
#: The prefixes of the lines a stage prints itself: progress (`core.progress.say`) and errors.
OWN_LINE = ("[vision-onnx]", "error:")


def library_logger(name: str) -> logging.Logger:
    """A library's logger with its own stderr handler (as torch's and onnxscript's), made now.

    (pytest captures records that reach the root logger, so these do not propagate; the subprocess test
    below covers logging's last resort and Python warnings as a real command meets them.)"""
    logger = logging.getLogger(name)
    logger.propagate = False
    logger.handlers = [logging.StreamHandler(sys.stderr)]
    return logger


def test_third_party_output_is_buffered_own_lines_are_not(capsys, tmp_path):
    before = library_logger("some_library.optimizer")  # made before the command
    with console.quiet():
        during = library_logger("some_library.exporter")  # made (imported) during the command
        before.warning("Skipping constant folding for op SequenceEmpty")
        during.warning("an exporter advisory")
        print("a library's print", file=sys.stderr)
        say("progress line")
        console.write_log(tmp_path)
    err = capsys.readouterr().err
    assert err.splitlines() == ["[vision-onnx] progress line"]
    log = (tmp_path / console.LOG_NAME).read_text()
    for text in ("SequenceEmpty", "exporter advisory", "a library's print"):
        assert text in log
    assert before.handlers[0].stream is sys.stderr and during.handlers[0].stream is sys.stderr  # given back


def test_verbose_prints_what_was_buffered_and_lets_the_rest_through(capsys):
    parser = Parser(prog="cmd")
    parser.add_argument("x")

    def body():
        library = library_logger("lib_verbose")
        library.warning("before --verbose")
        parser.parse_args(["1", "--verbose"])
        library.warning("after --verbose")
        return 0

    assert main_wrapper(body) == 0
    err = capsys.readouterr().err
    assert "before --verbose" in err and "after --verbose" in err


def test_verbose_before_a_subcommand_holds():
    parser = Parser(prog="cmd")
    sub = parser.add_subparsers(dest="command", parser_class=Parser)
    sub.add_parser("run")
    assert parser.parse_args(["--verbose", "run"]).verbose
    assert parser.parse_args(["run", "--verbose"]).verbose
    assert not hasattr(parser.parse_args(["run"]), "verbose")


def test_errors_reach_the_console(capsys):
    from vlm_vision_onnx.core.errors import UsageError

    def body():
        library_logger("lib_noise").warning("noise")
        raise UsageError("bad input, and how to fix it")

    assert main_wrapper(body) == 2
    assert capsys.readouterr().err.splitlines() == ["error: bad input, and how to fix it"]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)


def test_a_small_export_prints_no_third_party_line(tmp_path):
    """torch.export (dynamo: torch's logging) then optimize (onnxscript's constant folding): the console has
    the stages' own lines only; their log.txt has the rest."""
    export = _run("-m", "builders.vision", "--model", "qwen3-vl-tiny", "--dynamo", "--out", str(tmp_path / "export"))
    assert export.returncode == 0, export.stderr
    optimized = _run("-m", "quantize", "optimize", str(tmp_path / "export"), str(tmp_path / "optimized"))
    assert optimized.returncode == 0, optimized.stderr
    for run in (export, optimized):
        foreign = [line for line in run.stderr.splitlines() if not line.startswith(OWN_LINE)]
        assert not foreign, f"third-party lines on the console: {foreign[:5]}"
    assert "torchvision is not installed" in (tmp_path / "export" / console.LOG_NAME).read_text()  # torch's logging

    verbose = _run("-m", "builders.vision", "--model", "qwen3-vl-tiny", "--dynamo", "--out", str(tmp_path / "verbose"),
                   "--verbose")
    assert verbose.returncode == 0, verbose.stderr
    assert "torchvision is not installed" in verbose.stderr
