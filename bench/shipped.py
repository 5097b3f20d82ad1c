"""`python -m bench.shipped [--model qwen3-vl-2b] [--readme README.md]`: the README's table of what `make export` ships.

The variants a release package holds are the fp32 `optimized` stage and the `int8` / `int4` stages built with the
flags the model's family ships (`families.shipping.Shipping.flags`, what `make export` runs with `--shipped`). Their measured speed and accuracy come from the last quantization sweep,
`bench/results/sweep-MODEL.json` (`python -m bench.sweep --model MODEL`, part of `make bench`): latency of one
448x448 image on one thread against the optimized fp32 model, size, and the worst per-token cosine against fp32.
A shipped stage is found in the sweep by its options (both flag lists parsed by `python -m quantize`'s own
parser, so `--outliers report` given or defaulted is the same point); flags that change no weight
(`--min-cosine`, `--worst-case-budget`) are left out of the match. Options that match no measured point are an
error: the table never shows figures of another configuration.

The table replaces the text between the README's markers `<!-- shipped-variants:begin -->` and
`<!-- shipped-variants:end -->`; the source file and the CPU it was measured on are named under it.
`--check` writes nothing and exits 1 when the README's block differs from what the results give.
Exit 2 (one `error:` line) when the markers, the model's config or the sweep results are missing.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from vlm_vision_onnx.core.errors import EXIT_OK, CheckFailed, Parser, UsageError, main_wrapper
from vlm_vision_onnx.core.machine import describe
from vlm_vision_onnx.release.variants import QUANTIZED, package_path

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- shipped-variants:begin -->", "<!-- shipped-variants:end -->"
#: Options of `python -m quantize` that change what is checked or reported, not the model written.
NOT_THE_MODEL = ("input", "out", "threads", "force", "shipped", "verbose", "min_cosine", "worst_case_budget")
FP32_LABEL = "fp32 (optimized)"


def parse_args(argv: list[str] | None):
    parser = Parser(prog="python -m bench.shipped", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen3-vl-2b", help="build name the sweep ran on (default qwen3-vl-2b)")
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md", help="file holding the markers")
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "results",
                        help="folder holding sweep-MODEL.json (default bench/results)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 when the README's table differs from the results")
    return parser.parse_args(argv)


def shipping(model: str | None = None, config: Path | None = None):
    """What the family of the model (a config name) or config file ships (`families.shipping.Shipping`)."""
    from builders.config import load_config
    from vlm_vision_onnx.families import family

    loaded = load_config(model, config)
    return family(loaded.family, loaded.path).shipping


def shipped_flags(model: str | None = None, config: Path | None = None) -> dict[str, list[str]]:
    """{stage: flags} `make export` runs int8 and int4 with for the model (a config name) or config file: its family's
    declared flags."""
    declared = shipping(model, config)
    return {stage: declared.stage_flags(stage) for stage in QUANTIZED}


def options(stage: str, flags: list[str]) -> dict:
    """The stage's options as `python -m quantize STAGE` resolves them (defaults filled in), model-changing only."""
    from dataclasses import asdict

    from quantize.__main__ import OPTIONS
    from quantize.__main__ import parse_args as quantize_args

    try:
        parsed = quantize_args([stage, "IN", "OUT", *flags])
        resolved = {**vars(parsed), **asdict(OPTIONS[stage].from_args(parsed))}
    except UsageError as err:
        raise UsageError(f"{stage} flags {' '.join(flags)!r}: {err}") from None
    return {k: v for k, v in resolved.items() if k not in NOT_THE_MODEL}


def read_sweep(results: Path, model: str) -> tuple[Path, dict]:
    path = results / f"sweep-{model}.json"
    if not path.is_file():
        raise UsageError(f"{path} not found: run `python -m bench.sweep --model {model}` (make bench) first")
    try:
        sweep = json.loads(path.read_text())
        sweep["rows"]
    except (ValueError, KeyError, TypeError):
        raise UsageError(f"{path} is not a sweep result (no rows): re-run `python -m bench.sweep --model {model}`") \
            from None
    return path, sweep


def shipped_rows(sweep: dict, flags: dict[str, list[str]], source: Path) -> list[tuple[str, dict, list[str]]]:
    """[(stage, sweep row, shipped flags)] for fp32 (optimized), int8 and int4."""
    rows = sweep["rows"]
    fp32 = next((r for r in rows if r.get("stage") == "fp32" or r.get("label") == FP32_LABEL), None)
    if fp32 is None:
        raise UsageError(f"{source} has no fp32 row: re-run the sweep")
    found = [("optimized", fp32, [])]
    for stage, stage_flags in flags.items():
        wanted = options(stage, stage_flags)
        match = next((r for r in rows if r.get("stage") == stage and options(stage, r["flags"]) == wanted), None)
        if match is None:
            raise UsageError(f"the shipped {stage} flags ({' '.join(stage_flags)}) match no point measured in "
                             f"{source}: re-run `python -m bench.sweep` with that point, or ship a measured one")
        found.append((stage, match, stage_flags))
    return found


def machine_line(facts: dict) -> str:
    units = ", ".join(f"{name} {'yes' if facts.get(key) else 'no'}"
                      for name, key in (("AVX-512", "avx512"), ("VNNI", "vnni"), ("AMX", "amx")) if key in facts)
    return describe(facts) + (f" ({units})" if units else "")


def table(sweep: dict, rows: list[tuple[str, dict, list[str]]], source: Path, model: str) -> str:
    """The markdown between the markers (without them)."""
    size, threads = sweep.get("size", "448x448"), sweep.get("threads", 1)
    lines = [(f"| variant (`make export` stage) | file in the package | MiB | s per {size} image | vs fp32 "
              "| min per-token cosine vs fp32 | flags |"),
             "|---|---|---:|---:|---:|---:|---|"]
    for stage, row, flags in rows:
        cosine = "1 (reference)" if stage == "optimized" else f"{row['token_cosine']:.5f}"
        lines.append(f"| {'fp32' if stage == 'optimized' else stage} (`build/{model}/{stage}/`) | "
                     f"`{package_path(stage)}` | {row['mib']:.0f} | {row['median_s']:.3f} | {row['speedup']:.2f}× | "
                     f"{cosine} | {'`' + ' '.join(flags) + '`' if flags else ''} |")
    cases = ", ".join(sweep.get("cases", []))
    when = f"{sweep.get('started', '?')} – {sweep.get('finished', '?')}"
    relative = source.relative_to(ROOT) if source.is_relative_to(ROOT) else source
    lines += ["", (f"Source: `{relative}`, measured by `python -m bench.sweep --model {model}` ({when}) on "
                   f"{machine_line(sweep.get('machine', {}))}; {threads} thread(s), medians of "
                   f"{sweep.get('reps', '?')} rounds interleaved across all points. Cosine: the worst output row "
                   f"against fp32 over the layouts {cases}, on the model's own weights ({own_weights(sweep)}; random "
                   "weights say little of a trained checkpoint's accuracy). Written by `python -m bench.shipped`.")]
    return "\n".join(lines)


def own_weights(sweep: dict) -> str:
    """The swept model's own weights from the sweep's `weights` note ("random (seed 0) and outlier stress" ->
    "random (seed 0)"): the stress copies are separate measurements, not in this table."""
    return re.split(r",| and ", str(sweep.get("weights", "see the sweep's JSON")))[0].strip()


def replace_block(text: str, block: str, readme: Path) -> str:
    begin, end = text.find(BEGIN), text.find(END)
    if begin < 0 or end < 0 or end < begin:
        raise UsageError(f"{readme} has no `{BEGIN}` ... `{END}` markers (in that order): add them where the "
                         "shipped-variants table goes")
    return text[:begin + len(BEGIN)] + "\n" + block + "\n" + text[end:]


def main(argv: list[str] | None = None) -> int:
    def body() -> int:
        args = parse_args(argv)
        if not args.readme.is_file():
            raise UsageError(f"{args.readme} not found: give the README holding the markers with --readme")
        text = args.readme.read_text()
        if BEGIN not in text or END not in text:
            replace_block(text, "", args.readme)  # the markers are checked before any other work
        source, sweep = read_sweep(args.results, args.model)
        rows = shipped_rows(sweep, shipped_flags(args.model), source)
        new = replace_block(text, table(sweep, rows, source.resolve(), args.model), args.readme)
        if args.check:
            if new != text:
                raise CheckFailed(f"{args.readme}'s shipped-variants table differs from what {source} gives: run "
                                  "`python -m bench.shipped`")
            print(f"{args.readme}: shipped-variants table matches {source}")
            return EXIT_OK
        if new != text:
            args.readme.write_text(new)
        print(f"wrote the shipped-variants table of {args.readme} from {source}")
        return EXIT_OK

    return main_wrapper(body)


if __name__ == "__main__":
    sys.exit(main())
