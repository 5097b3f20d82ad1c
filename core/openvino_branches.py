"""OpenVINO: compile a model once per pattern of its If conditions, each If replaced by the branch it takes
(torch-free).

`BranchCompiler(core, model, config)(feeds)` -> the compiled model to run `feeds` on. The Ifs' conditions are
computed first by a small model of their own (the integer ops on `grid_thw` that decide them); the model compiled
for that pattern has every top-level If replaced by the branch the pattern names (its body's nodes wired in place
of the If), so no If is left to run. Patterns are compiled on first use; the `keep` most recent stay compiled.

Why: OpenVINO 2026.4.1's CPU plugin gives every If body memory of its own (its inputs copied in, its
intermediates, its outputs copied out), shared with no other If. Our attention is an If per block
(builders/qwen_vl/segment_attention.py, window_attention.py): at Qwen3-VL-2B's 24 blocks a 1024x1024 photo in
bf16 peaked at 5.8 GiB resident with the Ifs and 4.2 GiB with the branches wired in, and a 2048x2048 photo went
past 12 GiB (killed by the OOM killer beside other processes) against 5.7 GiB; the outputs are bit-identical and
the attention's time fell 6.4 -> 5.9 s at 1024x1024 (OpenVINO's profiler; `python -m bench.openvino_branches`
measures it).

Where a condition reads a float input (no graph of this tool does), two Ifs share a name, or the model has no If,
it is compiled once as it is (`compile_cpu`'s taps kept for its Ifs).
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


def _feeding_parameters(outputs) -> list:
    """The Parameter nodes the values `outputs` are computed from."""
    seen, found, stack = set(), {}, [o.get_node() for o in outputs]
    while stack:
        node = stack.pop()
        if node.get_name() in seen:  # unique per node (its friendly name need not be)
            continue
        seen.add(node.get_name())
        if node.get_type_name() == "Parameter":
            found[node.get_friendly_name()] = node
        stack.extend(value.get_node() for value in node.input_values())
    return list(found.values())


class BranchCompiler:
    """Compiled models of one model file per pattern of its If conditions (see the module docstring).

    `model`: the file's `openvino.Model`, already read (used for the conditions and the first compile, then
    let go); `read`: () -> the file's model again, for each later pattern (so that no uncompiled copy of the
    weights stays in memory between compiles); `compile`: openvino.Model -> compiled model."""

    def __init__(self, model, read, compile, keep: int = 2):
        self._spare, self._read, self._compile, self.keep = model, read, compile, keep
        self._compiled: OrderedDict[tuple, object] = OrderedDict()
        self._conditions = self._condition_model(model)

    def _condition_model(self, model):
        """A compiled model whose outputs are the top-level Ifs' conditions, or None where the model is compiled
        as it is (no If, a condition reading a float input, two Ifs of one name)."""
        import openvino

        ifs = top_level_ifs(model)
        self._if_names = [node.get_friendly_name() for node in ifs]
        if not ifs or len(set(self._if_names)) != len(ifs):
            return None
        conditions = [node.input_value(0) for node in ifs]
        parameters = _feeding_parameters(conditions)
        if any(p.get_element_type().get_type_name() not in _CONDITION_INPUT_TYPES for p in parameters):
            return None
        self._condition_inputs = [p.get_friendly_name() for p in parameters]
        return openvino.Core().compile_model(openvino.Model(conditions, parameters, "if_conditions"), "CPU",
                                             {"INFERENCE_NUM_THREADS": 1})

    @property
    def specializes(self) -> bool:
        """Whether runs go to If-free models (the model has Ifs, decided by integer inputs)."""
        return self._conditions is not None

    def pattern(self, feeds: dict[str, np.ndarray]) -> tuple[bool, ...]:
        """The branch each top-level If takes on `feeds` (True: then); () when the model is compiled as is."""
        if self._conditions is None:
            return ()
        results = self._conditions({name: np.ascontiguousarray(feeds[name]) for name in self._condition_inputs})
        return tuple(bool(np.asarray(results[out]).reshape(-1)[0]) for out in self._conditions.outputs)

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
            for name, taken in zip(self._if_names, key, strict=True):
                wire_branch(ifs[name], 0 if taken else 1)
            model.validate_nodes_and_infer_types()
        while len(self._compiled) >= self.keep:
            self._compiled.popitem(last=False)
        self._compiled[key] = self._compile(model)
        return self._compiled[key]
