#!/usr/bin/env bash
# Verifies a deployed stack end to end: `infra/verify-deploy.sh STACK [HARNESS_STACK] [retryctl verify options]`.
#
# Reads the main stack's and the harness stack's outputs (`aws cloudformation
# describe-stacks`) and the scheduler role (`aws iam get-role`) with the AWS CLI, then
# runs `retryctl verify` on them: every resource the code relies on, then three real
# transactions through the harness (docs/deploy.md, "Deploy to staging and verify").
# HARNESS_STACK defaults to STACK-harness (infra/samconfig.toml's name for staging).
# Options after the stack names go to `retryctl verify` (`--json`, `--timeout 600`,
# `--resources-only`, ...). Exit status: retryctl's (0 verified, 6 a check failed).
#
# Needs the AWS CLI and credentials allowed to read the stacks and the role, and to do
# what `retryctl verify` does (docs/deploy.md lists the permissions). Uses `retryctl`
# from PATH when it has `verify` (the operator build, `--no-default-features`, has
# not), else builds it from this checkout with cargo. For the local stack, run
# `retryctl verify` directly with the outputs file the local stack writes.
set -euo pipefail

usage() {
  echo "usage: $0 STACK [HARNESS_STACK] [retryctl verify options]" >&2
  exit 2
}
[ $# -ge 1 ] || usage
case "$1" in -*) usage ;; esac
stack="$1"
shift
harness="$stack-harness"
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
  harness="$1"
  shift
fi

command -v aws >/dev/null || {
  echo "verify-deploy: the AWS CLI is needed (aws cloudformation describe-stacks, aws iam get-role)" >&2
  exit 2
}
if command -v retryctl >/dev/null && retryctl verify --help >/dev/null 2>&1; then
  retryctl=(retryctl)
else
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  retryctl=(cargo run --quiet --manifest-path "$root/Cargo.toml" -p retryctl --)
fi

dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT

echo "verify-deploy: reading the outputs of $stack" >&2
aws cloudformation describe-stacks --stack-name "$stack" --output json >"$dir/main.json"
args=(--outputs "$dir/main.json")

if aws cloudformation describe-stacks --stack-name "$harness" --output json >"$dir/harness.json" 2>"$dir/harness.err"; then
  echo "verify-deploy: reading the outputs of $harness" >&2
  args+=(--outputs "$dir/harness.json")
else
  echo "verify-deploy: no harness stack $harness ($(tr -d '\n' <"$dir/harness.err")): resources only" >&2
fi

role_arn="$(aws cloudformation describe-stacks --stack-name "$stack" \
  --query "Stacks[0].Outputs[?OutputKey=='SchedulerRoleArn'].OutputValue" --output text)"
if [ -n "$role_arn" ] && [ "$role_arn" != "None" ] &&
  aws iam get-role --role-name "${role_arn##*/}" --output json >"$dir/role.json" 2>"$dir/role.err"; then
  args+=(--scheduler-role "$dir/role.json")
else
  echo "verify-deploy: cannot read the scheduler role ${role_arn:-?} ($(tr -d '\n' <"$dir/role.err" 2>/dev/null)): its trust policy will not be checked" >&2
fi

"${retryctl[@]}" verify "${args[@]}" "$@"
