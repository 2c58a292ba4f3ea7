#!/usr/bin/env bash
# Rebuilds the prebuilt modules of rms_norm_vec_prebuilt.toml with nvcc (the CUDA toolkit's, or
# `python3 -m pip install nvidia-cuda-nvcc nvidia-cuda-runtime`): one cubin per architecture,
# with line information so that sanitizer reports name source lines.
#
# nvcc records absolute folders in the line table (this folder, the CUDA include folder): the
# cubins are committed, so each is rewritten in place to a relative path of the same length
# (`kernels/templates`, `cuda/include`, padded with `/.`), keeping every offset in the file.
set -euo pipefail
cd "$(dirname "$0")"
NVCC=${NVCC:-nvcc}
for arch in sm_80 sm_90; do
  out="rms_norm_vec.$arch.cubin"
  "$NVCC" -cubin -arch="$arch" -lineinfo -std=c++17 ${CUDA_INCLUDE:+-I "$CUDA_INCLUDE"} -o "$out" instantiate.cu
  python3 - "$out" "$PWD" "${CUDA_INCLUDE:-}" <<'PY'
import re, sys
path, here, cuda = sys.argv[1], sys.argv[2], sys.argv[3]
data = open(path, "rb").read()

def same_length(old: bytes, new: str) -> bytes:
    # `a//b` and trailing `/.` name the same folder as `a/b`.
    if (len(old) - len(new)) % 2:
        new = new.replace("/", "//", 1)
    pad = len(old) - len(new)
    if pad < 0:
        sys.exit(f"{path}: {old!r} is shorter than {new!r}; build from a longer path")
    return (new + "/." * (pad // 2)).encode()

for old, new in [(here + "/..", "kernels/templates"), (cuda, "cuda/include")]:
    if old and old.encode() in data:
        data = data.replace(old.encode(), same_length(old.encode(), new))
left = re.findall(rb"/(?:home|root|work|tmp|Users)/[^\0]*", data)
if left:
    sys.exit(f"{path}: still holds machine paths {left}")
open(path, "wb").write(data)
PY
  echo "built $out ($(wc -c < "$out") bytes)"
done
