"""Every declared family's `Shipping` (families/shipping.py), looped over the registry: a new family fails here until
its tiny config exists, its flags and sweep points are ones `python -m quantize` takes and its genai answer is given;
`quantize STAGE --shipped` takes the flags of the input's family, options given beside it win."""

import onnx
import pytest
from onnx import TensorProto, helper

from bench import shipped, sweep
from builders.config import load_config
from quantize import __main__ as quantize_cli
from tests import builds
from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.families import FAMILIES
from vlm_vision_onnx.families.qwen_vl.generations import GENERATIONS
from vlm_vision_onnx.families.shipping import DEFAULT_FLAGS, GenaiType, Shipping

NAMES = list(FAMILIES)


@pytest.mark.parametrize("name", NAMES)
def test_tiny_config_exists_and_is_of_the_family(name):
    config = load_config(FAMILIES[name].shipping.tiny_config)
    assert config.family == name


@pytest.mark.parametrize("name", NAMES)
def test_every_family_has_its_torch_side(name):
    """The builder the declaration names exists (a Qwen generation: its TorchGeneration entry)."""
    from builders.family import load

    assert callable(load(FAMILIES[name].builder).build)


@pytest.mark.parametrize("name", NAMES)
def test_shipped_flags_are_ones_the_quantize_stages_take(name):
    """Each stage's flags parse with the stage's own parser and options class (its checks run in __post_init__)."""
    declared = FAMILIES[name].shipping
    for stage in DEFAULT_FLAGS:
        args = quantize_cli.parse_args([stage, "IN", "OUT", *declared.stage_flags(stage)])
        quantize_cli.OPTIONS[stage].from_args(args)


@pytest.mark.parametrize("name", NAMES)
def test_sweep_points_are_ones_the_quantize_stages_take(name):
    """The family's sweep points (shared and its own) parse; its INT4 points are distinct and ascending."""
    declared = FAMILIES[name].shipping
    own = sweep.points(declared)[len(sweep.POINTS):]
    assert len(own) == len(declared.int8_nbits_for) + len(declared.int4_matmuls)
    for _, stage, flags in own:
        quantize_cli.OPTIONS[stage].from_args(quantize_cli.parse_args([stage, "IN", "OUT", *flags]))
    assert list(declared.int4_matmuls) == sorted(set(declared.int4_matmuls))
    assert declared.sweep_cases, "the sweep measures every point at the family's sweep cases: declare some"


@pytest.mark.parametrize("name", NAMES)
def test_the_genai_answer_is_a_type_or_one_line(name):
    genai = FAMILIES[name].shipping.genai
    if isinstance(genai, GenaiType):
        assert name in GENERATIONS, "a genai package is made from a Qwen generation's checkpoint"
        assert GENERATIONS[name].architecture.endswith("ForConditionalGeneration")
    else:
        assert genai and "\n" not in genai


def test_shipping_refuses_flags_of_a_stage_it_does_not_know():
    with pytest.raises(ValueError, match="int3"):
        Shipping(tiny_config="x", genai="none", int4_matmuls=(), sweep_cases=("a",), flags={"int3": ()})


def test_bench_shipped_reads_the_model_s_family():
    """`bench.shipped` resolves a config name (and an alias) to its family's declared flags."""
    assert shipped.shipped_flags("phi-4-mm-tiny")["int4"] == FAMILIES["phi-4-mm"].shipping.stage_flags("int4")
    assert shipped.shipped_flags("qwen2.5-vl")["int4"][-1] == "150"  # the alias of qwen2.5-vl-3b
    assert shipped.shipped_flags("qwen3-vl")["int8"] == [*DEFAULT_FLAGS["int8"], "--nbits-for", "merger"]
    assert shipped.shipped_flags("qwen3.5")["int8"] == [*DEFAULT_FLAGS["int8"], "--nbits-for", "merger"]
    assert shipped.shipped_flags("qwen2-vl")["int8"] == [*DEFAULT_FLAGS["int8"], "--nbits-for", "merger"]
    assert shipped.shipped_flags("qwen2.5-vl")["int8"] == list(DEFAULT_FLAGS["int8"])


def test_a_shipped_int8_point_is_one_the_sweep_measures():
    """Where a family ships INT8 flags of its own, its sweep has that point (bench.shipped finds its figures)."""
    for name, family in FAMILIES.items():
        declared = family.shipping
        if "int8" in declared.flags:
            wanted = shipped.options("int8", declared.stage_flags("int8"))
            assert any(shipped.options(stage, flags) == wanted for _, stage, flags in sweep.points(declared)
                       if stage == "int8"), name


def _family_model(path, family: str | None) -> None:
    """A one-node model whose metadata names `family` (all `--shipped` reads of the input; None: no family)."""
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    if family:
        helper.set_model_props(model, {"family": family})
    onnx.save(model, path)


def test_shipped_takes_the_input_s_family_and_given_options_win(tmp_path):
    model = tmp_path / "model.onnx"
    _family_model(model, "phi-4-mm")
    args = quantize_cli.resolve_shipped(["int4", str(tmp_path), str(tmp_path / "out"), "--shipped"])
    assert args.int8_matmuls == 144 and args.block_size == 128
    args = quantize_cli.resolve_shipped(["int4", str(tmp_path), str(tmp_path / "out"), "--shipped",
                                         "--int8-matmuls", "5"])
    assert args.int8_matmuls == 5 and args.block_size == 128
    args = quantize_cli.resolve_shipped(["ov-int8", str(model), str(tmp_path / "out"), "--shipped"])
    assert args.smooth_alpha == 0.5


def test_shipped_on_a_model_without_family_is_a_usage_error(tmp_path):
    _family_model(tmp_path / "model.onnx", None)
    with pytest.raises(UsageError, match="family"):
        quantize_cli.resolve_shipped(["int8", str(tmp_path), str(tmp_path / "out"), "--shipped"])


def test_ov_int8_is_built_by_default_for_qwen3_vl_alone():
    """`make export` builds ov-int8 where the family declares it (`Shipping.ov_int8`): Qwen3-VL, the one whose
    ov-int8 meets the photo floor `--engine auto` asks for at published dims (families/qwen_vl/generations.py)."""
    assert [name for name in NAMES if FAMILIES[name].shipping.ov_int8] == ["qwen3-vl"]


def test_if_shipped_skips_a_family_that_does_not_ship_it(tmp_path, capsys):
    """`quantize ov-int8 --if-shipped` on a Phi-4-multimodal model: says why, writes nothing, exit 0; the family of
    a Qwen3-VL model ships it."""
    out = tmp_path / "ov-int8"
    assert quantize_cli.main(["ov-int8", str(builds.path(builds.PHI4_MM)), str(out), "--shipped", "--if-shipped"]) == 0
    assert "not built" in capsys.readouterr().err and not out.exists() and list(tmp_path.iterdir()) == []
    assert quantize_cli.shipping(builds.path(builds.QWEN3_VL)).ov_int8
