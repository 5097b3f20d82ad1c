"""The layering of docs/architecture.md, read from the source: the product never imports the benchmarks, and no
two product modules import each other (directly or around a circle).

Every module of the product packages is parsed (not imported), and each `import X` / `from X import ...`
(top level or inside a function) is checked. A user who installs the package gets no benchmark code,
and a change to a benchmark cannot break an export, a quantization or a release.
"""

import ast
from pathlib import Path

import pytest

from tests.source import ROOT, imported_modules

PRODUCT = ("vlm_vision_onnx", "builders", "surgery", "quantize")
#: Packages only the development tree has: the product may not import them.
NOT_PRODUCT = ("bench", "tests", "tools")


def product_files() -> list[Path]:
    return sorted(f for pkg in PRODUCT for f in (ROOT / pkg).rglob("*.py"))


def test_the_walk_sees_every_product_package():
    packages = {f.relative_to(ROOT).parts[0] for f in product_files()}
    assert packages == set(PRODUCT)


def package_of(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).parts[:-1])


def test_imported_modules_reads_function_level_and_relative_imports(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import os\n\ndef f():\n    from bench.timing import pixels\n\nfrom . import errors\n"
                     "from ..release import stages\n")
    assert sorted(imported_modules(probe, "core.sub")) == [(1, "os"), (4, "bench.timing"), (6, "core.sub"),
                                                          (7, "core.release")]


@pytest.mark.parametrize("path", product_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_product_never_imports_bench(path):
    bad = [f"line {line}: {module}" for line, module in imported_modules(path, package_of(path))
           if module.split(".")[0] in NOT_PRODUCT]
    assert not bad, f"{path.relative_to(ROOT)} imports development-only code: {', '.join(bad)}"


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def import_graph() -> dict[str, set[str]]:
    """{product module: the product modules it imports, at any level}; `from X import Y` counts X.Y when that is a
    module. Edges into a package's __init__ are left out (importing a subpackage runs it: not a dependency)."""
    modules = {module_name(f): f for f in product_files()}
    graph = {}
    for name, path in modules.items():
        found = {m for _, m in imported_modules(path, package_of(path)) if m in modules}
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found |= {f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in modules}
        graph[name] = {m for m in found - {name} if modules[m].name != "__init__.py"}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while component[-1:] != [v]:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_circles_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circle_in_the_product():
    """Function-level imports count: a circle hidden in a function is still two modules that need each other
    (runtime/collection.py and collection_ray.py were one; the chunk's work is runtime/collection_embedder.py)."""
    graph = import_graph()
    assert "vlm_vision_onnx.runtime.collection_embedder" in graph["vlm_vision_onnx.runtime.collection_ray"]
    assert circles(graph) == []


def test_no_test_module_imports_another():
    """Shared test helpers live in tests/support.py and shared fixtures in tests/conftest.py: a test module that
    imports another runs that module's fixtures and constants twice and ties the two together."""
    bad = []
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
                     if isinstance(node, ast.ImportFrom) else
                     [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            bad += [f"{path.name}:{node.lineno} {name}" for name in names if name.startswith("tests.test_")]
    assert not bad, bad
