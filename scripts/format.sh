#!/usr/bin/env bash
# Formats gpumux's C++ and CUDA sources with clang-format (.clang-format:
# Google's style at 100 columns). --check changes nothing and fails, listing
# the files, when any would change (CI runs it; scripts/test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
check=false
[[ ${1:-} == --check ]] && check=true
command -v clang-format > /dev/null || { echo "format.sh: clang-format is not installed (apt-get install clang-format)" >&2; exit 1; }
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu')
if ! $check; then
  clang-format -i "${files[@]}"
  exit 0
fi
unformatted=()
for file in "${files[@]}"; do
  clang-format --dry-run -Werror "$file" > /dev/null 2>&1 || unformatted+=("$file")
done
if ((${#unformatted[@]} > 0)); then
  echo "format.sh: these files are not formatted (run scripts/format.sh):" >&2
  printf '  %s\n' "${unformatted[@]}" >&2
  exit 1
fi
echo "format.sh: all ${#files[@]} files are formatted"
