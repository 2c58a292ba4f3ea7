# Sourced by the ci/ scripts: makes NVRTC and the CUDA headers available, installing them from
# the PyPI wheels into .cuda-wheels/ when this machine has no CUDA toolkit.
if [ -z "${CUDAFUZZ_CUDA_INCLUDE:-}" ] && [ ! -f /usr/local/cuda/include/cuda_fp16.h ] && [ ! -f "${CUDA_HOME:-/nonexistent}/include/cuda_fp16.h" ]; then
  # NVRTC, the CUDA headers, CCCL (CUB for NVRTC builds) and nvcc (`compiler = "nvcc"`
  # manifests), all in one pip call so that they share nvidia/cu13.
  if [ ! -f .cuda-wheels/nvidia/cu13/include/cuda_fp16.h ] || [ ! -d .cuda-wheels/nvidia/cu13/include/cccl/cub ] || [ ! -x .cuda-wheels/nvidia/cu13/bin/nvcc ]; then
    echo "== installing NVRTC, the CUDA headers, CCCL and nvcc from PyPI into .cuda-wheels/"
    rm -rf .cuda-wheels
    python3 -m pip install --quiet --disable-pip-version-check --target .cuda-wheels nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cuda-cccl nvidia-cuda-nvcc
  fi
  export LD_LIBRARY_PATH="$PWD/.cuda-wheels/nvidia/cu13/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export CUDAFUZZ_CUDA_INCLUDE="$PWD/.cuda-wheels/nvidia/cu13/include"
fi
