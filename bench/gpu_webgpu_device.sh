#!/usr/bin/env bash
# The GPU side of bench.gpu_webgpu on a machine with an NVIDIA GPU, its driver, Python with PyTorch (CUDA), onnx
# and numpy, and no network (docs/benchmarks.md, "GPU"):
#
#   bash bench/gpu_webgpu_device.sh WHEELS DEBS run|profile FOLDER OUT [OPTIONS]   (python -m bench.gpu_webgpu's)
#
# WHEELS: wheels for that Python, installed with --no-deps into /tmp/site (first on PYTHONPATH): onnxruntime-webgpu
#         (imported as onnxruntime there: the WebGPU EP, and the CPU EP of the fp32 reference), and transformers with
#         what its pinned version needs beyond the machine's own packages;
# DEBS:   the Vulkan loader and GL vendor-neutral dispatch (libvulkan1, libglvnd0, ... .debs) the NVIDIA driver's ICD
#         loads, unpacked into /;
# FOLDER: what `python -m bench.gpu_webgpu prepare BUILD FOLDER` wrote; OUT: where the results go.
# The WebGPU install `runtime webgpu-check` wants (env.sh + venv/bin/python) is made in /tmp/webgpu-home and named
# by $VLM_WEBGPU_HOME: env.sh selects the NVIDIA driver's Vulkan ICD, venv/bin/python is this Python.
set -euo pipefail
wheels=$1 debs=$2
shift 2
for f in "$debs"/*.deb; do if [ -e "$f" ]; then dpkg -x "$f" /; fi; done
ldconfig
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$wheels"/*.whl
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
icd=$(ls /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json \
      /etc/vulkan/icd.d/nvidia_icd.json 2>/dev/null | head -1 || true)
if [ -z "$icd" ]; then echo "error: no NVIDIA Vulkan ICD (nvidia_icd.json) on this machine" >&2; exit 2; fi
home=/tmp/webgpu-home
mkdir -p "$home/venv/bin"
printf 'export VK_DRIVER_FILES=%s VK_ICD_FILENAMES=%s\n' "$icd" "$icd" > "$home/env.sh"
printf '#!/bin/sh\nexec %s "$@"\n' "$(command -v python3)" > "$home/venv/bin/python"
chmod +x "$home/venv/bin/python"
# shellcheck source=/dev/null
source "$home/env.sh"
export VLM_WEBGPU_HOME=$home
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -m bench.gpu_webgpu "$@"
