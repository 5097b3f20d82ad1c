"""A progress bar for long runs over many items, on the command's console stream (`core.console.stream`).

`[TAG] [#######.......] 120/2,000 images, 3 errors, 4.2 images/s, 7m 27s left`: redrawn in place on a
terminal; elsewhere (a log, a CI job) one such line every `every_s` seconds and one at the end.
"""

from __future__ import annotations

import time

from vlm_vision_onnx.core import console

WIDTH = 24


def duration(seconds: float) -> str:
    """'45s', '7m 27s', '3h 05m'."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"


class Bar:
    """Counts items done (and failed) out of `total` since the bar was made; `update(done, failed)` adds."""

    def __init__(self, total: int, tag: str, unit: str = "images", every_s: float = 10.0):
        self.total, self.tag, self.unit, self.every_s = total, tag, unit, every_s
        self.done = self.failed = 0
        self.start = self.last = time.perf_counter()
        stream = console.stream()
        self.live = bool(getattr(stream, "isatty", lambda: False)())

    def line(self) -> str:
        elapsed = time.perf_counter() - self.start
        rate = self.done / elapsed if elapsed > 0 else 0.0
        filled = int(WIDTH * self.done / self.total) if self.total else WIDTH
        left = duration((self.total - self.done) / rate) + " left" if rate > 0 else "time left unknown yet"
        errors = f", {self.failed} error{'s' if self.failed != 1 else ''}" if self.failed else ""
        return (f"[{self.tag}] [{'#' * filled}{'.' * (WIDTH - filled)}] {self.done:,}/{self.total:,} {self.unit}"
                f"{errors}, {rate:.2f} {self.unit}/s, {left if self.done < self.total else duration(elapsed) + ' in all'}")

    def update(self, done: int, failed: int = 0) -> None:
        self.done += done
        self.failed += failed
        now = time.perf_counter()
        if self.live:
            print("\r" + self.line(), end="", file=console.stream(), flush=True)
        elif now - self.last >= self.every_s:
            print(self.line(), file=console.stream(), flush=True)
        else:
            return
        self.last = now

    def close(self) -> None:
        """The final state: ends the in-place line, or prints the last line."""
        print(("\r" if self.live else "") + self.line(), file=console.stream(), flush=True)
