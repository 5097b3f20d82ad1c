"""A session opening in a background thread while Python goes on (torch-free).

ONNX Runtime's load and graph optimization of a model file and OpenVINO's compile are C++ that releases the GIL, so
they run beside Python's own loading (transformers, the processor, the images): `runtime embed` starts a session
this way as soon as it knows its path, and a process's start costs about the longer of the two, not their sum
(docs/benchmarks.md, the process race on the AMX Xeon).

    with SessionOpening(engine, model, threads, warm) as opening:
        ...                                    # Python's loading
        sess = opening.session(engine, model)  # the one opened, or (when the path changed) a new one

`warm`: inputs like those the call will run (their shapes and integer values; e.g. the package's first smoke
input, `runtime.embed.warm_feeds`): a session that compiles per input pattern (OpenVINO's, for a file whose Ifs it
specializes: `OpenVINOSession.prepare`) compiles for theirs in the thread too, so that the compile also hides
behind Python's loading; where that fails, the session opens anyway and the first run compiles (and says why).

Leaving the block waits for the thread, so an error raised meanwhile never leaves a session opening behind.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Self

from vlm_vision_onnx.core.engine import Engine
from vlm_vision_onnx.core.errors import UsageError


class SessionOpening:
    """A session of `model` on `engine` (`threads`: intra-op) opening in a background thread."""

    def __init__(self, engine: Engine, model: Path, threads: int | None, warm: dict | None = None):
        self.engine, self.model, self.threads, self.warm = engine, model, threads, warm
        self._session = None  # once open; None again when handed out or dropped
        self._error: Exception | None = None
        self._thread = threading.Thread(target=self._open, name="open-session")
        self._thread.start()

    def _open(self) -> None:
        try:
            self._session = self.engine.open(self.model, self.threads)
        except Exception as err:  # noqa: BLE001 - raised in the caller's thread by `session`
            self._error = err
            return
        if self.warm is not None and hasattr(self._session, "prepare"):
            try:
                self._session.prepare(self.warm)
            except (UsageError, RuntimeError, ValueError):
                pass  # the first run compiles for its own inputs, and raises what is wrong

    def session(self, engine: Engine, model: Path):
        """A session of `model` on `engine`: the one opened here when it is that (waiting for it; its error, if any,
        raised here), else a new one, this one dropped once open."""
        self._thread.join()
        sess, self._session = self._session, None
        if (engine, model) != (self.engine, self.model):
            del sess
            return engine.open(model, self.threads)
        if self._error is not None:
            raise self._error
        return sess

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self._thread.join()
        self._session = None
