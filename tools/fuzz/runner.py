"""One forked process per case, with a time limit and a memory limit, and its outcome.

The parent imports every command's module once; each case is a `fork` of it that changes to the case's folder,
sends stdout and stderr to files there, caps its address space (RLIMIT_AS, the hard limit) and calls the
module's `main(argv)`. The parent kills it past the time limit and reads its peak resident memory from `wait4`.

Outcomes (`Result.outcome`):
- done: exit 0;            - failed: exit 1 (a check failed, one `error:` line) or the command's findings (doctor);
- refused: exit 2;         - traceback: a Python traceback on stderr (whatever the exit code);
- hang: stopped at the time limit (SIGTERM, then SIGKILL);  - memory: peak RSS past the limit, a MemoryError, or "error: out of memory";
- crash: ended by a signal it was not sent.
Besides: `one_line` (a refusal holds exactly one `error:` line), `names_input` (its line names the input: the path of
a file or folder under the case's `in/`, or the input's name), `outside` (files written or removed in the case's
folder outside OUT, or a seed file changed).
"""

from __future__ import annotations

import importlib
import os
import resource
import signal
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tools.fuzz.cases import Case

OUTCOMES = ("done", "failed", "refused", "traceback", "hang", "memory", "crash")


@dataclass
class Limits:
    seconds: float = 60.0
    grace_seconds: float = 10.0  # after SIGTERM at the time limit, before SIGKILL
    memory_bytes: int = 4 * 2**30  # peak resident memory counted as "memory"
    address_space_bytes: int = 24 * 2**30  # RLIMIT_AS: the hard stop (ORT and OpenVINO reserve address space)


@dataclass
class Result:
    number: int
    command: str
    what: str
    seed_file: str
    outcome: str
    exit: int | None
    seconds: float
    peak_mib: float
    one_line: bool | None = None
    names_input: bool | None = None
    outside: list[str] = field(default_factory=list)
    last_line: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def snapshot(folder: Path, skip: Path) -> dict[str, tuple[int, int]]:
    """{relative path: (size, mtime_ns)} of everything under `folder` except `skip` and what is under it."""
    found = {}
    for path in folder.rglob("*"):
        if path == skip or skip in path.parents:
            continue
        try:
            info = path.lstat()
        except OSError:
            continue
        found[str(path.relative_to(folder))] = (info.st_size, info.st_mtime_ns)
    return found


def _child(case: Case, limits: Limits) -> None:
    """In the forked process: run the case and exit with its code (never returns)."""
    code = 1
    try:
        os.chdir(case.folder)
        for fd, name in ((1, "stdout.txt"), (2, "stderr.txt")):
            file = os.open(case.folder / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(file, fd)
            os.close(file)
        sys.stdout = os.fdopen(1, "w", buffering=1)
        sys.stderr = os.fdopen(2, "w", buffering=1)
        resource.setrlimit(resource.RLIMIT_AS, (limits.address_space_bytes, limits.address_space_bytes))
        code = importlib.import_module(case.module).main(case.argv)
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:  # noqa: BLE001 - what the command let escape is the finding
        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code if isinstance(code, int) else 1)


@dataclass
class Running:
    """A case's forked process, started by `start`."""

    case: Case
    pid: int
    start: float
    before: dict


def start(case: Case, limits: Limits) -> Running:
    """Fork the case's process (see the module's docstring)."""
    before = snapshot(case.folder, case.out)
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _child(case, limits)
    return Running(case, pid, started, before)


def poll(running: Running, limits: Limits, seed_state: dict, seeds: Path) -> Result | None:
    """The case's Result once its process ended (killed past the time limit), else None."""
    done, status, usage = os.wait4(running.pid, os.WNOHANG)
    killed = False
    if not done:
        if time.monotonic() - running.start <= limits.seconds:
            return None
        killed = True  # SIGTERM first (a command cleans up what it staged), SIGKILL after a grace period
        os.kill(running.pid, signal.SIGTERM)
        deadline = time.monotonic() + limits.grace_seconds
        while not done and time.monotonic() < deadline:
            time.sleep(0.05)
            done, status, usage = os.wait4(running.pid, os.WNOHANG)
        if not done:
            os.kill(running.pid, signal.SIGKILL)
            done, status, usage = os.wait4(running.pid, 0)
    return _result(running, status, usage, killed, limits, seed_state, seeds)


def run(case: Case, limits: Limits, seed_state: dict, seeds: Path) -> Result:
    """Fork, run `case` to its end, classify."""
    running = start(case, limits)
    while (result := poll(running, limits, seed_state, seeds)) is None:
        time.sleep(0.005)
    return result


def _result(running: Running, status: int, usage, killed: bool, limits: Limits, seed_state: dict,
            seeds: Path) -> Result:
    case = running.case
    seconds = time.monotonic() - running.start
    peak = usage.ru_maxrss * 1024
    stderr = (case.folder / "stderr.txt").read_text(errors="replace") if (case.folder / "stderr.txt").exists() else ""
    exit_code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
    lines = [line for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    if killed:
        outcome = "hang"
    elif peak > limits.memory_bytes or "MemoryError" in stderr or any("out of memory" in e for e in errors):
        outcome = "memory"
    elif "Traceback (most recent call last)" in stderr:
        outcome = "traceback"
    elif exit_code is None:
        outcome = "crash"
    else:
        outcome = {0: "done", 1: "failed", 2: "refused"}.get(exit_code, "crash")
    after = snapshot(case.folder, case.out)
    changed = sorted(path for path in set(running.before) | set(after)
                     if running.before.get(path) != after.get(path) and path not in ("stdout.txt", "stderr.txt"))
    changed += [f"seed {path}" for path, state in snapshot(seeds, seeds / ".none").items()
                if seed_state.get(path) != state]
    return Result(case.number, case.command, case.what, case.seed_file, outcome, exit_code, round(seconds, 3),
                  round(peak / 2**20, 1), one_line=(len(errors) == 1) if outcome == "refused" else None,
                  names_input=_names_input(errors[-1], case) if outcome == "refused" and errors else None,
                  outside=changed, last_line=(errors[-1] if errors else lines[-1] if lines else "")[:300])


def _names_input(line: str, case: Case) -> bool:
    """Whether an error line names what the case gave the command: a path under its `in/` folder, or the name of
    the input itself."""
    return f"{case.folder.name}/in" in line or Path(case.input).name in line
