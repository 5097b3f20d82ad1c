"""Development tools the tests and the benchmarks share: the transformers.js drivers (Node and headless Chromium),
the torch-free runtime venv, weightless copies of a build, photo writers. Never imported by the product
(tests/test_layering.py), never installed with it."""
