"""The files of `embed-collection`: the INPUT listing, and OUT, a Parquet dataset folder written in parts.

INPUT is one of
- a folder: every non-hidden file with an image suffix pillow knows, recursively, in name order (folders
  first-to-last as sorted, hidden folders skipped); each is one image;
- a glob (`photos/**/*.jpg`, `**` recursive): every file it matches, in the order the file system lists them;
- a `.parquet` or `.csv` file with a `path` column: one entry per row, in row order; a row naming a folder is
  one video whose frames are that folder's image files in name order (as `embed --video DIR`).
Relative paths are relative to the working folder. A path listed twice is embedded once.

OUT holds (what `pyarrow.parquet.read_table(OUT)` reads as one table; it skips names starting with `_` or `.`):
- `_collection.json`: the package name, family, variant, the sha256 of the variant's ONNX file (`checksum`),
  the output columns and the row format: a rerun must name the same package variant;
- `part-<uuid>.parquet`: rows of finished chunks (`SCHEMA_DOC`); each is written as `.part-<uuid>.parquet.tmp`
  and renamed when complete, so a part is either whole or absent. A rerun reads the `path` column of every part
  and embeds only the paths not there yet; leftover `.tmp` files of a killed run are removed.
"""

from __future__ import annotations

import contextlib
import csv
import glob
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.core.onnx_io import write_json
from vlm_vision_onnx.core.staging import check_folder_output
from vlm_vision_onnx.runtime import images

META = "_collection.json"
FORMAT = "vision-onnx-collection/1"
STAGE = "embed-collection"
GLOB_CHARS = "*?["
#: How the rows look (docs/collections.md repeats it).
SCHEMA_DOC = """path string (as listed), status string ("ok" | "error"), error string (null when ok),
grid list<int64> (Qwen3-VL: t, h, w in patches; Phi-4-multimodal: HD height, width, crops),
shape list<int64> [tokens, hidden], embedding large_list<float32> (the tokens x hidden features flattened
row-major: reshape with `shape`), one such column per DeepStack output with --deepstack, variant string,
checksum string (sha256 of the variant's ONNX file). Error rows have null grid, shape and features."""


def pyarrow_modules():
    """(pyarrow, pyarrow.parquet); UsageError naming the extra when pyarrow is not installed."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise UsageError("embed-collection writes Parquet and needs pyarrow: pip install '.[ray]'") from None
    return pa, pq


# ---- INPUT ------------------------------------------------------------------------------------------------

def _folder_files(folder: Path) -> Iterator[str]:
    suffixes = images.image_suffixes()
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if not name.startswith(".") and Path(name).suffix.lower() in suffixes:
                yield os.path.join(root, name)


def _column_error(source: Path, found) -> UsageError:
    return UsageError(f"{source} has no `path` column (columns: {', '.join(map(str, found)) or 'none'}); "
                      "name the column of file paths `path`")


def _parquet_paths(source: Path) -> Iterator[str | None]:
    pa, pq = pyarrow_modules()
    try:
        table_file = pq.ParquetFile(source)
    except (pa.ArrowException, OSError) as err:  # ArrowInvalid for a file that is not Parquet
        raise UsageError(f"{source} is not a readable Parquet file ({str(err).splitlines()[0]})") from None
    names = table_file.schema_arrow.names
    if "path" not in names:
        raise _column_error(source, names)
    kind = table_file.schema_arrow.field("path").type
    text = any(check(kind) for check in (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary,
                                         pa.types.is_large_binary))
    row = 0
    try:
        for batch in table_file.iter_batches(columns=["path"], batch_size=4096):
            if not text:  # numbers and the like: their text
                yield from batch.column(0).cast("string").to_pylist()
                row += batch.num_rows
                continue
            for value in batch.column(0).cast(pa.large_binary()).to_pylist():  # bytes: no UTF-8 check yet
                row += 1
                try:
                    yield None if value is None else value.decode("utf-8")
                except UnicodeDecodeError:
                    raise UsageError(f"{source}: row {row}'s path is not valid UTF-8 text ({value[:60]!r}); fix or "
                                     "remove that row") from None
    except (pa.ArrowException, OSError) as err:  # a column of lists, a corrupt page
        raise UsageError(f"{source}: the `path` column ({kind}) cannot be read as text ({str(err).splitlines()[0]}); "
                         "give a column of file paths") from None


def _csv_paths(source: Path) -> Iterator[str | None]:
    try:
        with open(source, newline="") as f:
            reader = csv.reader(f)
            header = next(reader, [])
            if "path" not in header:
                raise _column_error(source, header)
            column = header.index("path")
            for row in reader:
                yield row[column] if column < len(row) else None
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise UsageError(f"{source} is not a readable CSV file ({err})") from None


def list_input(source: str) -> Iterator[str]:
    """The paths INPUT names (see the module docstring), lazily; UsageError for an INPUT that is none of the
    kinds or a list row without a path."""
    path = Path(source)
    if path.is_dir():
        yield from _folder_files(path)
        return
    if path.is_file() and path.suffix.lower() in (".parquet", ".csv"):
        rows = _parquet_paths(path) if path.suffix.lower() == ".parquet" else _csv_paths(path)
        for number, row in enumerate(rows, 1):
            if not row:
                raise UsageError(f"{source}: row {number} has an empty path; remove it or fill it in")
            yield row
        return
    if any(c in source for c in GLOB_CHARS):
        yield from (p for p in glob.iglob(source, recursive=True) if os.path.isfile(p))
        return
    if path.exists():
        raise UsageError(f"INPUT {source} is a file but not a .parquet or .csv list; give a folder, a glob, "
                         "or a list with a `path` column")
    raise UsageError(f"INPUT {source} does not exist (give a folder, a glob, or a .parquet/.csv list with a "
                     "`path` column)")


def pending(source: str, done: set[str]) -> list[str]:
    """INPUT's paths not in `done`, each once, in listing order; UsageError when INPUT names no file at all."""
    seen, todo, listed = set(done), [], 0
    for path in list_input(source):
        listed += 1
        if path not in seen:
            seen.add(path)
            todo.append(path)
    if not listed:
        raise UsageError(f"INPUT {source} names no files (an empty folder or list, no image files, or a glob "
                         "matching nothing)")
    return todo


# ---- OUT --------------------------------------------------------------------------------------------------

def check_out(out: Path, inputs: list, meta: dict) -> tuple[set[str], int]:
    """Check OUT before any work: a new or empty folder, or an earlier collection of the same package variant.

    Returns (paths already in OUT, how many of them are error rows). UsageError, nothing written, otherwise.
    """
    if out.exists() and not out.is_dir():
        raise UsageError(f"OUT {out} exists and is a file; embed-collection writes a folder: give a new folder")
    try:
        entries = sorted(out.iterdir()) if out.is_dir() else []
    except OSError as err:
        raise UsageError(f"cannot read OUT {out} ({err.strerror}); fix its permissions or give another OUT") from None
    if not entries:
        check_folder_output(out, STAGE, inputs)
        return set(), 0
    if not (out / META).is_file():
        raise UsageError(f"OUT {out} exists and is not an embed-collection output (no {META}); refusing to write "
                         "into it: give a new folder")
    try:
        earlier = json.loads((out / META).read_text())
    except (OSError, ValueError) as err:
        raise UsageError(f"{out / META} is not readable JSON ({err}); give a new OUT") from None
    keys = ("format", "package", "variant", "checksum", "columns")
    differ = [k for k in keys if earlier.get(k) != meta.get(k)]
    if differ:
        raise UsageError(f"OUT {out} holds embeddings of another run ({', '.join(f'{k} {earlier.get(k)!r}' for k in differ)}"
                         f", this run: {', '.join(repr(meta.get(k)) for k in differ)}); give a new OUT to keep "
                         "them apart")
    probe = out / f".write-check-{uuid.uuid4().hex}"
    try:
        probe.touch()
        probe.unlink()
    except OSError as err:
        raise UsageError(f"cannot write into OUT {out} ({err.strerror}); fix its permissions or give another "
                         "OUT") from None
    return read_done(out)


def earlier_meta(out: Path) -> dict:
    """OUT's `_collection.json` when it is a readable JSON object, else {} (`check_out` says what is wrong)."""
    try:
        meta = json.loads((out / META).read_text())
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def read_done(out: Path) -> tuple[set[str], int]:
    """(paths of every row in OUT's parts, number of error rows); UsageError naming an unreadable part."""
    pa, pq = pyarrow_modules()
    done: set[str] = set()
    errors = 0
    for part in sorted(out.glob("part-*.parquet")):
        try:
            table = pq.read_table(part, columns=["path", "status"])
        except (pa.ArrowException, OSError) as err:  # not Parquet, truncated, another schema
            raise UsageError(f"OUT part {part} is unreadable ({str(err).splitlines()[0]}); move it away and rerun "
                             "(its images are embedded again)") from None
        done.update(table.column("path").to_pylist())
        errors += sum(1 for s in table.column("status").to_pylist() if s != "ok")
    return done, errors


def start_out(out: Path, meta: dict) -> None:
    """Create OUT (and `_collection.json` when new) and remove `.tmp` leftovers of a killed run."""
    out.mkdir(parents=True, exist_ok=True)
    for leftover in out.glob(".part-*.tmp"):
        with contextlib.suppress(OSError):
            leftover.unlink()
    if not (out / META).is_file():
        write_json(out / META, meta)


def write_part(out: Path, table) -> Path:
    """Write `table` as a new part, atomically (temp name, then rename)."""
    _, pq = pyarrow_modules()
    name = f"part-{uuid.uuid4().hex}.parquet"
    tmp = out / f".{name}.tmp"
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, out / name)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return out / name


# ---- rows -------------------------------------------------------------------------------------------------

def schema(feature_columns: list[str]):
    """The pyarrow schema of every part (`SCHEMA_DOC`); `feature_columns`: 'embedding' then DeepStack names."""
    pa, _ = pyarrow_modules()
    return pa.schema([("path", pa.string()), ("status", pa.string()), ("error", pa.string()),
                      ("grid", pa.list_(pa.int64())), ("shape", pa.list_(pa.int64())),
                      *[(name, pa.large_list(pa.float32())) for name in feature_columns],
                      ("variant", pa.string()), ("checksum", pa.string())])


def rows_table(rows: list[dict], feature_columns: list[str], variant: str, checksum: str):
    """A pyarrow Table of `rows` ({path, error} or {path, grid, features: [tokens x hidden] per column}).

    The features are concatenated into one float32 buffer per column with int64 offsets (no Python lists).
    """
    pa, _ = pyarrow_modules()
    failed = [row.get("error") is not None for row in rows]
    columns = {
        "path": pa.array([row["path"] for row in rows], pa.string()),
        "status": pa.array(["error" if bad else "ok" for bad in failed], pa.string()),
        "error": pa.array([row.get("error") for row in rows], pa.string()),
        "grid": pa.array([None if bad else [int(v) for v in row["grid"]] for row, bad in zip(rows, failed)],
                         pa.list_(pa.int64())),
        "shape": pa.array([None if bad else list(row["features"][0].shape) for row, bad in zip(rows, failed)],
                          pa.list_(pa.int64())),
    }
    mask = pa.array(failed, pa.bool_())
    for k, name in enumerate(feature_columns):
        arrays = [np.ascontiguousarray(row["features"][k], dtype=np.float32).ravel()
                  for row, bad in zip(rows, failed) if not bad]
        sizes = iter(a.size for a in arrays)
        offsets = np.cumsum([0] + [0 if bad else next(sizes) for bad in failed], dtype=np.int64)
        values = np.concatenate(arrays) if arrays else np.zeros(0, np.float32)
        columns[name] = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values), mask=mask)
    columns["variant"] = pa.array([variant] * len(rows), pa.string())
    columns["checksum"] = pa.array([checksum] * len(rows), pa.string())
    return pa.table(columns, schema=schema(feature_columns))
