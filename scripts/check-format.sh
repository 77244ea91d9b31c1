#!/usr/bin/env bash
# Fails when a tracked C++ or CUDA file is not clang-format clean (the repository's .clang-format).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh')
[ ${#files[@]} -gt 0 ] || { echo "no C++ files tracked"; exit 0; }
bad=()
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  printf 'not clang-format clean (run `make format`): %s\n' "${bad[@]}"
  exit 1
fi
echo "${#files[@]} files clang-format clean"
