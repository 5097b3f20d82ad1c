"""Export-time rewrite of a Qwen vision tower's attention, as a patcher that always restores.

The eager attention of every generation splits q/k/v per frame (or per window) with
`torch.split(..., lengths.tolist())`: traced, the split sizes become constants of the export grid (wrong or
failing at any other layout); under torch.export it raises GuardOnDataDependentSymNode. The patched form hands
q, k, v and `grid_thw` to a custom op that both exporters lower to fused attention on the frames (`segment_attention`)
or on the windows (`window_attention`, Qwen2.5-VL's window blocks) computed from `grid_thw` inside the graph (no
N x N tensor: see those modules for the decisions).
"""

import torch

from builders.patching import swapped
from builders.qwen_vl.generations import TorchGeneration
from builders.qwen_vl.segment_attention import CHUNK_ROWS, segment_attention
from builders.qwen_vl.window_attention import window_attention

GRID_KWARG = "segment_grid_thw"
#: Attribute of an attention module: its window side in patches (0: attention per whole frame). Set by the
#: export wrapper on Qwen2.5-VL's window blocks; absent elsewhere.
WINDOW_ATTR = "segment_window"
#: Attribute of an attention module: the query rows of one step of the ONNX Loop (`segment_attention.CHUNK_ROWS`
#: of the export's ops). Set by the export wrapper; absent: the contrib form's.
CHUNK_ATTR = "segment_chunk"


def segment_attention_forward(generation: TorchGeneration):
    """The patched forward of `generation.attention`."""

    def forward(self, hidden_states: torch.Tensor, cu_seqlens: torch.Tensor | None = None,
                position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None, **kwargs) -> torch.Tensor:
        """hidden_states [N, width] -> [N, width]; kwargs[GRID_KWARG] is grid_thw int64 [I, 3].

        cu_seqlens is accepted for signature compatibility and ignored: the op derives the segments itself
        (in the window blocks, from the window order the export wrapper handed the tower).
        """
        grid_thw = kwargs.get(GRID_KWARG)
        if grid_thw is None:
            raise ValueError(f"segment attention needs the {GRID_KWARG!r} keyword argument")
        query, key, value = generation.rotated_qkv(self, hidden_states, position_embeddings)  # each [N, H, D]
        query, key, value = (x.reshape(1, -1, self.dim) for x in (query, key, value))  # [1, N, H*D]
        window = getattr(self, WINDOW_ATTR, 0)
        if window:
            attended = window_attention(query, key, value, grid_thw, self.num_heads, self.scaling, window)
        else:
            chunk = getattr(self, CHUNK_ATTR, CHUNK_ROWS["contrib"])
            attended = segment_attention(query, key, value, grid_thw, self.num_heads, self.scaling, chunk)
        return self.proj(attended.reshape(-1, self.dim))

    return forward


def segment_attention_patch(generation: TorchGeneration):
    """Swap the generation's attention forward for the segment form inside the block; restore on exit."""
    return swapped(generation.attention, "forward", segment_attention_forward(generation))
