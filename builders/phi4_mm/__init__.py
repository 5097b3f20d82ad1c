"""Phi-4-multimodal image embedding (`Phi4MultimodalModel.embed_tokens_extend.image_embed`)."""
