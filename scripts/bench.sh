#!/usr/bin/env bash
# The benchmark command. Writes docs/benchmarks.md (and prints it):
#   1. builds, in release, the four function binaries and the `bench` binary;
#   2. runs criterion (bench/benches/handlers.rs): handler CPU per record, in process;
#   3. runs `bench`: retry cycles against moto through the real handlers and adapters
#      (calls, DynamoDB units by the published rules, SQS, scheduler, Lambda), dollars
#      per million retries beside Step Functions, Lambda durable functions and a
#      sleeping process, binary sizes and cold init, and a burst of 10,000 CANCELLED
#      responses through the local stack, on scripts/moto_server_patched.py (moto with
#      speed fixes to its SQS backend; stock moto never drains a 10,000 backlog).
# Then the adaptive backoff study writes its own section (`backoff-study`, a few seconds),
# `bench --delivery-table` its own (`delivery-table`: direct against outbox delivery, the
# cycle priced and six demo runs of 200 transactions, about 10 minutes),
# and the summary block is copied into README.md (scripts/sync-readme-bench.sh).
# BENCH_BURST=N sets the burst size (default 10000; 0 skips it). At the template's
# fleet limit of 10 requests/s the burst alone needs 1,000 s of drain. Extra arguments
# are passed to `bench` (see `bench --help`). About 30 minutes after the build on 2
# cores (BENCH_BURST=1000: about 8).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
. scripts/tools.sh
export CARGO_TARGET_DIR
started=$(date +%s)
burst="${BENCH_BURST:-10000}"
host="$(rustc -vV | sed -n 's/^host: //p')"

echo "== cargo build --release: the function binaries and bench" >&2
cargo build --release -p deferred-retry-bench \
  -p response-handler -p retry-handler -p reconciler -p audit-writer -p starter -p http-bridge

echo "== cargo bench --bench handlers (criterion)" >&2
cargo bench -p deferred-retry-bench --bench handlers

echo "== bench" >&2
command="./scripts/bench.sh"
if [ "$burst" != "10000" ]; then command="BENCH_BURST=$burst $command"; fi
if [ "$#" -gt 0 ]; then command="$command $*"; fi
"$CARGO_TARGET_DIR/release/bench" \
  --out docs/benchmarks.md \
  --template template.yaml \
  --criterion-dir "$CARGO_TARGET_DIR/criterion" \
  --bin-dir "$CARGO_TARGET_DIR/release" \
  --built-with "\`cargo build --release\` for $host (release profile: thin LTO, 1 codegen unit, symbols stripped, panic = unwind)" \
  --burst "$burst" \
  --burst-moto-server scripts/moto_server_patched.py \
  --command "$command" \
  "$@"
echo "== backoff-study (its section of docs/benchmarks.md)" >&2
cargo run --release -p deferred-retry-verify --bin backoff-study -- \
  --seed-start 1 --seeds 100 --transactions 2000 --days 14 --out docs/benchmarks.md >/dev/null
echo "== bench --delivery-table (its section of docs/benchmarks.md)" >&2
"$CARGO_TARGET_DIR/release/bench" --delivery-table --out docs/benchmarks.md >/dev/null
bash scripts/sync-readme-bench.sh
echo "bench: done in $(( $(date +%s) - started )) s (build included)" >&2
