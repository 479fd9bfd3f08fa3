#!/usr/bin/env bash
# Regenerates the checked-in seed corpora from the targets' own seed writers (seeds.h):
#   tests/fuzz/make_corpus.sh BUILD_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:?usage: make_corpus.sh BUILD_DIR}
log=$(mktemp "${TMPDIR:-/tmp}/adjsnap-make-corpus.XXXXXX")
trap 'rm -f "$log"' EXIT
for name in data_plane_fuzzer arena_socket_fuzzer control_fuzzer catalog_fuzzer spool_fuzzer \
            plan_fuzzer config_fuzzer; do
  out="$here/corpus/$name"
  rm -rf "$out"
  mkdir -p "$out"
  # A target without a seed writer would fuzz instead: bounded.
  ADJSNAP_FUZZ_MAKE_CORPUS="$out" timeout 300 "$build/tests/fuzz/$name" > "$log" 2>&1 || {
    tail -20 "$log" >&2
    echo "make_corpus.sh: $name failed to write its seeds" >&2
    exit 1
  }
  echo "$name: $(ls "$out" | wc -l) seeds, $(cat "$out"/* | wc -c) bytes"
done
