"""Attention of a static Qwen export: plain batched MatMul + Softmax per segment, segments known at export.

The dynamic export derives its segments (frames, Qwen2.5-VL's windows) from `grid_thw` inside the graph and
runs them in an ONNX `Loop` (`segment_attention`). A static export knows its one grid, so the segments are
Python numbers (`Plan`): segments of one size form one batch, [B, H, S, D] @ [B, H, D, S] -> Softmax ->
@ [B, H, S, D]. Frames of one image (or of a video) all have one size: one batch, no gather at all. Qwen2.5-VL's
windows are cut back at a frame's bottom and right edges (as in the eager model), so a frame can hold up to four
window sizes: rows of each size are gathered (constant indices), attended as one batch per size, and the results
put back in sequence order by one more constant gather. No op's output size depends on data.

Shapes: hidden [N, width]; query, key, value [N, H, D] after rotary -> [N, H * D].
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from builders.patching import swapped
from builders.qwen_vl.generations import TorchGeneration

#: Attribute of an attention module: its `Plan` (set by the static export wrapper on every block).
PLAN_ATTR = "static_plan"


@dataclass(frozen=True)
class Group:
    """`count` segments of `size` rows each; `rows` their row indices in sequence order (None: the whole
    sequence, already in order)."""

    size: int
    count: int
    rows: torch.Tensor | None


@dataclass(frozen=True)
class Plan:
    """The segments of one attention: groups of equal size, and the inverse order (None when one group covers
    the sequence in order)."""

    groups: tuple[Group, ...]
    order: torch.Tensor | None

    @classmethod
    def from_sizes(cls, sizes: list[int]) -> Plan:
        """The plan of segments of `sizes` rows, in sequence order."""
        if len(set(sizes)) == 1:
            return cls((Group(sizes[0], len(sizes), None),), None)
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        groups, gathered = [], []
        for size in dict.fromkeys(sizes):  # sizes in order of first appearance
            rows = [r for start, s in zip(starts, sizes) if s == size for r in range(start, start + size)]
            groups.append(Group(size, sizes.count(size), torch.tensor(rows, dtype=torch.int64)))
            gathered += rows
        order = torch.empty(len(gathered), dtype=torch.int64)
        order[torch.tensor(gathered)] = torch.arange(len(gathered))
        return cls(tuple(groups), order)

    @classmethod
    def from_boundaries(cls, cu_seqlens: torch.Tensor) -> Plan:
        """The plan of the segments between cumulative boundaries [S + 1] (the eager model's `cu_seqlens`)."""
        bounds = [int(b) for b in cu_seqlens.tolist()]
        return cls.from_sizes([b - a for a, b in itertools.pairwise(bounds) if b > a])


def batched_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, plan: Plan,
                      scale: float) -> torch.Tensor:
    """query, key, value [N, H, D] -> [N, H * D]: softmax(q k^T * scale) v inside each segment of `plan`."""
    heads, dim = query.shape[1], query.shape[2]
    outputs = []
    for group in plan.groups:
        q, k, v = (x if group.rows is None else x[group.rows] for x in (query, key, value))
        q, k, v = (x.reshape(group.count, group.size, heads, dim).transpose(1, 2) for x in (q, k, v))  # [B, H, S, D]
        scores = torch.matmul(q, k.transpose(2, 3)) * scale  # [B, H, S, S]
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(v.dtype)
        outputs.append(torch.matmul(probs, v).transpose(1, 2).reshape(group.count * group.size, heads * dim))
    if plan.order is None:
        return outputs[0]
    return torch.cat(outputs)[plan.order]


def static_attention_forward(generation: TorchGeneration):
    """The patched forward of `generation.attention`: the block's `Plan` instead of `cu_seqlens`."""

    def forward(self, hidden_states: torch.Tensor, cu_seqlens: torch.Tensor | None = None,
                position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None, **kwargs) -> torch.Tensor:
        """hidden_states [N, width] -> [N, width]; cu_seqlens is ignored (the plan holds the segments)."""
        plan = getattr(self, PLAN_ATTR, None)
        if plan is None:
            raise ValueError(f"static attention needs the module attribute {PLAN_ATTR!r}")
        query, key, value = generation.rotated_qkv(self, hidden_states, position_embeddings)  # each [N, H, D]
        return self.proj(batched_attention(query, key, value, plan, self.scaling))

    return forward


def static_attention_patch(generation: TorchGeneration):
    """Swap the generation's attention forward for the static form inside the block; restore on exit."""
    return swapped(generation.attention, "forward", static_attention_forward(generation))
