"""The checkout's Python source read as text (parsed, never imported): the imports of a module and the closure of
modules one entry point can reach. The layering test checks the imports; the build cache (tests/builds.py) keys a
build by the code its command can run.
"""

import ast
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: A string that may name a module: dotted identifiers, optionally `:NAME` after them.
MODULE_STRING = re.compile(r"^[a-z_]\w*(\.\w+)+(:.*)?$")


def _resolve(node: ast.ImportFrom, package: str) -> str:
    """The module a `from ... import` statement of a module of `package` reads from, relative levels resolved."""
    if not node.level:
        return node.module or ""
    base = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _statements(tree: ast.AST, package: str) -> list[tuple[int, str, list[str]]]:
    """(line, module, names) of every import statement of a module of `package`: `import a.b` gives ("a.b", []),
    `from .a import x, y` ("<package>.a", ["x", "y"]), relative imports resolved."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.lineno, _resolve(node, package), [alias.name for alias in node.names]))
    return found


def imported_modules(path: Path, package: str) -> list[tuple[int, str]]:
    """(line, module) of every import statement in `path` (a module of `package`), relative imports resolved."""
    return [(line, module) for line, module, _ in _statements(ast.parse(path.read_text(), filename=str(path)),
                                                              package)]


def module_file(module: str, root: Path = ROOT) -> Path | None:
    """The file of a checkout module (`a.b` -> a/b.py or a/b/__init__.py), None for any other module."""
    base = root.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _reached(path: Path, package: str) -> list[str]:
    """Every module `path` imports, the `a.b.name` of each `from a.b import name` (the name may be a module), and
    every string constant that names a module (`"builders.qwen_vl.family:qwen2.5-vl"`, imported by importlib)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = [node.value.split(":")[0] for node in ast.walk(tree)
             if isinstance(node, ast.Constant) and isinstance(node.value, str) and MODULE_STRING.match(node.value)]
    for _, module, names in _statements(tree, package):
        found += [module] + [f"{module}.{name}" for name in names]
    return found


@functools.cache
def module_closure(*entries: str, root: Path = ROOT) -> tuple[Path, ...]:
    """Every checkout file the modules `entries` can import, at top level or inside a function, transitively, with
    the packages' `__init__.py` files on the way (Python runs them): the code a command of these entries may run."""
    seen: set[Path] = set()
    todo = list(entries)
    while todo:
        parts = todo.pop().split(".")
        for depth in range(1, len(parts) + 1):  # a.b.c runs a/__init__.py, a/b/__init__.py, then a/b/c.py
            path = module_file(".".join(parts[:depth]), root)
            if path is None or path in seen:
                continue
            seen.add(path)
            package = ".".join(parts[:depth] if path.name == "__init__.py" else parts[:depth - 1])
            todo += [name for name in _reached(path, package) if name]
    return tuple(sorted(seen))
