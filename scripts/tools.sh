#!/usr/bin/env bash
# Installs (once) and puts on PATH the tools the tests and the local stack need:
# moto server, cargo-lambda (with zig), AWS SAM CLI, cfn-lint in .venv; checkov in
# .venv-checkov (its pins conflict with SAM CLI's). Source it: `. scripts/tools.sh`.
# Nothing is downloaded but packages from PyPI.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="${PYTHON:-python3}"
if [ ! -x "$root/.venv/bin/moto_server" ] || [ ! -x "$root/.venv/bin/cargo-lambda" ] || [ ! -x "$root/.venv/bin/sam" ] || [ ! -x "$root/.venv/bin/cfn-lint" ]; then
  echo "tools: installing moto[server], cargo-lambda, aws-sam-cli, cfn-lint into .venv" >&2
  "$py" -m venv "$root/.venv"
  "$root/.venv/bin/pip" install -q --disable-pip-version-check "moto[server]>=5.1,<6" cargo-lambda aws-sam-cli cfn-lint
fi
if [ ! -x "$root/.venv-checkov/bin/checkov" ]; then
  echo "tools: installing checkov into .venv-checkov" >&2
  "$py" -m venv "$root/.venv-checkov"
  "$root/.venv-checkov/bin/pip" install -q --disable-pip-version-check checkov
fi
# .venv first on PATH: cargo-lambda finds its zig there, SAM finds cargo-lambda.
export PATH="$root/.venv/bin:$PATH:$root/.venv-checkov/bin"
export SAM_CLI_TELEMETRY=0
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
# Never talk to real AWS from tests or the local stack: dummy credentials and region.
export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-testing}"
export AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-testing}"
export AWS_REGION="${AWS_REGION:-us-east-1}"
export AWS_DEFAULT_REGION="$AWS_REGION"
