"""Writing stage outputs atomically: nothing half-written on error."""

import contextlib
import shutil
import tempfile
from pathlib import Path

from core.errors import UsageError


@contextlib.contextmanager
def staged_dir(out: Path):
    """Yield a temp folder beside `out`; on success it replaces `out`, on error it is removed."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"output {out} exists and is not a folder (OUT is a stage folder)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    tmp.chmod(0o755)  # mkdtemp makes it private; the result is an ordinary folder
    for file in tmp.iterdir():
        file.chmod(0o644)
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
