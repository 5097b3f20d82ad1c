"""`python -m bench.loop_baseline BUILD OUT`: the build's optimized and int8 files with every segment-attention If
replaced by its else-branch (the Loop over segments, as every pack ran before attention of one-size segments ran
batched), into OUT/{optimized,int8}/model.onnx: the "before" of a no-regression check in one run
(`python -m bench.runtimes --build BUILD --baseline OUT --groups baseline`), without a second export.

The If's condition only picks a branch; both branches compute the same attention (tests/test_segment_attention.py),
so inlining the else-branch gives exactly the form of the previous export (the Loop of one MultiHeadAttention per
query chunk, padded to Q rows and compressed after).
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import onnx_ir as ir

from core import onnx_io
from core.progress import say

TAG = "loop-baseline"


def inline_else(model: ir.Model) -> int:
    """Replace every main-graph If by its else_branch's nodes, in place; return how many."""
    count = 0
    for node in [n for n in model.graph if n.op_type == "If"]:
        branch = node.attributes["else_branch"].as_graph()
        moved = list(branch)
        for inner in moved:
            branch.remove(inner)
        model.graph.insert_before(node, moved)
        for out, result in zip(node.outputs, branch.outputs):
            out.replace_all_uses_with(result, replace_graph_outputs=True)
        model.graph.remove(node, safe=True)
        count += 1
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.loop_baseline", description=__doc__.splitlines()[0])
    parser.add_argument("build", type=Path, help="build/MODEL of `make export` (optimized and int8 stages)")
    parser.add_argument("out", type=Path, help="a new folder for OUT/{optimized,int8}")
    args = parser.parse_args(argv)
    build, out = args.build, args.out
    for stage in ("optimized", "int8"):
        source = onnx_io.model_path(build / stage)
        model = ir.load(str(source))
        count = inline_else(model)
        (out / stage).mkdir(parents=True, exist_ok=True)
        target = out / stage / "model.onnx"
        ir.save(model, str(target), external_data="model.onnx.data" if source.with_suffix(".onnx.data").exists()
                or any(source.parent.glob("*.data")) else None)
        if (build / stage / "report.json").exists():
            shutil.copy(build / stage / "report.json", out / stage / "report.json")
        say(f"{target}: {count} If(s) replaced by their Loop branch", TAG)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
