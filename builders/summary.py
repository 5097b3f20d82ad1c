"""`python -m builders.summary REPORT.json [...]`: a stage report's validation as a markdown table.

One row per case: its layout (the family's facts: Qwen3-VL grid_thw and patch count, Phi-4-multimodal
image sizes and crop layouts), and for each output the worst max abs diff, max rel diff (relative
to the output's scale) and lowest cosine against the eager model.
"""

import json
import sys
from pathlib import Path

from vlm_vision_onnx.core.errors import Parser

NOT_LAYOUT = ("case", "outputs", "ok", "error")


def table(report: dict) -> str:
    """Markdown for one export report."""
    head = (f"`{report['model']}` via {report['exporter']}, weights {report['weights']}, "
            f"tolerance {report['tolerance']:g} x max(1, output scale): "
            f"{'all passed' if report['validation']['passed'] else 'FAILED'}\n\n")
    rows = ["| case | layout | max abs diff | max rel diff | min cosine | ok |", "|---|---|---|---|---|---|"]
    for case in report["validation"]["cases"]:
        metrics = list(case.get("outputs", {}).values())
        if metrics:
            worst = (f"{max(m['max_abs'] for m in metrics):.2e} | {max(m['max_rel'] for m in metrics):.2e} | "
                     f"{min(m['cosine'] for m in metrics):.7f}")
        else:
            worst = f"{case.get('error', 'n/a')} | | "
        layout = ", ".join(f"{k} {json.dumps(v)}" for k, v in case.items() if k not in NOT_LAYOUT)
        rows.append(f"| {case['case']} | {layout} | {worst} | "
                    f"{'yes' if case['ok'] else 'NO'} |")
    return head + "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m builders.summary",
                    description="Markdown table of the validation cases of export report(s).")
    parser.add_argument("reports", nargs="+", metavar="REPORT.json", help="an export stage's report.json")
    args = parser.parse_args(argv)
    for path in args.reports:
        print(table(json.loads(Path(path).read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
