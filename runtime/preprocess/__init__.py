"""Model preprocessing without torch: Qwen3-VL images (transformers PIL processor), Qwen3-VL video and Phi-4-multimodal images (numpy ports)."""
