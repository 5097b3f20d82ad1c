"""OpenVINO: compile a model once per pattern of its If conditions, each If replaced by the branch it takes
(torch-free).

`BranchCompiler(model, read, compile)(feeds)` -> the compiled model to run `feeds` on. The Ifs' conditions are
computed first by a small model of their own (`_Conditions`: the integer ops on `grid_thw` that decide them, and
the query's row count, read off the shapes OpenVINO infers for the feeds); the model compiled for that pattern has
every top-level If replaced by the branch the pattern names (its body's nodes wired in place of the If), so no If
is left to run. A pattern is compiled on first use; the `keep` most recent stay compiled. Deciding costs about
3-5 ms per run at Qwen3-VL-2B (a reshape of the model's graph, no weights touched, and the small model).

Why: OpenVINO 2026.4.1's CPU plugin gives every If body memory of its own (its inputs copied in, its
intermediates, its outputs copied out), shared with no other If. Our attention is an If per block
(builders/qwen_vl/segment_attention.py, window_attention.py), so resident memory grew by a few tensors of the
image's size per block: at Qwen3-VL-2B's 24 blocks a 2048x2048 photo in bf16 went past 12 GiB (the OOM killer
stopped it beside other processes). The outputs are bit-identical (bench/openvino_branches.py, retired at commit
c9ada23, measured both forms: time, peak memory, outputs; bench/results/openvino-branches.md).

Where a condition reads a float input's values (no graph of this tool does), two Ifs share a name, a shape the
conditions read stays unknown, or the model has no If, it runs as it is (`compile_cpu`'s taps kept for its Ifs).
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

#: Element types a condition may read: integer and bool inputs (grid_thw), never pixels.
_CONDITION_INPUT_TYPES = ("i64", "i32", "boolean")


def top_level_ifs(model) -> list:
    """The model's If nodes (not those inside another If's or a Loop's body), in topological order."""
    return [node for node in model.get_ordered_ops() if node.get_type_name() == "If"]


def wire_branch(node, branch: int) -> None:
    """Replace If `node` in its graph by its `branch` body (0: then, 1: else): each body parameter's consumers
    read the If's matching input, each If output's consumers read the body's matching result."""
    body = node.get_function(branch)
    parameters, results = body.get_parameters(), body.get_results()
    for described in node.get_input_descriptions(branch):
        parameter = parameters[described.body_parameter_index]
        for target in list(parameter.output(0).get_target_inputs()):
            target.replace_source_output(node.input_value(described.input_index))
    for described in node.get_output_descriptions(branch):
        node.output(described.output_index).replace(results[described.body_value_index].input_value(0))


def _condition_sources(model, conditions) -> tuple[list, list]:
    """(Parameter nodes, ShapeOf nodes) the values `conditions` of `model` are computed from: walking up from
    them, stopping at each Parameter and at each ShapeOf of a tensor computed from a float input (it reads that
    tensor's shape, never its values); a ShapeOf of integers is walked through."""
    from_floats = set()  # names of the nodes whose values a float input's values reach (a ShapeOf's never)
    for node in model.get_ordered_ops():
        kind = node.get_type_name()
        if (kind == "Parameter" and node.get_element_type().get_type_name() not in _CONDITION_INPUT_TYPES) or (
                kind != "ShapeOf" and any(v.get_node().get_name() in from_floats for v in node.input_values())):
            from_floats.add(node.get_name())
    seen, parameters, shapes, stack = set(), {}, {}, [c.get_node() for c in conditions]
    while stack:
        node = stack.pop()
        if node.get_name() in seen:  # unique per node (its friendly name need not be)
            continue
        seen.add(node.get_name())
        kind = node.get_type_name()
        if kind == "Parameter":
            parameters[node.get_name()] = node
        elif kind == "ShapeOf" and node.input_value(0).get_node().get_name() in from_floats:
            shapes[node.get_name()] = node
        else:
            stack.extend(value.get_node() for value in node.input_values())
    return list(parameters.values()), list(shapes.values())


class _Conditions:
    """The top-level Ifs' conditions of a model, computed from its integer inputs and the shapes its ShapeOf nodes
    read (Qwen's attention If compares the frames' rows with the query's row count).

    Two graphs of the model: `conditions`, compiled, where each ShapeOf of a float-computed tensor on the
    conditions' path is a Parameter of its own; and `shapes`, never compiled, where each top-level If is its
    then-branch (both branches give the same shape; an If's own shape inference would leave the rows unknown) and
    whose static shapes, after a reshape to the feeds' shapes, are those ShapeOf nodes' values."""

    def __init__(self, model):
        import openvino
        from openvino import opset13

        copy, shapes = model.clone(), model.clone()
        ifs = top_level_ifs(copy)
        self.if_names = [node.get_friendly_name() for node in ifs]
        conditions = [node.input_value(0) for node in ifs]
        parameters, shape_of = _condition_sources(copy, conditions)
        self.usable = bool(ifs) and len(set(self.if_names)) == len(ifs) and all(
            p.get_element_type().get_type_name() in _CONDITION_INPUT_TYPES for p in parameters)
        if not self.usable:
            return
        # the same ShapeOf nodes in the second copy: same place in the topological order
        order = [node.get_name() for node in copy.get_ordered_ops()]
        twins = shapes.get_ordered_ops()
        probes = [twins[order.index(node.get_name())] for node in shape_of]
        if any(twin.get_type_name() != "ShapeOf" or twin.get_friendly_name() != node.get_friendly_name()
               for twin, node in zip(probes, shape_of, strict=True)):
            self.usable = False
            return
        probes = [twin.input_value(0) for twin in probes]
        for node in top_level_ifs(shapes):
            wire_branch(node, 0)
        shapes.add_outputs(probes)  # reached from a result, so that a reshape infers their shapes
        shapes.validate_nodes_and_infer_types()
        self._shapes, self._probes = shapes, probes
        self._shape_types = [node.get_output_element_type(0).to_dtype() for node in shape_of]
        fed = []
        for k, node in enumerate(shape_of):
            rank = node.input_value(0).get_partial_shape().rank.get_length()
            fed.append(opset13.parameter([rank], node.get_output_element_type(0), name=f"shape_of.{k}"))
            for target in list(node.output(0).get_target_inputs()):
                target.replace_source_output(fed[-1].output(0))
        self.inputs = [p.get_friendly_name() for p in parameters]
        condition_model = openvino.Model(conditions, [*parameters, *fed], "if_conditions")
        condition_model.validate_nodes_and_infer_types()
        self.compiled = openvino.Core().compile_model(condition_model, "CPU", {"INFERENCE_NUM_THREADS": 1})

    def __call__(self, feeds: dict[str, np.ndarray]) -> tuple[bool, ...] | None:
        """The branch each If takes on `feeds` (True: then), or None where a shape stays unknown."""
        import openvino

        if self._probes:
            try:
                self._shapes.reshape({name: openvino.PartialShape(list(np.shape(feeds[name])))
                                      for name in (p.get_friendly_name() for p in self._shapes.get_parameters())})
            except RuntimeError:  # feeds the model refuses: it runs as it is, and says so itself
                return None
            found = [probe.get_partial_shape() for probe in self._probes]
            if not all(shape.is_static for shape in found):
                return None
        else:
            found = []
        values = {name: np.ascontiguousarray(feeds[name]) for name in self.inputs}
        values.update({f"shape_of.{k}": np.array(shape.to_shape(), dtype)
                       for k, (shape, dtype) in enumerate(zip(found, self._shape_types, strict=True))})
        results = self.compiled(values)
        return tuple(bool(np.asarray(results[out]).reshape(-1)[0]) for out in self.compiled.outputs)


class BranchCompiler:
    """Compiled models of one model file per pattern of its If conditions (see the module docstring).

    `model`: the file's `openvino.Model`, already read (used for the conditions and the first compile, then
    let go); `read`: () -> the file's model again, for each later pattern (so that no uncompiled copy of the
    weights stays in memory between compiles); `compile`: openvino.Model -> compiled model."""

    def __init__(self, model, read, compile, keep: int = 2):
        self._spare, self._read, self._compile, self.keep = model, read, compile, keep
        self._compiled: OrderedDict[tuple, object] = OrderedDict()
        self._conditions = _Conditions(model)

    @property
    def specializes(self) -> bool:
        """Whether runs go to If-free models (the model has Ifs, decided by integer inputs and shapes)."""
        return self._conditions.usable

    def pattern(self, feeds: dict[str, np.ndarray]) -> tuple[bool, ...]:
        """The branch each top-level If takes on `feeds` (True: then); () where the model runs as it is."""
        if not self._conditions.usable:
            return ()
        return self._conditions(feeds) or ()

    def __call__(self, feeds: dict[str, np.ndarray]):
        """The compiled model for `feeds`: compiled now on a new pattern, the least recent dropped past `keep`."""
        key = self.pattern(feeds)
        if key in self._compiled:
            self._compiled.move_to_end(key)
            return self._compiled[key]
        model = self._spare if self._spare is not None else self._read()
        self._spare = None
        if key:
            ifs = {node.get_friendly_name(): node for node in top_level_ifs(model)}
            for name, taken in zip(self._conditions.if_names, key, strict=True):
                wire_branch(ifs[name], 0 if taken else 1)
            model.validate_nodes_and_infer_types()
        while len(self._compiled) >= self.keep:
            self._compiled.popitem(last=False)
        self._compiled[key] = self._compile(model)
        return self._compiled[key]
