"""`vlm-vision-onnx COMMAND ...`: the console command an installed wheel provides. Each subcommand is one of the
`python -m` entries, run with the same arguments (which keep working: `release` and `runtime` by their full names
installed, by their short names too in a checkout, vlm_vision_onnx/__init__.py):

| subcommand | same as |
|---|---|
| export | python -m builders.vision (needs the export extra: torch) |
| surgery | python -m surgery |
| quantize | python -m quantize |
| release | python -m vlm_vision_onnx.release (checkout: python -m release) |
| runtime | python -m vlm_vision_onnx.runtime (checkout: python -m runtime) |

A subcommand's module is imported only when it runs: `vlm-vision-onnx runtime embed` never imports torch.
"""

from __future__ import annotations

import importlib
import sys

#: {subcommand: (module with `main(argv) -> int`, what it does)}.
COMMANDS = {
    "export": ("builders.vision", "export a vision encoder to ONNX, validated against the eager model"),
    "surgery": ("surgery.cli", "inspect and fix ONNX graphs (stage, debake, audit, doctor, fix-dims, ...)"),
    "quantize": ("quantize.__main__", "optimize, int8, int4, fp16, q4f16, ov-int8 and qnn stages"),
    "release": ("vlm_vision_onnx.release.__main__", "release packages (package, speed, genai)"),
    "runtime": ("vlm_vision_onnx.runtime.__main__",
                "run a package: verify, embed, embed-collection, encode, npu-check, ..."),
}
PROG = "vlm-vision-onnx"


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"usage: {PROG} COMMAND [ARGS ...]   ({PROG} COMMAND --help for a command's arguments)", "",
             "commands:"]
    lines += [f"  {name:<{width}}  {what} (python -m {module.removesuffix('.__main__').removesuffix('.cli')})"
              for name, (module, what) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"error: unknown command {name!r}; the commands are {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    module = COMMANDS[name][0]
    try:
        entry = importlib.import_module(module)
    except ImportError as err:  # e.g. `export` where the export extra (torch) is not installed
        print(f"error: `{PROG} {name}` needs {err.name or 'a module'} ({err}); install the extra it needs "
              "(export: pip install 'vlm-vision-onnx[export]')", file=sys.stderr)
        return 2
    return entry.main(rest)


if __name__ == "__main__":
    sys.exit(main())
