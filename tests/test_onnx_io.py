"""core.onnx_io.to_proto: the 2 GiB check counts the bytes that serialise inline, not external references
(the ORT pass holds an 8B tower's 2.15 GiB of weights out as data-less stand-ins and must go through)."""

import numpy as np
import onnx_ir as ir
import pytest

from vlm_vision_onnx.core import onnx_io
from vlm_vision_onnx.core.errors import UsageError


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


def test_save_declares_every_custom_domain_a_node_uses(tmp_path):
    """ORT's optimizer adds com.microsoft nodes without the opset import; ONNX shape inference needs it."""
    import onnx

    x = ir.Value(name="x", shape=ir.Shape([2, 4]), type=ir.TensorType(ir.DataType.FLOAT))
    node = ir.node("FastGelu", [x], domain="com.microsoft", name="gelu")
    node.outputs[0].name = "y"
    model = ir.Model(ir.Graph([x], node.outputs, nodes=[node], opset_imports={"": 18}), ir_version=10)
    onnx_io.save(model, tmp_path / "model.onnx")
    proto = onnx.load(str(tmp_path / "model.onnx"))
    assert {(o.domain, o.version) for o in proto.opset_import} == {("", 18), ("com.microsoft", 1)}
    onnx.shape_inference.infer_shapes(proto, strict_mode=True)
