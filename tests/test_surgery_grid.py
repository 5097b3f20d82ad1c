"""grid: quantities as monomials, and the Emitter that computes them from the inputs at run time."""

from fractions import Fraction

import numpy as np
import onnx_ir as ir
import pytest

from surgery.grid import Emitter, Grid, Mono, parse_grid
from surgery.run import run
from vlm_vision_onnx.core.errors import UsageError


def test_mono_algebra():
    h, w, n = Mono.of("h_0"), Mono.of("w_0"), Mono.of("N")
    tokens_per_image = h * w / Mono.const(4)
    assert str(tokens_per_image) == "h_0·w_0/4"
    assert str(n / (h * w)) == "N/(h_0·w_0)"
    assert (n / n).is_const and (n / n).coef == 1
    assert tokens_per_image.evaluate({"h_0": 22, "w_0": 30}) == Fraction(165)


def test_quantities_of_a_uniform_and_a_mixed_grid():
    uniform = {q.name: q.value for q in Grid(((1, 22, 30),)).quantities()}
    assert (uniform["num_patches"], uniform["num_tokens"], uniform["h[0]/2"], uniform["w[0]/2"]) == (660, 165, 11, 15)
    mixed = Grid(((1, 16, 16), (2, 12, 20)))
    values = {q.name: q.value for q in mixed.quantities()}
    assert values["num_patches"] == 256 + 480 and values["num_frames"] == 3
    assert values["t[1]·h[1]·w[1]"] == 480 and values["h[1]·w[1]/4"] == 60
    assert mixed.other().rows == ((1, 18, 20), (2, 14, 24))


@pytest.mark.parametrize("bad", [["1,22"], ["1,21,30"], ["0,22,30"]])
def test_bad_grid(bad):
    with pytest.raises(UsageError):
        parse_grid(bad, 2)


def test_emitter_computes_every_quantity_from_the_inputs():
    """Each quantity of the export grid, emitted, evaluated at *another* grid: must follow that grid."""
    export, other = Grid(((1, 16, 16), (2, 12, 20))), Grid(((3, 10, 6), (1, 8, 14)))
    patches = ir.val("pixel_values", ir.DataType.FLOAT, ["N", 4])
    grid_thw = ir.val("grid_thw", ir.DataType.INT64, ["n", 3])
    graph = ir.Graph([patches, grid_thw], [], nodes=[], opset_imports={"": 17}, name="g")
    emitter = Emitter(graph, "pixel_values", "grid_thw", 17)
    quantities = export.quantities()
    outputs = [emitter.mono(q.mono) for q in quantities]
    graph.extend(emitter.nodes)
    for q, value in zip(quantities, outputs):
        value.name = f"q_{len(graph.outputs)}"
        graph.outputs.append(value)
    got = run(ir.Model(graph, ir_version=9), {
        "pixel_values": np.zeros((other.num_patches, 4), np.float32),
        "grid_thw": np.array(other.rows, np.int64),
    })
    for q, value in zip(quantities, graph.outputs):
        assert got[value.name].tolist() == [int(other.evaluate(q.mono))], q.name
