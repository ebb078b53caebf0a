#!/usr/bin/env bash
# Configures and builds Lattice into build/ (Release). The CUDA backend is
# built whenever /usr/local/cuda/bin/nvcc exists (LATTICE_CUDA=AUTO).
#   BUILD_DIR=build LATTICE_CUDA=AUTO scripts/build.sh [ninja targets...]
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLATTICE_CUDA="${LATTICE_CUDA:-AUTO}" >/dev/null
ninja -C "$build_dir" "$@"
