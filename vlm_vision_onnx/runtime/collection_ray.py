"""`embed-collection --scheduler ray`: the chunks on Ray Data, an actor pool with one ONNX Runtime session each.

Cluster: a local one started for the run (`ray.init` with this machine's CPUs, no dashboard, usage statistics
off: nothing reaches the network; about 3 s), or an existing one with `--address HOST:PORT` (the head's address
that `ray start --head` prints) or `--address auto` (the cluster this machine runs). The address is tried with a
plain TCP connection first: `ray.init` waits for minutes on an address where nothing answers. Every node needs
this project installed (`pip install '.[runtime,ray]'`) and must see PACKAGE (a folder, not a tarball) and the
images at the same paths; OUT is written by this process alone. Ray 2.60 clusters use token authentication by
default: a driver joining one by address sends the token only with `RAY_AUTH_MODE=token` (and the token in
`RAY_AUTH_TOKEN` or ~/.ray/auth_token); a refusal is one line saying so.

Dataset: one block per chunk (`ray.data.from_items`), `map_batches(batch_size=1)` on an actor pool, so each
call embeds one chunk (`collection_embedder.Embedder.rows`) and returns one block, which this process writes as one part
as it arrives (`iter_batches`, streaming: Ray Data's backpressure bounds the blocks in flight, so memory does
not grow with the collection). Each actor holds at most `IN_FLIGHT` chunks, which is what a killed run loses.

CPU shares (`shares`), from the cluster's CPU count C (Ray's logical CPUs, what it schedules by):
- head-room R = min(1, C / 4) CPU (0.5 on 2 CPUs, 1 from 4 up) stays free for Ray Data's own tasks (a read, a
  split) and other work on the cluster. This pipeline's input blocks are made by this process (no read task),
  but whatever task Ray Data or another job adds beside the pool finds R free;
- each of the A actors reserves (C - R) / A CPUs: fractional, so the pool never takes the last CPU. With whole
  CPUs (`num_cpus=1` each) 2 actors took both CPUs of a 2-core machine and a `read_images` task beside them
  never scheduled (actors pending forever, issue 19); with these shares that cannot happen on any core count;
- ONNX Runtime threads per session T: `--threads`, else min(2, C); actors A: `--actors`, else max(1, C // T).
  Reservations are logical: A x T above the CPU count is allowed (said once) but oversubscribes the cores.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import re
import signal
import socket
import threading
import warnings
from collections.abc import Iterator

from vlm_vision_onnx.core.errors import CheckFailed, UsageError
from vlm_vision_onnx.core.progress import say
from vlm_vision_onnx.runtime import collection_embedder

IN_FLIGHT = 2  # chunks queued on one actor (one running, one ready)
PROBE_S = 5.0  # seconds to wait for a TCP answer from --address


def available() -> bool:
    """Whether ray (and Ray Data) can be imported here."""
    return importlib.util.find_spec("ray") is not None


def shares(cpus: float, actors: int) -> tuple[float, float]:
    """(CPUs each of `actors` actors reserves, head-room left for Ray Data's tasks) on a cluster of `cpus`."""
    reserve = min(1.0, cpus / 4)
    return (cpus - reserve) / actors, reserve


def pool(cpus: float, actors: int | None, threads: int | None) -> tuple[int, int]:
    """(actors, ONNX Runtime threads per actor) for a cluster of `cpus` logical CPUs and the options given."""
    if threads is None:
        threads = max(1, min(2, int(cpus))) if actors is None else max(1, int(cpus) // actors)
    return actors or max(1, int(cpus) // threads), threads


def probe(address: str) -> None:
    """UsageError unless something answers TCP at HOST:PORT (`auto` is left to ray.init)."""
    if address == "auto":
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"--address {address!r} is not HOST:PORT (the address `ray start --head` prints) or `auto`")
    try:
        socket.create_connection((host, int(port)), timeout=PROBE_S).close()
    except socket.gaierror:
        raise UsageError(f"--address {address}: unknown host {host!r}; give the head node's HOST:PORT, or leave "
                         "--address out to start a local cluster") from None
    except OSError as err:
        reason = "no answer within 5 s" if isinstance(err, TimeoutError) else (err.strerror or type(err).__name__)
        raise UsageError(f"--address {address}: no Ray cluster there ({reason}); start one with `ray start --head`, "
                         "or leave --address out to start a local cluster") from None


@contextlib.contextmanager
def cluster(address: str | None) -> Iterator[float]:
    """Connect to (or start) the cluster for the block; yields its CPU count. Quiet: no dashboard, no worker logs
    on this console, no progress bars of Ray Data (the command draws its own)."""
    if address:
        probe(address)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray
    import ray.data

    options = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.ERROR}
    on_term = signal.getsignal(signal.SIGTERM)  # ray.init installs its own (it kills the process, no clean-up)
    try:
        with _native_stderr_hidden():  # Ray's C++ client retries for ~20 s, a warning line each second
            if address:
                ray.init(address=address, **options)
            else:
                ray.init(address="local", num_cpus=os.cpu_count() or 1, **options)
    except (ConnectionError, RuntimeError, ValueError) as err:
        raise UsageError(_connect_error(address, err)) from None
    if callable(on_term) and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_term)  # the command's: an interrupt that keeps the finished parts
    try:
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False
        context.print_on_execution_start = False
        yield float(ray.cluster_resources().get("CPU", 0)) or 1.0
    finally:
        ray.shutdown()


@contextlib.contextmanager
def _native_stderr_hidden() -> Iterator[None]:
    """File descriptor 2 on /dev/null for the block: C++ log lines (not Python's, see `core.console`) go there."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _connect_error(address: str | None, err: BaseException) -> str:
    """One line for a failed ray.init: the token hint when the cluster refused this one."""
    if not address:
        return f"cannot start a local Ray cluster: {str(err).strip().splitlines()[-1]}"
    text = f"{err}\n{err.__cause__ or ''}".strip()
    if "InvalidAuthToken" in text or "AuthenticationError" in text:
        return (f"cannot connect to the Ray cluster at {address}: it wants its authentication token; set "
                "RAY_AUTH_MODE=token and RAY_AUTH_TOKEN (or the token in ~/.ray/auth_token)")
    return f"cannot connect to the Ray cluster at {address}: {text.splitlines()[-1]}"


class ChunkEmbedder:
    """The Ray Data actor: one `collection_embedder.Embedder`; a call takes one row {paths, files} and returns its rows."""

    def __init__(self, **settings):
        self.embedder = collection_embedder.Embedder(**settings)

    def __call__(self, batch):
        paths, files = batch.column("paths")[0].as_py(), batch.column("files")[0].as_py()
        return self.embedder.rows(paths, files)


ANSI = re.compile(r"\x1b\[[0-9;]*m")
ACTOR_USAGE_ERROR = re.compile(r"core\.errors\.UsageError: (.+)")


def _chain(err: BaseException) -> list[BaseException]:
    found = []
    while err is not None and err not in found:
        found.append(err)
        err = getattr(err, "cause", None) or err.__cause__ or err.__context__
    return found


def ray_error_line(err: BaseException) -> tuple[bool, str]:
    """(whether it is bad input, one line) for an error of the Ray run. An actor's UsageError (a package its node
    cannot read, a model whose inputs are not the family's) reaches here as text inside Ray's own error types."""
    for exc in _chain(err):
        if isinstance(exc, UsageError) and exc.args:
            return True, str(exc.args[0])
        found = ACTOR_USAGE_ERROR.findall(ANSI.sub("", str(exc)))
        if found:
            return True, found[-1].strip()
    first = (ANSI.sub("", str(err)).strip().splitlines() or [""])[0]
    return False, f"{type(err).__name__}: {first}" if first else type(err).__name__


def run(work: list, settings: dict, cpus: float, actors: int | None, threads: int | None, write) -> None:
    """Embed the chunks of `work` on the cluster; `write(table)` each chunk's rows in the order they finish."""
    import ray.data

    actors, threads = pool(cpus, actors, threads)
    actor_cpus, reserve = shares(cpus, actors)
    if actors * threads > cpus:
        say(f"warning: {actors} actors x {threads} threads > {cpus:g} CPUs: the cores are oversubscribed",
            collection_embedder.TAG)
    say(f"Ray: {actors} actor(s) x {threads} thread(s), {actor_cpus:.3g} CPU each, {reserve:.3g} of {cpus:g} "
        "CPUs left for Ray Data's tasks", collection_embedder.TAG)
    dataset = ray.data.from_items([{"paths": paths, "files": files} for paths, files in work],
                                  override_num_blocks=len(work))
    with warnings.catch_warnings():  # ray 2.60 has no named parameter for max_restarts (pinned in the extra)
        warnings.simplefilter("ignore", DeprecationWarning)
        dataset = dataset.map_batches(
            ChunkEmbedder, batch_size=1, batch_format="pyarrow", fn_constructor_kwargs={**settings, "threads": threads},
            compute=ray.data.ActorPoolStrategy(size=actors, max_tasks_in_flight_per_actor=IN_FLIGHT),
            num_cpus=actor_cpus, max_restarts=0)
    try:
        for table in dataset.iter_batches(batch_size=None, batch_format="pyarrow"):
            write(table)
    except ray.exceptions.RayError as err:  # an actor's exception, wrapped by Ray (and Ray Data)
        usage, line = ray_error_line(err)
        if usage:
            raise UsageError(line) from None
        raise CheckFailed(f"the Ray run failed ({line}); the finished parts are kept: run the same command again "
                          "to resume") from None
