#!/usr/bin/env bash
# Packs what tests/gpu/run.sh needs on a lent GPU machine that cannot build ringgrad (its image
# has CUDA, cuBLAS, cuDNN and NCCL but none of our Debian dev packages, and no network):
# the GPU test suites and the binaries run.sh times, stripped; the shared libraries they load
# that such an image lacks (OpenBLAS and its Fortran runtime, libgomp, libcudart); and a
# Fashion-MNIST subset (12,000 training and 2,000 test images) for the training smoke run.
# Everything goes into one .gpu/bundle.tar.xz (about 20 MiB), which .gitignore leaves out:
# carry `.gpu` to the device and run `bash tests/gpu/run.sh` there; it finds the bundle.
#   bash tests/gpu/bundle.sh [BUILD_DIR]     (default build; configured with CUDA on)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
data=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
binaries=(test_gpu test_comm_gpu ringgrad-train train_throughput all_reduce_perf)

cmake --build "$build" -j "$(nproc)" --target "${binaries[@]}"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/data"
for b in "${binaries[@]}"; do strip -o "$stage/bin/$b" "$build/bin/$b"; done

# Every library the binaries load, less glibc, the GCC runtime every image has, and the CUDA
# libraries the device's own toolkit and wheels provide (cuBLAS and NCCL alone are 700 MiB).
ldd "${binaries[@]/#/$build/bin/}" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  grep -Ev '/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|libz)\.so' |
  grep -Ev '/lib(cublas|cublasLt|cudnn[a-z_]*|nccl)\.so' |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done

python3 - "$data" "$stage/data" <<'EOF'
# Keeps the first N images and labels of each IDX file, with the count in its header updated.
import gzip, struct, sys
source, target = sys.argv[1:]
for name, keep in [("train-images-idx3-ubyte", 12000), ("train-labels-idx1-ubyte", 12000),
                   ("t10k-images-idx3-ubyte", 2000), ("t10k-labels-idx1-ubyte", 2000)]:
    raw = gzip.open(f"{source}/{name}.gz").read()
    dims = raw[3]
    shape = struct.unpack(f">{dims}I", raw[4:4 + 4 * dims])
    item = 1
    for d in shape[1:]:
        item *= d
    header = raw[:4] + struct.pack(f">{dims}I", keep, *shape[1:])
    body = raw[4 + 4 * dims:][:keep * item]
    with gzip.open(f"{target}/{name}.gz", "wb") as out:
        out.write(header + body)
EOF

mkdir -p .gpu
tar -C "$stage" -cJf .gpu/bundle.tar.xz .
echo "wrote .gpu/bundle.tar.xz ($(du -h .gpu/bundle.tar.xz | cut -f1)): $(ls "$stage/bin" | tr '\n' ' ')+ $(ls "$stage/lib" | tr '\n' ' ')"
