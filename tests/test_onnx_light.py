"""core/onnx_light.py: ONNX files read without the onnx package give the fields the runtime reads exactly as
onnx does, and its dtype tables are onnx's."""

from pathlib import Path

import onnx
import pytest

from vlm_vision_onnx.core import onnx_io, onnx_light
from vlm_vision_onnx.core.errors import UsageError

REAL = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "real"


def test_dtype_tables_are_onnxs():
    for code, name in onnx_light.DTYPE_NAMES.items():
        assert onnx.helper.tensor_dtype_to_np_dtype(code).name == name, code
    for code, bits in onnx_light.ELEMENT_BITS.items():
        dtype = onnx.helper.tensor_dtype_to_np_dtype(code)
        expected = {21: 4, 22: 4, 23: 4, 25: 2, 26: 2}.get(code, dtype.itemsize * 8)
        assert bits == expected, code



def test_byte_count_is_what_onnx_serializes():
    """Packed 4- and 2-bit types round up to whole bytes; strings and negative dims have no count."""
    import numpy as np

    for dtype, dims in ((onnx.TensorProto.FLOAT, [3, 5]), (onnx.TensorProto.FLOAT16, [7]), (onnx.TensorProto.INT8, [])):
        array = np.zeros(dims, onnx.helper.tensor_dtype_to_np_dtype(dtype))
        tensor = onnx.numpy_helper.from_array(array)
        assert onnx_light.byte_count(tensor) == len(tensor.raw_data)
    assert onnx_light.byte_count(onnx.helper.make_tensor("q", onnx.TensorProto.UINT4, [3], [1, 2, 3])) == 2
    assert onnx_light.byte_count(onnx.helper.make_tensor("s", onnx.TensorProto.STRING, [1], [b"x"])) is None
    negative = onnx.TensorProto(data_type=onnx.TensorProto.FLOAT, dims=[-1, 4])
    assert onnx_light.byte_count(negative) is None

def _facts(proto) -> dict:
    graph = proto.graph
    return {
        "ir": proto.ir_version, "opsets": [(o.domain, o.version) for o in proto.opset_import],
        "meta": [(p.key, p.value) for p in proto.metadata_props],
        "io": [(v.name, v.type.tensor_type.elem_type,
                [(d.dim_value, d.dim_param) for d in v.type.tensor_type.shape.dim])
               for v in list(graph.input) + list(graph.output)],
        "nodes": [(n.op_type, n.domain, list(n.input), list(n.output)) for n in graph.node],
        "initializers": [(t.name, t.data_type, list(t.dims), t.data_location) for t in graph.initializer],
    }


@pytest.mark.parametrize("which", ["export", "real"])
def test_parse_reads_what_onnx_reads(which, tiny_exports):
    if which == "real":
        if not REAL.is_dir():
            pytest.skip(f"{REAL} is absent (the real detectors of ../shared/fixtures/real)")
        path = REAL / "yunet.onnx"
    else:
        path = tiny_exports["torchscript"] / "model.onnx"
    light = onnx_light.parse(path.read_bytes())
    assert _facts(light) == _facts(onnx.load(str(path), load_external_data=False))


def test_a_short_external_file_without_a_length_is_refused(tmp_path):
    """A weight whose external_data records no length needs what its dims say (the fuzzer's finding: ORT failed
    later, with a traceback in `runtime npu-check`)."""
    weight = onnx.helper.make_tensor("w", onnx.TensorProto.FLOAT, [4, 4], [0.0] * 16)
    graph = onnx.helper.make_graph([onnx.helper.make_node("Add", ["x", "w"], ["y"])], "g",
                                   [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4, 4])],
                                   [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4, 4])],
                                   initializer=[weight])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 10
    tensor = model.graph.initializer[0]
    tensor.ClearField("float_data")
    tensor.data_location = onnx.TensorProto.EXTERNAL
    tensor.external_data.add(key="location", value="w.data")
    (tmp_path / "w.data").write_bytes(b"\0" * 32)  # 64 needed
    onnx.save(model, str(tmp_path / "model.onnx"))
    with pytest.raises(UsageError, match="external file 'w.data' is truncated \\(32 bytes, weight 'w' needs 64\\)"):
        onnx_io.read_light(tmp_path / "model.onnx")
    (tmp_path / "w.data").write_bytes(b"\0" * 64)
    assert onnx_io.read_light(tmp_path / "model.onnx").graph.initializer[0].name == "w"
