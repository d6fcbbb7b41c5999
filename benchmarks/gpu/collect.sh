#!/usr/bin/env bash
# Bring a GPU run's results into the repo: the goldens in golden.tar.gz into golden/ (whatever
# device-class layout `record` wrote, cpu excepted) and gpu.json into benchmarks/results/gpu.json.
#
#   bash benchmarks/gpu/collect.sh FILES_AT [--repo DIR]
#
# FILES_AT is the folder where the device tool put the files of the run's $OUT. A dry run's
# results, and archive members other than relative folders and .json files, are refused and
# nothing is written. Review with `git status` / `git diff`, then commit.
set -euo pipefail
exec python3 "$(dirname "$0")/gpurun.py" collect "$@"
