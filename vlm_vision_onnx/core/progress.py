"""Progress lines with timings, printed to stderr (results go to stdout; third-party output does not reach the
console, `core.console`), shared by every stage."""

import contextlib
import threading
import time
from collections.abc import Iterator

from vlm_vision_onnx.core import console

TAG = "vision-onnx"


def say(message: str, tag: str = TAG) -> None:
    """Print one progress line, prefixed with the stage's tag."""
    print(f"[{tag}] {message}", file=console.stream(), flush=True)


@contextlib.contextmanager
def step(name: str, timings: dict | None = None, key: str | None = None, tag: str = TAG,
         announce_after: float = 2.0) -> Iterator[None]:
    """Run the body as the step `name`; print its wall time and record it as timings[key or name] (s).

    A step still running after `announce_after` seconds is announced then (`name ...`), so long steps
    show progress while short ones print a single line.
    """
    timer = threading.Timer(announce_after, say, [f"{name} ...", tag])
    timer.daemon = True
    start = time.perf_counter()
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
    seconds = time.perf_counter() - start
    if timings is not None:
        timings[key or name] = round(seconds, 3)
    say(f"{name}: {seconds:.1f} s", tag)
