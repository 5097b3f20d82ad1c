"""A stage killed with SIGTERM (a scheduler, `kill`) leaves nothing behind: the staged temp folder goes."""

import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_sigterm_during_export_leaves_nothing(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "builders.vision", "--model", "qwen3-vl-tiny", "--out", str(out)],
                            cwd=ROOT, stderr=subprocess.PIPE, text=True)
    # wait until the staged folder exists (the model is being saved or validated), then stop the run
    deadline = time.time() + 120
    while time.time() < deadline and not list(tmp_path.glob(".out.*")):
        time.sleep(0.05)
    assert list(tmp_path.glob(".out.*")), "the export never staged its output"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "interrupted; nothing was written" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == []
