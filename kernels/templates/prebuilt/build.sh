#!/usr/bin/env bash
# Rebuilds the prebuilt modules of rms_norm_vec_prebuilt.toml with nvcc (the CUDA toolkit's, or
# `python3 -m pip install nvidia-cuda-nvcc nvidia-cuda-runtime`): one cubin per architecture,
# with line information so that sanitizer reports name source lines.
set -euo pipefail
cd "$(dirname "$0")"
NVCC=${NVCC:-nvcc}
for arch in sm_80 sm_90; do
  "$NVCC" -cubin -arch="$arch" -lineinfo -std=c++17 ${CUDA_INCLUDE:+-I "$CUDA_INCLUDE"} -o "rms_norm_vec.$arch.cubin" instantiate.cu
  echo "built rms_norm_vec.$arch.cubin ($(wc -c < "rms_norm_vec.$arch.cubin") bytes)"
done
