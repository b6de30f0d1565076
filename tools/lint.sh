#!/usr/bin/env bash
# Style checks (CI runs this): clang-format (.clang-format) on every C++/CUDA source and ruff
# (ruff.toml: lint rules and formatting) on every Python file. With --fix, applies both.
#   pip install clang-format==23.1.5 ruff==0.17.6
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t sources < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh')
if [ "${1:-}" = "--fix" ]; then
  clang-format -i "${sources[@]}"
  ruff check --fix .
  ruff format .
  exit 0
fi
clang-format --dry-run --Werror "${sources[@]}"
ruff check .
ruff format --check .
echo "lint: clang-format and ruff clean (${#sources[@]} C++/CUDA files)"
