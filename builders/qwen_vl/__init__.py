"""Qwen3-VL vision encoder: grid math, export patcher, model building, validation layouts."""
