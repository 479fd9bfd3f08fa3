#!/usr/bin/env bash
# Compiles every ```cpp (and ```c) block of README.md and docs/*.md, each as a translation unit
# of its own, against exactly the headers `cmake --install` installs, with -Wall -Wextra
# -Werror: a snippet a reader copies compiles warning-free.
#
#   compile_snippets.sh SOURCE_DIR
set -euo pipefail
src=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/include/snapd"
cp "$src"/client/include/snapd/*.h "$src/proto/snapd/status.h" "$work/include/snapd/"

count=0
failed=0
for doc in "$src/README.md" "$src"/docs/*.md; do
  # One file per block: NAME-N.cc or NAME-N.c, with a #line so errors name the document.
  awk -v out="$work/$(basename "$doc" .md)" -v doc="$doc" '
    /^```(cpp|c\+\+)$/ { n++; file = sprintf("%s-%d.cc", out, n); print "#line " NR+1 " \"" doc "\"" > file; next }
    /^```c$/           { n++; file = sprintf("%s-%d.c", out, n); print "#line " NR+1 " \"" doc "\"" > file; next }
    /^```/             { if (file != "") close(file); file = ""; next }
    file != ""         { print > file }
  ' "$doc"
done
for f in "$work"/*.cc "$work"/*.c; do
  [[ -e $f ]] || continue
  count=$((count + 1))
  if [[ $f == *.cc ]]; then
    compiler=(c++ -std=c++20)
  else
    compiler=(cc -std=c11)
  fi
  if "${compiler[@]}" -Wall -Wextra -Werror -I"$work/include" -c "$f" -o /dev/null; then
    echo "ok   $(sed -n '1s/.*"\(.*\)"/\1/p' "$f") (block $(basename "$f"))"
  else
    failed=$((failed + 1))
  fi
done
echo "$count snippets, $failed failed"
((count > 0 && failed == 0))
