"""`runtime.session_opening.SessionOpening`: the session opened in the background is the one handed out when the path
is still that one; another path opens its own; the background open's error surfaces in the caller; leaving the
block waits for the thread. Engines here are stand-ins that record what they open (the real ones: test_embed.py)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from vlm_vision_onnx.runtime.session_opening import SessionOpening


@dataclass(frozen=True)
class StandIn:
    """An engine that records (name, model, threads, thread name) per open, after `delay_s`; `fails`: it raises.
    Equal by name, as engines are by what they run."""
    name: str
    log: list = field(default_factory=list, compare=False)
    delay_s: float = field(default=0.0, compare=False)
    fails: bool = field(default=False, compare=False)

    def open(self, model, threads=None):
        time.sleep(self.delay_s)
        if self.fails:
            raise RuntimeError(f"{self.name} cannot open {model}")
        self.log.append((self.name, Path(model).name, threads, threading.current_thread().name))
        return (self.name, Path(model).name)


def test_the_same_path_gets_the_background_session():
    log = []
    engine = StandIn("ort", log, delay_s=0.05)
    with SessionOpening(engine, Path("m.onnx"), 2) as opening:
        assert opening.session(StandIn("ort", log), Path("m.onnx")) == ("ort", "m.onnx")
    assert log == [("ort", "m.onnx", 2, "open-session")]  # opened once, in the background thread


def test_another_path_opens_its_own_session():
    log = []
    with SessionOpening(StandIn("ov", log), Path("m.xml"), 1) as opening:
        assert opening.session(StandIn("ort", log), Path("m_int8.onnx")) == ("ort", "m_int8.onnx")
    assert [entry[:3] for entry in log] == [("ov", "m.xml", 1), ("ort", "m_int8.onnx", 1)]
    assert log[1][3] == threading.current_thread().name  # the second one in the caller's thread


def test_the_background_error_is_raised_by_session_only_for_its_path():
    with (SessionOpening(StandIn("ort", fails=True), Path("bad.onnx"), None) as opening,
          pytest.raises(RuntimeError, match="ort cannot open bad.onnx")):
        opening.session(StandIn("ort"), Path("bad.onnx"))
    log = []
    with SessionOpening(StandIn("ov", fails=True), Path("bad.xml"), None) as opening:
        assert opening.session(StandIn("ort", log), Path("good.onnx")) == ("ort", "good.onnx")


def test_leaving_the_block_waits_for_the_thread():
    with (pytest.raises(ValueError, match="bad image"),
          SessionOpening(StandIn("ort", [], delay_s=0.2), Path("m.onnx"), None) as opening):
        raise ValueError("bad image")
    assert not opening._thread.is_alive()


class Preparing:
    """A session that records the feeds it is told to prepare, and the thread; `fails`: prepare raises."""

    def __init__(self, fails: bool = False):
        self.prepared, self.fails = [], fails

    def prepare(self, feeds):
        if self.fails:
            raise RuntimeError("cannot compile for these")
        self.prepared.append((feeds, threading.current_thread().name))


@dataclass(frozen=True)
class Opens:
    """An engine whose open gives `session`."""
    session: Preparing

    def open(self, model, threads=None):
        return self.session


def test_the_session_prepares_for_the_warm_inputs_in_the_background():
    """`warm` inputs: the opened session compiles for them in the thread (`OpenVINOSession.prepare`); a prepare
    that fails leaves the session opened (its first run compiles and raises what is wrong)."""
    warm = {"grid_thw": [[1, 16, 16]]}
    engine = Opens(Preparing())
    with SessionOpening(engine, Path("m.xml"), 2, warm) as opening:
        session = opening.session(engine, Path("m.xml"))
    assert session.prepared == [(warm, "open-session")]
    failing = Opens(Preparing(fails=True))
    with SessionOpening(failing, Path("m.xml"), 2, warm) as opening:
        assert opening.session(failing, Path("m.xml")) is failing.session
