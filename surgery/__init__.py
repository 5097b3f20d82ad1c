"""Shape surgery for ONNX models (torch-free): de-bake export-grid constants, audit, doctor,
set-batch, freeze and fix-dims. Each pass is a function model -> (model, report) in its own module:

- `surgery.grid_scan`: find constants baked from the export grid (the classification rules: `surgery.grid_classify`)
- `surgery.debake`: grid-baked shape constants -> subgraphs of grid_thw / Shape(pixel_values)
- `surgery.audit`: prove none remain
- `surgery.doctor`: dim_param conflicts, stale shapes, static-in-disguise symbols, data-dependent sizes
- `surgery.fix_dims`, `surgery.set_batch`, `surgery.freeze`: the repairs, each verified by running

Command line: `python -m surgery --help` (see `surgery.cli` and the README section "Shape surgery"); demo models:
`surgery.examples`. Helpers: `grid` (quantities, Emitter),
`findings` (the Finding/Entry data model of grid and batch constants), `probe`, `dataflow`, `run`.
"""
