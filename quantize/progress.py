"""Progress lines with timings for the long steps of a stage, printed to stderr."""

import contextlib
import sys
import time


def say(message: str) -> None:
    """Print one progress line."""
    print(f"[quantize] {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def step(name: str, timings: dict[str, float]):
    """Announce `name`, run the body, print its wall time and record it in `timings` (seconds)."""
    say(f"{name} ...")
    start = time.perf_counter()
    yield
    timings[name] = round(time.perf_counter() - start, 3)
    say(f"{name}: done in {timings[name]:.1f} s")
