#!/usr/bin/env bash
# Compiles every ```cpp (and ```c) block of README.md and docs/*.md, each as a translation unit
# of its own, against exactly the headers `cmake --install` installs, with -Wall -Wextra
# -Werror: a snippet a reader copies compiles warning-free. Given a Fortran compiler, every
# ```fortran block too, against the `adjsnap` module compiled from client/fortran.
#
#   compile_snippets.sh SOURCE_DIR [FORTRAN_COMPILER]
set -euo pipefail
src=$1
fortran=${2:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/include/adjsnap"
cp "$src"/client/include/adjsnap/*.h "$src/proto/adjsnap/status.h" "$work/include/adjsnap/"

count=0
failed=0
for doc in "$src/README.md" "$src"/docs/*.md; do
  # One file per block: NAME-N.cc, NAME-N.c or NAME-N.f90, with a line marker so errors name
  # the document.
  awk -v out="$work/$(basename "$doc" .md)" -v doc="$doc" '
    /^```(cpp|c\+\+)$/ { n++; file = sprintf("%s-%d.cc", out, n); print "#line " NR+1 " \"" doc "\"" > file; next }
    /^```c$/           { n++; file = sprintf("%s-%d.c", out, n); print "#line " NR+1 " \"" doc "\"" > file; next }
    /^```fortran$/     { n++; file = sprintf("%s-%d.f90", out, n); print "# " NR+1 " \"" doc "\"" > file; next }
    /^```/             { if (file != "") close(file); file = ""; next }
    file != ""         { print > file }
  ' "$doc"
done
if [[ -n $fortran ]]; then
  mkdir -p "$work/fortran"
  "$fortran" -c "$src/client/fortran/adjsnap.f90" -J"$work/fortran" -o "$work/fortran/adjsnap.o"
fi
for f in "$work"/*.cc "$work"/*.c "$work"/*.f90; do
  [[ -e $f ]] || continue
  if [[ $f == *.f90 && -z $fortran ]]; then
    echo "skip $(sed -n '1s/.*"\(.*\)"/\1/p' "$f") (block $(basename "$f")): no Fortran compiler"
    continue
  fi
  count=$((count + 1))
  if [[ $f == *.cc ]]; then
    compiler=(c++ -std=c++20)
  elif [[ $f == *.c ]]; then
    compiler=(cc -std=c11)
  else  # preprocessed for the line marker, which names the document in errors
    compiler=("$fortran" -cpp -I"$work/fortran")
  fi
  if "${compiler[@]}" -Wall -Wextra -Werror -I"$work/include" -c "$f" -o /dev/null; then
    echo "ok   $(sed -n '1s/.*"\(.*\)"/\1/p' "$f") (block $(basename "$f"))"
  else
    failed=$((failed + 1))
  fi
done
echo "$count snippets, $failed failed"
((count > 0 && failed == 0))
