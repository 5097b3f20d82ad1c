"""audit: fails while a grid-specific constant remains, passes after debake and on dynamic exports."""

import onnx
import onnx_ir as ir
import pytest

from surgery import examples as ex
from surgery.audit import audit
from surgery.cli import main
from surgery.debake import debake
from surgery.grid import grid_from_metadata


def test_audit_fails_on_baked_model_and_passes_after_debake():
    model = ir.from_proto(ex.baked_merger())
    grid = grid_from_metadata(model)
    before = audit(model, grid)
    assert not before["clean"] and len(before["findings"]) == 8
    assert audit(debake(model, grid)[0], grid) == {**before, "findings": [], "clean": True}


def test_audit_passes_on_dynamic_export():
    model = ir.from_proto(ex.dynamic_encoder())
    report = audit(model, grid_from_metadata(model))
    assert report["clean"] and report["findings"] == [] and report["collisions"] == []


@pytest.mark.parametrize("proto, code", [(ex.baked_merger(), 1), (ex.dynamic_encoder(), 0)], ids=["baked", "dynamic"])
def test_audit_exit_status(tmp_path, capsys, proto, code):
    path = tmp_path / "model.onnx"
    onnx.save(proto, path)
    assert main(["audit", str(path)]) == code
    out = capsys.readouterr().out
    assert ("FAILED: 8 grid-specific constant(s) remain" in out) == (code == 1)
    assert ("clean: no grid-specific constant" in out) == (code == 0)


def test_audit_with_grid_option_for_models_exported_elsewhere(tmp_path, capsys):
    proto = ex.baked_merger()
    del proto.metadata_props[:]
    path = tmp_path / "model.onnx"
    onnx.save(proto, path)
    assert main(["audit", str(path)]) == 2
    assert "--grid T,H,W" in capsys.readouterr().err
    assert main(["audit", str(path), "--grid", "1,22,30"]) == 1
