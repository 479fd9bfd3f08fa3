#!/usr/bin/env bash
# The naming rules of .clang-tidy (readability-identifier-naming: types and functions
# CamelCase, variables lower_case, private members with a trailing _, constexpr kName), run by
# clang-tidy over every source file of adjsnapd's own in a build's compile_commands.json (daemon/,
# client/, kernels/, proto/floor/; not the generated protos, tests or fuzzers). Fails, naming
# each, when a name breaks them.
#   bash tests/lint/naming.sh [BUILD_DIR]     # default build-clang (tests/run.sh configures it)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-clang}
[[ -f $build/compile_commands.json ]] || { echo "$build: no compile_commands.json" >&2; exit 2; }
command -v run-clang-tidy > /dev/null || { echo "no run-clang-tidy: bash deploy/install-deps.sh" >&2; exit 2; }
log=$build/naming.log
run-clang-tidy -p "$build" -j "$(nproc)" -quiet -checks='-*,readability-identifier-naming' \
  "$PWD/(daemon|client/src|client/tools|client/examples|kernels|proto/floor)/" > "$log" 2>&1 || true
# Only warnings in adjsnapd's own files count (the system headers' are not shown without a
# header filter anyway); the files checked are counted so an empty run cannot pass.
checked=$(grep -c '^clang-tidy' "$log" || true)
found=$(sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -E "^$PWD/.*warning: invalid case style" | sort -u || true)
if ((checked == 0)); then
  echo "naming: clang-tidy checked no file (see $log)" >&2
  exit 1
fi
if [[ -n $found ]]; then
  echo "naming: names that break .clang-tidy's rules:" >&2
  echo "$found" >&2
  exit 1
fi
echo "naming: $checked files follow .clang-tidy's naming rules"
