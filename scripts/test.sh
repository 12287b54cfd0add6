#!/usr/bin/env bash
# Runs the whole test suite (unit, storage contract, real apiserver with kubectl and the Python
# client, the data plane on this kernel, and IPVS mode in a throw-away VM). Slow scale tests
# are marked and run from bench/, not here.
#
# Two pytest workers (pytest-xdist), one test file at a time each: most tests wait on
# processes, sockets and the kernel rather than compute, and a file's module-scoped
# environment (apiserver, namespaces, proxies) stays on one worker. (The modules sharing one
# `kubesvc up`, SHARED_UP_MODULES in tests/support/up.py, go to one worker together:
# tests/conftest.py's scheduler. Before the workers start, the controller rewrites the test
# files' asserts once for both: tests/support/rewritecache.py.) (Three were tried: no
# faster, 16.3 min against 16.3, and the extra load broke three timing-bounded tests.) With no arguments (the
# whole suite), the IPVS tests start first in their VM in the background
# (tests/support/ipvs_vm.py): tests/kernel/test_proxy_ipvs_vm.py collects their result.
# Files go to the workers longest first (tests/file_times.json, by tests/conftest.py; hence
# --no-loadscope-reorder, which keeps that order instead of xdist's most-tests-first), so the
# short ones fill the tail. The 40 slowest tests and the 30 slowest files with each worker's
# finish are listed at the end (tests/support/filetimes.py; KUBESVC_FILE_TIMES=run.jsonl keeps
# every file's figures, `python3 -m tests.support.filetimes update run.jsonl` makes them the next
# order): the suite must stay under 15 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -eq 0 ]; then
  run_dir=$(mktemp -d /tmp/kubesvc-ipvs-vm.XXXXXX)
  trap 'python3 -m tests.support.ipvs_vm stop "$run_dir"; rm -rf "$run_dir"' EXIT
  # The VM sees this tree read-only: without bytecode on disk every process in it would compile
  # each module it imports, under emulation
  python3 -m compileall -q -j 0 src tests > /dev/null
  python3 -m tests.support.ipvs_vm start "$run_dir"
  export KUBESVC_IPVS_VM_RUN="$run_dir"
fi
python3 -m pytest -q -m "not slow" -p no:cacheprovider -p tests.support.filetimes -n 2 --dist loadfile --no-loadscope-reorder --durations=40 "$@"
