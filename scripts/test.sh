#!/usr/bin/env bash
# The test command: installs what it needs, runs the offline template checks, then
# every Rust test (domain, adapters against moto on loopback, handlers, smoke test of
# the Lambda binaries, model check, simulator, local stack, retryctl).
# The last line printed is cargo test's own summary.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
. scripts/tools.sh
for check in scripts/check-*.sh; do
  [ -e "$check" ] || continue
  echo "== $check" >&2
  bash "$check"
done
exec cargo test --workspace --no-fail-fast
