"""Each family's `pytorch_run` (what bench.cpu_race races: transformers' forward with sdpa attention) against the
eager reference, on every tiny config: equal in fp32 at the first two and the last validation layouts (so its
attention is the model's, Phi-4-multimodal's bidirectional one included), close in bf16."""

import numpy as np
import pytest
import torch

from builders import family as family_builder
from builders.config import CONFIG_DIR, load_config
from vlm_vision_onnx.core.parity import min_token_cosine

TINY = sorted(path.stem for path in CONFIG_DIR.glob("*-tiny.yaml"))


def _family(name: str):
    config = load_config(name)
    return config, family_builder.of_config(config)


@pytest.mark.parametrize("name", TINY)
def test_pytorch_run_is_the_eager_model_in_fp32_and_close_in_bf16(name):
    config, family = _family(name)
    module, _ = family.build(config, None, 0)
    example = family.example(config, module, None)
    every = family.validation_cases(module, example, 0)
    cases = [*every[:2], every[-1]]  # Phi-4-multimodal's second (one crop) has no padded patch: no mask
    expected = {case: family.reference(module)(inputs) for case, inputs in cases}
    fp32 = family.pytorch_run(module, torch.float32)
    for case, inputs in cases:
        for got, want in zip(fp32(inputs), expected[case], strict=True):
            np.testing.assert_allclose(got, want, atol=1e-5 * max(1.0, float(np.abs(want).max())),
                                       err_msg=f"{name}, {case}")
    module, _ = family.build(config, None, 0)
    bf16 = family.pytorch_run(module, torch.bfloat16)
    case, inputs = cases[0]
    outputs = bf16(inputs)
    assert all(o.dtype == np.float32 for o in outputs)
    assert min(min_token_cosine(o, r) for o, r in zip(outputs, expected[case], strict=True)) > 0.99, (name, case)
