"""The image kernels the family preprocessing ports share (numpy): torch's resampling kernels and normalisation.
The ports themselves live with their family: `families/qwen3_vl/preprocess.py` (images, through transformers'
torch-free processor), `families/qwen3_vl/preprocess_video.py`, `families/phi4_mm/preprocess.py`."""
