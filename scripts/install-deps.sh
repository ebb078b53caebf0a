#!/usr/bin/env bash
# Installs every Debian package Lattice needs to build, test and train
# (with oneDNN for bf16 matmuls on CPUs with AVX512-BF16, and
# python3-matplotlib for scripts/plot_metrics.py).
# Idempotent: packages already present are left alone, and apt is only
# called when something is missing. Run as root (or with sudo available).
#   scripts/install-deps.sh           build + test dependencies
#   scripts/install-deps.sh --bench   also python3-torch for bench/ references
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git procps
  openmpi-bin libopenmpi-dev
  libopenblas-openmp-dev libdnnl-dev
  libyaml-cpp-dev libfmt-dev nlohmann-json3-dev libpcre2-dev
  libgtest-dev
  python3-matplotlib iproute2
)
if [[ "${1:-}" == "--bench" ]]; then
  packages+=(python3-torch)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if (( ${#missing[@]} == 0 )); then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
