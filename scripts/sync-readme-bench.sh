#!/usr/bin/env bash
# Copies the summary block that ./scripts/bench.sh wrote into docs/benchmarks.md (between
# the bench-summary markers) into README.md, so the README's table is the benchmark's
# own output. Run by scripts/bench.sh at its end.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python3 - "$root/docs/benchmarks.md" "$root/README.md" <<'PY'
import sys
start, end = "<!-- bench-summary:start -->", "<!-- bench-summary:end -->"
src = open(sys.argv[1], encoding="utf-8").read()
block = src[src.index(start) + len(start):src.index(end)]
readme = open(sys.argv[2], encoding="utf-8").read()
i, j = readme.index(start) + len(start), readme.index(end)
open(sys.argv[2], "w", encoding="utf-8").write(readme[:i] + block + readme[j:])
PY
echo "README.md: benchmark summary updated from docs/benchmarks.md" >&2
