"""Shared helpers of the quantize tests (no tests here). The tiny exports come from conftest's
`tiny_exports` fixture (both exporters, built once per session)."""

from pathlib import Path

import numpy as np
import onnx_ir as ir
import yaml

from core import parity
from core.session import open_session
from families import QWEN3_VL, validation

ROOT = Path(__file__).resolve().parents[1]
TINY = yaml.safe_load((ROOT / "configs" / "qwen3-vl-tiny.yaml").read_text())["vision"]
DEPTH, HEADS = TINY["depth"], TINY["num_heads"]
TOLERANCE = 1e-4


def ops(model: ir.Model, op_type: str) -> list[ir.Node]:
    """Nodes of `op_type` in the main graph."""
    return [n for n in model.graph if n.op_type == op_type]


def all_ops(model: ir.Model, op_type: str) -> list[ir.Node]:
    """Nodes of `op_type`, inside Loop bodies too (the per-frame attention)."""
    return [n for n in ir.traversal.RecursiveGraphIterator(model.graph) if n.op_type == op_type]


class Checker:
    """Runs models at the export's validation layouts against the export's outputs in ORT."""

    def __init__(self, model_file: Path):
        self.layouts = validation.from_report(model_file, QWEN3_VL)
        assert self.layouts and len(self.layouts) >= 10
        self.inputs = validation.layout_inputs(QWEN3_VL, self.layouts, {"patch_dim": "1536"})
        self.reference = parity.run_all(open_session(model_file, 1), self.inputs)

    def max_abs(self, model: ir.Model) -> float:
        """Largest max abs diff over layouts and outputs (asserts every layout is within tolerance)."""
        records = parity.check(open_session(model, 1), self.layouts, self.inputs, self.reference,
                               TOLERANCE)
        bad = [r["case"] for r in records if not r["ok"]]
        assert not bad, f"parity fails at {bad}"
        return parity.worst(records)["max_abs"]


def run_graph(model: ir.Model, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return open_session(model, 1).run(None, feeds)
