#!/usr/bin/env bash
# Installs dependencies, builds, and runs the test suite.
#   scripts/test.sh          the full suite (what CI runs)
#   scripts/test.sh quick    only the tests labelled quick (seconds)
set -euo pipefail
cd "$(dirname "$0")/.."
label=${1:-full}
scripts/install-deps.sh
scripts/build.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir build -L "$label" --output-on-failure --timeout 900
