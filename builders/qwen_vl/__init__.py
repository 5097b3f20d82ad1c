"""The Qwen vision encoders, every generation: grid math, export patcher, model building, validation layouts."""
