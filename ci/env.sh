# Sourced by the ci/ scripts: makes NVRTC and the CUDA headers available, installing them from
# the PyPI wheels into .cuda-wheels/ when this machine has no CUDA toolkit.
if [ -z "${CUDAFUZZ_CUDA_INCLUDE:-}" ] && [ ! -f /usr/local/cuda/include/cuda_fp16.h ] && [ ! -f "${CUDA_HOME:-/nonexistent}/include/cuda_fp16.h" ]; then
  if [ ! -f .cuda-wheels/nvidia/cu13/include/cuda_fp16.h ]; then
    echo "== installing NVRTC and CUDA headers from PyPI into .cuda-wheels/"
    python3 -m pip install --quiet --disable-pip-version-check --target .cuda-wheels nvidia-cuda-nvrtc nvidia-cuda-runtime
  fi
  export LD_LIBRARY_PATH="$PWD/.cuda-wheels/nvidia/cu13/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export CUDAFUZZ_CUDA_INCLUDE="$PWD/.cuda-wheels/nvidia/cu13/include"
fi
