"""The documentation stays true to the repository: links resolve, quoted commands exist, the README stays short,
and its shipped-variants table is what `python -m bench.shipped` makes of the committed results.

- every relative link in README.md and docs/*.md names an existing file, and a `#anchor` names a heading of
  the target (GitHub's slugs);
- every `python -m MODULE [SUBCOMMAND]` quoted there accepts `--help` (exit 0), run once per unique pair as
  `python -m` runs it, all pairs in one interpreter from the repository root (tests/help_runner.py) (a SUBCOMMAND is only looked for after a package with a
  `__main__.py`: `python -m surgery debake`, not `python -m runtime.sample_photos photos`);
- README.md is at most README_MAX_BYTES and every page of DOC_PAGES exists.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench import shipped

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
README_MAX_BYTES = 12_000
DOC_PAGES = ("export", "surgery", "quantization", "packages", "benchmarks", "errors", "architecture")
DOCS = [README] + sorted((ROOT / "docs").glob("*.md"))
HELP_TIMEOUT_S = 120

FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`+[^`\n]*`+")
LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.MULTILINE)
COMMAND = re.compile(r"python -m ([A-Za-z_][\w.]*\w)(?:[ \t]+([a-z][a-z0-9_-]*)(?=[\s`)|]|$))?")


def prose(text: str) -> str:
    """`text` without fenced code blocks and inline code spans (links there are not links)."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: markup and punctuation dropped (except - and _), lowercase, spaces -> -."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading anchor of a markdown page, duplicates numbered as GitHub does (`name`, `name-1`, ...)."""
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(FENCE.sub("", page.read_text())):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links() -> list[tuple[str, str]]:
    """(page relative to the repo, link target) of every relative link."""
    found = []
    for page in DOCS:
        for target in LINK.findall(prose(page.read_text())):
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: are not checked
                found.append((str(page.relative_to(ROOT)), target))
    return found


def commands() -> list[tuple[str, str | None]]:
    """Unique (module, subcommand or None) of every `python -m ...` in the pages."""
    found: dict[tuple[str, str | None], None] = {}
    for page in DOCS:
        for module, sub in COMMAND.findall(page.read_text()):
            is_package = (ROOT / module.replace(".", "/") / "__main__.py").is_file()
            found[(module, sub if sub and is_package else None)] = None
    return list(found)


def test_readme_is_short():
    size = len(README.read_bytes())
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes (limit {README_MAX_BYTES}): move detail to docs/"


@pytest.mark.parametrize("name", DOC_PAGES)
def test_doc_page_exists_and_readme_links_it(name):
    assert (ROOT / "docs" / f"{name}.md").is_file(), f"docs/{name}.md is missing"
    assert f"(docs/{name}.md)" in README.read_text(), f"README.md does not link docs/{name}.md"


def test_the_scanners_see_links_and_commands(tmp_path):
    """The helpers themselves: code is not a link, slugs follow GitHub, subcommands only after packages."""
    assert prose("a [x](y.md) `[z](w.md)`\n```\n[q](r.md)\n```\n").count("](") == 1
    assert slug("Shape surgery: `python -m surgery`") == "shape-surgery-python--m-surgery"
    assert slug("int8 and int4: what they share") == "int8-and-int4-what-they-share"
    assert COMMAND.findall("`python -m surgery debake IN OUT` and python -m bench.sweep --model x") == [
        ("surgery", "debake"), ("bench.sweep", "")]


#: A repository path written in code quotes in the docs: a top-level folder of the checkout, then a path.
REPO_PATH = re.compile(r"`((?:builders|core|families|quantize|release|runtime|surgery|bench|tests|docs|tools|configs|"
                       r"vlm_vision_onnx)"
                       r"/[A-Za-z0-9_./*{},-]*)")
#: Written paths that name a pattern, not a file: a placeholder in capitals (NAME, MODEL, WxH), a glob, braces, a
#: prefix.
PLACEHOLDER = re.compile(r"[A-Z]{2,}|[*{]|[_-]$")


def written_paths() -> list[tuple[str, str]]:
    """(page, path) of every repository path in code quotes in the README and docs/, patterns left out."""
    found = []
    for page in DOCS:
        for match in REPO_PATH.finditer(page.read_text()):
            path = match.group(1).rstrip(".").split("::")[0]
            if not PLACEHOLDER.search(path):
                found.append((str(page.relative_to(ROOT)), path))
    return sorted(set(found))


#: The folders under vlm_vision_onnx/ that the docs name without the prefix (docs/architecture.md, "Layering").
UNDER_PACKAGE = ("core", "families", "release", "runtime")


def repository_file(path: str) -> Path:
    """The checkout file a written path names: `core/engine.py` is vlm_vision_onnx/core/engine.py (runtime/ and
    release/ at the top hold only the `python -m` entry points)."""
    if path.split("/")[0] in UNDER_PACKAGE and not (ROOT / path).exists():
        return ROOT / "vlm_vision_onnx" / path
    return ROOT / path


def test_every_written_repository_path_exists():
    """Prose paths too (`families/qwen_vl/`, `bench/results/cpu-race.md`): a renamed folder or file fails here."""
    missing = [f"{page}: {path}" for page, path in written_paths() if not repository_file(path).exists()]
    assert len(written_paths()) > 100 and not missing, missing


@pytest.mark.parametrize("page,target", links(), ids=lambda v: str(v))
def test_relative_link_resolves(page, target):
    path_part, _, anchor = target.partition("#")
    source = ROOT / page
    file = (source.parent / path_part).resolve() if path_part else source
    assert file.exists(), f"{page}: link {target!r}: {file} does not exist"
    if anchor:
        assert file.suffix == ".md", f"{page}: link {target!r}: an anchor into a non-markdown file"
        assert anchor in anchors(file), (f"{page}: link {target!r}: no heading with that anchor in "
                                         f"{file.relative_to(ROOT)} (has: {', '.join(sorted(anchors(file)))})")


COMMANDS = commands()


@pytest.fixture(scope="module")
def help_runs() -> dict[tuple[str, str | None], dict]:
    """{pair: {code, stdout, stderr}} of `python -m MODULE [SUB] --help` for every quoted command, each run as
    `python -m` runs it, all in one fresh interpreter from the repository root (tests/help_runner.py: sixty
    interpreters importing the same libraries cost a minute of both cores)."""
    names = {f"{module}:{sub}" if sub else module: (module, sub) for module, sub in COMMANDS}
    done = subprocess.run([sys.executable, "-m", "tests.help_runner", *names], cwd=ROOT, capture_output=True,
                          check=False, text=True, timeout=HELP_TIMEOUT_S)
    assert done.returncode == 0 and done.stdout.strip(), f"tests/help_runner.py failed: {done.stderr[-2000:]}"
    return {names[name]: result for name, result in json.loads(done.stdout.splitlines()[-1]).items()}


@pytest.mark.parametrize("pair", COMMANDS, ids=lambda p: " ".join(x for x in p if x))
def test_quoted_command_accepts_help(pair, help_runs):
    done = help_runs[pair]
    command = " ".join(["python -m", *(x for x in pair if x), "--help"])
    assert done["code"] == 0, f"`{command}` exits {done['code']}: {done['stderr'].strip()[-500:]}"
    assert "usage:" in done["stdout"], f"`{command}` printed no usage"


def test_shipped_table_is_what_the_results_give(tmp_path):
    """`python -m bench.shipped` on the committed bench/results and the declared flags rewrites README.md's block to itself."""
    text = README.read_text()
    begin, end = text.find(shipped.BEGIN), text.find(shipped.END)
    assert 0 <= begin < end, "README.md has no shipped-variants markers"
    assert "| int8 " in text[begin:end] and "| int4 " in text[begin:end], "the shipped-variants table is empty"
    copy = tmp_path / "README.md"
    shutil.copyfile(README, copy)
    assert shipped.main(["--readme", str(copy)]) == 0
    assert copy.read_text() == text, ("README.md's shipped-variants table is not what the results give: run "
                                      "`python -m bench.shipped`")


def test_shipped_without_markers_is_one_error_line(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# a README without the table's markers\n")
    done = subprocess.run([sys.executable, "-m", "bench.shipped", "--readme", str(readme)], cwd=ROOT,
                          capture_output=True, check=False, text=True, timeout=HELP_TIMEOUT_S)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2
    assert len(lines) == 1 and lines[0].startswith("error: ") and "shipped-variants:begin" in lines[0], done.stderr
    assert "Traceback" not in done.stderr
    assert readme.read_text() == "# a README without the table's markers\n"
