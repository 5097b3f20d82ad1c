"""`python -m tests.help_runner MODULE[:SUB] ...`: `python -m MODULE [SUB] --help` for each, in this one process.

Each runs as `python -m` runs it (`runpy.run_module(MODULE, run_name="__main__")`, argv set), its stdout and
stderr captured and its SystemExit caught; prints one JSON object {"MODULE[:SUB]": {"code", "stdout", "stderr"}}.
tests/test_docs.py uses it: sixty fresh interpreters importing torch, onnx and OpenVINO again and again cost a
minute of both cores; one interpreter imports each library once. A module that breaks the process (a crash at
import) fails every pair after it, which the test reports as such.
"""

import contextlib
import io
import json
import runpy
import sys
import traceback
import warnings


def run(module: str, sub: str | None) -> dict:
    """The exit code and output of `python -m module [sub] --help`."""
    out, err = io.StringIO(), io.StringIO()
    argv = sys.argv
    sys.argv = [module, *([sub] if sub else []), "--help"]
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # runpy: the package was imported before its __main__
            try:
                runpy.run_module(module, run_name="__main__", alter_sys=True)
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
            except BaseException:  # noqa: BLE001 - the pair's failure, reported as its output
                traceback.print_exc()
                code = 1
    finally:
        sys.argv = argv
    return {"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}


def main(pairs: list[str]) -> int:
    found = {}
    for pair in pairs:
        module, _, sub = pair.partition(":")
        found[pair] = run(module, sub or None)
    print(json.dumps(found))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
