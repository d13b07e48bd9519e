#!/usr/bin/env bash
# README command 1: the whole pipeline on this machine — moto on loopback, every
# resource of template.yaml, the Lambda handlers in process behind emulators of
# Lambda's SQS event source mapping and of EventBridge Scheduler, the reconciler on
# its cron, a simulated external service, a workload and a report.
# Flags go to `retryctl demo` (see `docs/operations.md`), e.g. `--transactions 1000`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
. scripts/tools.sh
exec cargo run --quiet --release -p retryctl -- demo "$@"
