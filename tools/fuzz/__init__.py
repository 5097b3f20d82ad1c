"""The fuzz harness (`python -m tools.fuzz`, `make fuzz`; docs/errors.md "Fuzzing"): malformed models, stage
folders, packages, images, videos and configs, made by machine from real seeds, through every command a user
points at a file, each case in its own process with a time and a memory limit; outcomes counted per command.

- `seeds`: the seed files (real detectors from ../shared/fixtures/real, a tiny export and package, photos, the
  model configs) gathered into one read-only folder;
- `mutate_bytes`, `mutate_onnx`, `mutate_files`: the mutators (bytes; ONNX structure; packages, images, videos,
  configs, reports);
- `cases`: the commands and which inputs each takes; case N of a run is made from `random.Random(f"{seed}:{N}")`
  alone, so any case is made again from the seed and its number;
- `runner`: one forked process per case (the commands' modules imported once, in the parent), its limits, its
  outcome;
- `__main__`: the command, its JSON results and the markdown table.
Never imported by the product (tests/test_layering.py).
"""
