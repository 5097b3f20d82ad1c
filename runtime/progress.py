"""Progress lines with timings for long steps, printed to stderr (shared by every stage)."""

import contextlib
import sys
import time


def say(message: str, tag: str = "vision-onnx") -> None:
    """Print one progress line, prefixed with the stage's tag."""
    print(f"[{tag}] {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def step(name: str, timings: dict | None = None, key: str | None = None, tag: str = "vision-onnx"):
    """Announce `name`, run the body, print its wall time and record it as timings[key or name] (s)."""
    say(f"{name} ...", tag)
    start = time.perf_counter()
    yield
    seconds = time.perf_counter() - start
    if timings is not None:
        timings[key or name] = round(seconds, 3)
    say(f"{name}: done in {seconds:.1f} s", tag)
