"""audit: prove that no grid-specific constant remains (the check after debake).

Uses the same rules as debake (`surgery.grid_scan.find`); any finding, fixable or not, fails the audit.
"""

from __future__ import annotations

import onnx_ir as ir

from surgery.grid import Grid
from surgery.grid_scan import collisions, find


def audit(model: ir.Model, grid: Grid) -> dict:
    """{"grid", "merge", "findings": [...], "collisions": [...], "clean": bool} against the export grid."""
    findings = find(model, grid)
    return {"grid": grid.to_json(), "merge": grid.merge, "findings": [f.to_json() for f in findings],
            "collisions": collisions(model, grid), "clean": not findings}
