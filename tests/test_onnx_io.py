"""core.onnx_io.to_proto: the 2 GiB check counts the bytes that serialise inline, not external references
(the ORT pass holds an 8B tower's 2.15 GiB of weights out as data-less stand-ins and must go through)."""

import numpy as np
import onnx_ir as ir
import pytest

from core import onnx_io
from core.errors import UsageError


def _model(weight: ir.TensorProtocol) -> ir.Model:
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([1, 4]))
    w = ir.Value(name="w", const_value=weight, type=ir.TensorType(ir.DataType.FLOAT), shape=weight.shape)
    node = ir.Node("", "MatMul", [x, w], num_outputs=1)
    node.outputs[0].name = "y"
    graph = ir.Graph([x], node.outputs, nodes=[node], initializers=[w], opset_imports={"": 18})
    return ir.Model(graph, ir_version=10)


def test_external_stand_ins_do_not_count():
    side = 2**15  # 32768 x 16384 float32 = 2 GiB declared, no data behind it
    stand_in = ir.ExternalTensor("held-out/w", 0, side * 16384 * 4, ir.DataType.FLOAT,
                                 shape=ir.Shape([side, 16384]), name="w")
    proto = onnx_io.to_proto(_model(stand_in))
    assert proto.graph.initializer[0].data_location == 1  # EXTERNAL: a reference, not 2 GiB of bytes


def test_inline_weights_past_the_limit_are_refused():
    class Big(ir.Tensor):
        @property
        def nbytes(self):
            return 2**31

    with pytest.raises(UsageError, match="past protobuf's 2 GiB"):
        onnx_io.to_proto(_model(Big(np.zeros((4, 4), np.float32), name="w")))
