"""The Phi-4-multimodal image embedding's I/O contract and what later stages apply to it (torch-free).

Inputs:  pixel_values float32 [num_images, max_num_crops, 3, 448, 448],
         image_attention_mask float32 [num_images, max_num_crops, 32, 32] (1 = real patch),
         image_sizes int64 [num_images, 2] (height, width of the HD canvas, multiples of 448).
Output:  image_features [num_image_tokens, out_hidden], rows in the order the eager model scatters
         them into inputs_embeds.
Only num_images, max_num_crops and num_image_tokens vary; the crop geometry is fixed.
"""

from vlm_vision_onnx.families.base import FEATURES

INPUT_NAMES = ("pixel_values", "image_attention_mask", "image_sizes")
#: {input: (dtype, rank)} of every export and variant (a --static export's too).
INPUT_TYPES = {"pixel_values": ("float32", 5), "image_attention_mask": ("float32", 4), "image_sizes": ("int64", 2)}
OUTPUT_NAME = FEATURES
DIM_IMAGES, DIM_CROPS, DIM_TOKENS = "num_images", "max_num_crops", "num_image_tokens"
# {input name: {axis: symbolic dim}} and the output's.
DYNAMIC_AXES = {
    "pixel_values": {0: DIM_IMAGES, 1: DIM_CROPS},
    "image_attention_mask": {0: DIM_IMAGES, 1: DIM_CROPS},
    "image_sizes": {0: DIM_IMAGES},
    OUTPUT_NAME: {0: DIM_TOKENS},
}

# Optimize passes that apply, in order (names of quantize.optimize.PASSES). No constant folding before
# ORT's fusions: it merges the key mask's two Unsqueeze nodes, and ORT's Attention fusion then no
# longer finds the mask. No rotary (there is none). ORT fuses SkipLayerNormalization (its Attention fusion
# anchors on it: the activations are rank 3) and unskipln splits it again for ORT's CPU kernels. ORT runs
# as model_type 'vit' with AttentionMaskFormat.AttentionMask, and needs the head count and width from the
# metadata (the export's reshape shapes are not constants).
OPTIMIZE_PASSES = ("gemm", "ort", "unskipln")
METADATA_HEADS, METADATA_WIDTH = "num_attention_heads", "vision_hidden_size"
