#!/usr/bin/env bash
# Runs the whole test suite (unit, storage contract, real apiserver with kubectl and the Python
# client). Slow scale tests are marked and run from bench/, not here.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 -m pytest -q -m "not slow" -p no:cacheprovider "$@"
