"""Stage output that never loses a user's file: checked before the work starts, written to a temp
folder beside OUT, moved into place only when everything succeeded.

Rules (one place for every stage):
- OUT may not be IN, hold IN, sit inside IN's stage folder, or be the working folder or one of its parents.
- A stage replaces only what this tool wrote. Every published folder lists the files it holds (`report.json`'s
  `written_files`, or the stage's own listing: a release package's SHA256SUMS); an existing OUT is replaced only when it is
  a previous output of the same stage (`--force`: of any stage) *and* holds nothing but the files its listing
  names. A folder holding anything else (a user's notes, a sub-folder, an output of an older version that listed
  nothing) is refused, `--force` or not; only `--clobber` (`CLOBBER`), explicit and documented, replaces it whole.
- A stage whose OUT is a single model file (surgery's `OUT.onnx`) never touches files of another
  stage beside it: a `report.json` there that another stage wrote is refused even with `--force`.
- A single result file (`embed` / `encode --out FILE.npz`) carries this tool's mark (`mark_result`); an existing
  file without it is replaced only with `--clobber`.
- Whether OUT can be written is found out before the work starts, not after it.
- On any error the temp folder, and any parent folder this run created, are removed: nothing new is left. Temp
  folders are named `.OUT.tmp-PID-xxxx`; one whose process is gone (a stage killed with SIGKILL, a power cut)
  is removed by the next run writing the same OUT (`remove_stale`). So are a stage's work folders
  (`WorkFolder`, `.OUT.work-PID-xxxx`: its intermediate models, gigabytes at 2B dims).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Self

from vlm_vision_onnx.core import console
from vlm_vision_onnx.core.errors import UsageError

REPORT = "report.json"
#: The `force` value of `--clobber`: replace OUT whatever it holds (True, `--force`, never deletes a file this
#: tool did not write). Both flags share the `force` destination, so one value travels through every call.
CLOBBER = "clobber"
#: The key of a report that lists the files of its folder (written by `staged_folder` / `StagedFile`; not `files`,
#: which the quantize stages' reports use for the model files' sizes).
FILES = "written_files"
#: The zip comment of every result file this tool writes (an .npz is a zip archive; `np.load` ignores it).
RESULT_MARK = b"vlm-vision-onnx result"


def user_cache(name: str) -> Path:
    """$XDG_CACHE_HOME/vlm-vision-onnx/NAME, else ~/.cache/vlm-vision-onnx/NAME: where the runtime keeps what it
    compiled for the next run (the QNN EP's contexts, runtime.npu_context_cache). Not created here."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vlm-vision-onnx" / name


def add_clobber_argument(parser) -> None:
    """`--clobber` beside a command's `--force` (same destination: `force` = CLOBBER)."""
    parser.add_argument("--clobber", dest="force", action="store_const", const=CLOBBER, default=False,
                        help="replace OUT whatever it holds, deleting files this tool did not write "
                             "(--force never does)")


def _real(path: str | os.PathLike) -> Path:
    return Path(os.path.realpath(os.path.abspath(path)))


def stage_of(folder: Path) -> str | None:
    """The `stage` recorded in `folder/report.json`, or None when there is no readable report."""
    try:
        return json.loads((folder / REPORT).read_text()).get("stage")
    except (OSError, ValueError, AttributeError):
        return None


def _check_not_input(out: Path, inputs: Sequence[str | os.PathLike], folder_output: bool = True) -> None:
    """Refuse an OUT that is the working folder (or a parent of it), or that would replace or contain an input.

    A folder OUT may not be IN, IN's folder, inside a folder IN, or hold IN; a file OUT may not be IN
    or IN's external data file (a sibling file in IN's folder is fine).
    """
    cwd = _real(Path.cwd())
    if out == cwd or out in cwd.parents:
        raise UsageError(f"OUT {out} is the working folder or one of its parents; writing there would replace "
                         "it: give a new folder for OUT")
    for given in inputs:
        src = _real(given)
        try:
            if not src.exists():  # nothing to clobber; reading it says it is missing
                continue
        except (OSError, ValueError):  # a name the file system refuses (too long): reading it says so
            continue
        if folder_output:
            folder = src if src.is_dir() else src.parent
            clash = out == src or out == folder or folder in out.parents or out in src.parents
        else:
            clash = out == src or out in src.parents or out == src.with_name(src.name + ".data")
        if clash:
            where = src if src.is_dir() else src.parent
            raise UsageError(f"OUT {out} would overwrite or contain the input {given}: give an OUT outside "
                             f"{where}" if folder_output else f"OUT {out} is the input {given} (or its data): "
                             "give another file name")


def _check_writable(out: Path) -> None:
    """Find the nearest existing parent of `out` and prove a folder can be created there."""
    parent = out.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise UsageError(f"cannot write OUT {out}: {parent} is a file, not a folder; choose another OUT")
    try:
        Path(tempfile.mkdtemp(prefix=".write-check.", dir=parent)).rmdir()
    except OSError as exc:
        raise UsageError(f"cannot write OUT {out}: {parent} is not writable ({exc.strerror}); "
                         "choose another OUT") from None


def report_files(folder: Path) -> set[str] | None:
    """The files `folder/report.json` lists as written by its stage (itself included); None without a list."""
    try:
        listed = json.loads((folder / REPORT).read_text()).get(FILES)
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(listed, list) or not all(isinstance(f, str) for f in listed):
        return None
    return {*listed, REPORT}


def held_files(folder: Path) -> list[str]:
    """Every file and empty folder under `folder`, hidden ones included, as sorted relative POSIX paths."""
    found = []
    for path in sorted(folder.rglob("*")):
        if path.is_dir() and not path.is_symlink():
            if not any(path.iterdir()):
                found.append(path.relative_to(folder).as_posix() + "/")
        else:
            found.append(path.relative_to(folder).as_posix())
    return found


def _check_replaceable(out: Path, given: Path, stage: str, force, listed) -> None:
    """Refuse to replace the existing, non-empty folder OUT unless the rules of the module docstring allow it."""
    if force == CLOBBER:
        return
    previous = stage_of(out)
    if previous != stage and not force:
        what = f"the output of the {previous} stage" if previous else "not an output of this tool"
        fix = "--force to replace it" if previous else "--clobber to delete what it holds and replace it"
        raise UsageError(f"OUT {given} exists and is {what}; refusing to replace it: give a new folder, or {fix}")
    names = (listed or report_files)(out)
    if names is None:
        raise UsageError(f"OUT {given} does not list the files this tool wrote there (not an output of this tool, or "
                         "one written by an older version); refusing to replace it: give a new folder, or "
                         "--clobber to delete what it holds and replace it")
    extra = [f for f in held_files(out) if f not in names]
    if extra:
        more = f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""
        raise UsageError(f"OUT {given} holds {extra[0]}{more}, which this tool did not write; refusing to replace "
                         "the folder: move it away, give a new folder, or --clobber to delete it")


def check_folder_output(out: str | os.PathLike, stage: str, inputs: Sequence[str | os.PathLike] = (),
                        force=False, listed=None) -> Path:
    """Check OUT, a stage folder, before any work; returns its absolute path. UsageError with the reason.

    `force`: False, True (`--force`) or CLOBBER; `listed(folder) -> set of relative paths | None`: what an earlier
    output lists as written by this tool (default: `report_files`)."""
    given = Path(out)
    if given.suffix == ".onnx":
        raise UsageError(f"OUT {given} names a .onnx file, but the {stage} stage writes a folder "
                         f"(model.onnx + report.json): give a folder, e.g. {given.with_suffix('')}")
    out = _real(given)
    _check_not_input(out, inputs)
    if out.exists():
        if not out.is_dir():
            raise UsageError(f"OUT {given} exists and is a file; the {stage} stage writes a folder: "
                             "give a new folder")
        if any(out.iterdir()):
            _check_replaceable(out, given, stage, force, listed)
    _check_writable(out)
    return out


def check_file_output(out: str | os.PathLike, stage: str, inputs: Sequence[str | os.PathLike] = (),
                      force=False, report: str | os.PathLike | None = None) -> Path:
    """Check OUT, a single model file (+ `OUT.data`, + `report.json` beside it unless `report` is given)."""
    given = Path(out)
    out = _real(given)
    if out.is_dir():
        raise UsageError(f"OUT {given} is a folder; give the output model's file name, e.g. {given}/model.onnx")
    _check_not_input(out, inputs, folder_output=False)
    beside = out.parent / REPORT
    owner = stage_of(out.parent) if beside.exists() else None
    if report is None and beside.exists() and owner != stage:
        what = f"the {owner} stage's report.json" if owner else "a report.json this stage did not write"
        raise UsageError(f"{out.parent} holds {what}, which OUT would replace; write OUT into another folder "
                         "or give --report PATH")
    listed = report_files(out.parent) if owner else None
    for target in (out, out.with_name(out.name + ".data")):
        if not target.exists() or force == CLOBBER:
            continue
        if not (target.name in listed if listed is not None else owner == stage):
            raise UsageError(f"{target} exists and no report of this tool beside it lists it; refusing to replace "
                             "it: choose another OUT, or --clobber to replace it")
        if owner != stage and not force:
            raise UsageError(f"{target} exists and is not an earlier output of the {stage} stage; refusing to "
                             "replace it: choose another OUT, or --force to replace it")
    if report is not None:
        _check_not_input(_real(report), inputs, folder_output=False)
        if _real(report) in (out, out.with_name(out.name + ".data")):
            raise UsageError(f"--report {report} is the output model's own file; give another path")
        if Path(report).exists() and stage_of_file(Path(report)) != stage and not force:
            raise UsageError(f"--report {report} exists and is not a {stage} report; choose another path, "
                             "or --force to replace it")
        _check_writable(_real(report))
    _check_writable(out)
    return out


def stage_of_file(report: Path) -> str | None:
    try:
        return json.loads(report.read_text()).get("stage")
    except (OSError, ValueError, AttributeError):
        return None


@contextlib.contextmanager
def _created_parents(path: Path) -> Iterator[None]:
    """Create `path`'s missing parents; remove the ones this created (if still empty) on error."""
    missing = [p for p in [path.parent, *path.parent.parents] if not p.exists()]
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        yield
    except BaseException:
        for folder in missing:  # deepest first
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise


def _publish(tmp: Path) -> None:
    tmp.chmod(0o755)  # mkdtemp makes it private; the result is an ordinary folder
    for file in tmp.rglob("*"):
        file.chmod(0o755 if file.is_dir() else 0o644)


def _list_in_report(folder: Path, names: list[str]) -> None:
    """Record `names` (relative paths) as the report's FILES, when `folder` holds a report."""
    report = folder / REPORT
    if not report.is_file():
        return
    try:
        data = json.loads(report.read_text())
    except (OSError, ValueError):
        return
    if isinstance(data, dict):
        data[FILES] = sorted(n for n in names if n != REPORT)
        report.write_text(json.dumps(data, indent=2, default=str) + "\n")


def temp_prefix(name: str, kind: str = "tmp") -> str:
    """The name start of a temp folder or file of this process for OUT named `name`: `.NAME.KIND-PID-`."""
    return f".{name}.{kind}-{os.getpid()}-"


def temp_folder(out: Path, kind: str = "tmp") -> Path:
    """A new private folder beside `out`, `.OUT.KIND-PID-xxxx`: the PID says whether its run is still alive."""
    return Path(tempfile.mkdtemp(prefix=temp_prefix(out.name, kind), dir=out.parent))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def remove_dead(folder: Path, start: str) -> list[Path]:
    """Remove the temp folders and files in `folder` named `START` + `PID-xxxx` (`start` a regular expression)
    whose process no longer runs; returns them. A live process's (another run writing the same OUT) are kept, and
    so is any name this tool does not make. PIDs are reused, so a stale one may outlive a while; never the
    reverse."""
    pattern = re.compile(rf"{start}(\d+)-\w+")
    removed = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return removed
    for path in entries:
        match = pattern.fullmatch(path.name)
        if not match or path.is_symlink() or _alive(int(match.group(1))):
            continue
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                path.unlink()
        removed.append(path)
    return removed


def remove_stale(out: Path) -> list[Path]:
    """Remove the temp folders and files beside `out` (`temp_prefix`'s names) of runs that were killed."""
    return remove_dead(out.parent, rf"\.{re.escape(out.name)}\.(?:tmp|old|rejected|work)-")


class WorkFolder:
    """A stage's private work folder beside `out`, `.OUT.work-PID-xxxx` (its intermediate models): removed by
    `cleanup()` or on leaving a `with` (which gives its path), and, when the process was killed before that, by the
    next run writing OUT (`remove_stale`). Stale ones of OUT are removed first; OUT's parent is created."""

    def __init__(self, out: str | os.PathLike):
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        remove_stale(out)
        self.path = temp_folder(out, "work")

    def cleanup(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self) -> Path:
        return self.path

    def __exit__(self, *exc) -> None:
        self.cleanup()


@contextlib.contextmanager
def staged_folder(out: str | os.PathLike, stage: str, inputs: Sequence[str | os.PathLike] = (),
                  force=False, keep_log: bool = False, listed=None) -> Iterator[Path]:
    """Yield a temp folder beside OUT; on success it becomes OUT (checked by `check_folder_output`; `force` and
    `listed` as there), on error it is removed and OUT is untouched. `keep_log`: OUT also receives the run's
    third-party warnings as `log.txt` (`core.console`; pipeline stages, not release packages, whose files are
    listed). A `report.json` in the folder gets the list of every file published (`FILES`)."""
    out = check_folder_output(out, stage, inputs, force, listed)
    with _created_parents(out):
        remove_stale(out)
        tmp = temp_folder(out)
        try:
            yield tmp
            if keep_log:
                console.write_log(tmp)
            _list_in_report(tmp, held_files(tmp))
            _publish(tmp)
            replace_folder(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


def replace_folder(new: Path, out: Path) -> None:
    """Move the finished folder `new` to `out`, replacing an old `out` only after `new` is in place."""
    if not out.exists():
        new.rename(out)
        return
    old = temp_folder(out, "old")
    old.rmdir()
    out.rename(old)
    try:
        new.rename(out)
    except BaseException:
        old.rename(out)
        raise
    shutil.rmtree(old, ignore_errors=True)


def keep_rejected(tmp: Path, out: Path, stage: str) -> Path:
    """Copy a finished-but-rejected output to `OUT.rejected/` for inspection (same replace rules as OUT)."""
    rejected = out.with_name(out.name + ".rejected")
    if rejected.exists() and (not rejected.is_dir() or stage_of(rejected) != stage
                              or set(held_files(rejected)) - (report_files(rejected) or set())):
        raise UsageError(f"{rejected} exists and is not a rejected {stage} output (or holds files this tool did not "
                         "write); the rejected model was not kept (move that folder away)")
    remove_stale(rejected)
    copy = temp_folder(rejected)
    shutil.copytree(tmp, copy, dirs_exist_ok=True)
    _list_in_report(copy, held_files(copy))
    _publish(copy)
    replace_folder(copy, rejected)
    return rejected


class StagedFile:
    """A temp folder beside a single-file OUT (+ `OUT.data`, + report); `commit()` moves the files into
    place, the model last so it never points at missing data. Without `commit()` nothing appears."""

    def __init__(self, out: str | os.PathLike, stage: str, inputs: Sequence[str | os.PathLike] = (),
                 force=False, report: str | os.PathLike | None = None, keep_log: bool = False):
        """`keep_log`: OUT is `model.onnx` in a stage folder, which also receives the run's third-party
        warnings as `log.txt` (`core.console`); never for a file OUT, whose folder is the user's."""
        self.out = check_file_output(out, stage, inputs, force, report)
        self.keep_log = keep_log
        self.report_path = _real(report) if report is not None else self.out.parent / REPORT
        self._parents = _created_parents(self.out)
        self._parents.__enter__()
        remove_stale(self.out)
        self.dir = temp_folder(self.out)
        self.model_path = self.dir / self.out.name

    def __enter__(self) -> Self:
        return self

    def commit(self, report: dict) -> None:
        """Move every staged file beside OUT and write `report` (JSON) to the report path."""
        self.report_path.parent.mkdir(parents=True, exist_ok=True)
        tmp_report = self.dir / ".report.json"
        if self.keep_log:
            console.write_log(self.dir)
        if self.keep_log or self.report_path == self.out.parent / REPORT:  # a stage folder: list what it holds
            report = {**report, FILES: sorted({f.name for f in self.dir.iterdir() if f != tmp_report}
                                              | set(report_files(self.out.parent) or ()) - {REPORT})}
        tmp_report.write_text(json.dumps(report, indent=2, default=str) + "\n")
        files = sorted((f for f in self.dir.iterdir() if f != tmp_report), key=lambda p: p == self.model_path)
        for file in files:
            file.chmod(0o644)
            os.replace(file, self.out.parent / file.name)
        tmp_report.chmod(0o644)
        os.replace(tmp_report, self.report_path)

    def __exit__(self, *exc) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
        self._parents.__exit__(*exc)


def mark_result(path: Path) -> None:
    """Put this tool's mark on a result file it wrote (an .npz: the zip comment, which `np.load` ignores)."""
    with zipfile.ZipFile(path, "a") as archive:
        archive.comment = RESULT_MARK


def is_marked_result(path: Path) -> bool:
    """Whether `path` is a result file this tool wrote (`mark_result`)."""
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.comment == RESULT_MARK
    except (OSError, zipfile.BadZipFile, ValueError):
        return False


def check_result_file(out: str | os.PathLike, inputs: Sequence[str | os.PathLike] = (), force=False,
                      suffix: str | None = None, ours=None) -> Path:
    """Check a single result file OUT (e.g. embeddings.npz) before any work; returns its absolute path.

    Refused: a folder, an input file, a wrong suffix, an unwritable place, and an existing file unless
    `ours(path)` recognises it as an earlier result of the same command, or `force` is True and the file carries
    this tool's mark (`is_marked_result`: a result of another of its commands), or `force` is CLOBBER.
    """
    given = Path(out)
    real = _real(given)
    if real.is_dir():
        raise UsageError(f"OUT {given} is a folder; give a file name, e.g. {given / ('out' + (suffix or ''))}")
    if suffix and given.suffix != suffix:
        raise UsageError(f"OUT {given} must end in {suffix}")
    _check_not_input(real, inputs, folder_output=False)
    if real.exists() and force != CLOBBER and not (ours is not None and ours(real)):
        if not is_marked_result(real):
            raise UsageError(f"OUT {given} exists and was not written by this tool; refusing to replace it: choose "
                             "another OUT, or --clobber to replace it")
        if not force:
            raise UsageError(f"OUT {given} exists and is not an earlier result of this command; refusing to "
                             "replace it: choose another OUT, or --force to replace it")
    _check_writable(real)
    return real


@contextlib.contextmanager
def staged_file(out: Path) -> Iterator[Path]:
    """Yield a temp path beside `out` (same suffix); on success it replaces `out`, on error it is removed."""
    out = Path(out)
    with _created_parents(out):
        remove_stale(out)
        tmp = temp_folder(out)
        try:
            path = tmp / out.name
            yield path
            if path.suffix == ".npz":
                mark_result(path)
            path.chmod(0o644)
            os.replace(path, out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
