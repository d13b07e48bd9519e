#!/usr/bin/env bash
# Offline checks of the two SAM templates — the main stack (template.yaml) and the
# staging harness (infra/template.yaml) — run by scripts/test.sh before cargo test;
# runs standalone too: sam validate --lint, cfn-lint, checkov (0 failed, every skip
# explained), no wildcard IAM action, every samconfig environment's parameters parsed
# by SAM CLI's own parser and checked against its template, and `sam build` producing
# a bootstrap for each function (x86_64: CI machines have that Rust target; production
# defaults to arm64 through the Architecture parameter).
# Nothing here talks to AWS: SAM telemetry is off, checkov downloads nothing.
# CHECK_TEMPLATE_BUILD=release (default: the profile users deploy, LTO included),
# debug (SAM_BUILD_MODE=debug: same wiring and toolchain, about a third of the CPU time
# cold), or skip.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
. scripts/tools.sh
export SAM_CLI_TELEMETRY=0

templates=(template.yaml infra/template.yaml)
say() { echo "check-template: $*" >&2; }
fail() { say "FAILED: $*"; exit 1; }

for template in "${templates[@]}"; do
say "== $template"
# 1. SAM's own validation (transform) with its linter.
say "sam validate --lint: transforms $template with the SAM translator and lints the result"
sam validate --lint --template-file "$template" >&2 || fail "sam validate --lint $template"

# 2. cfn-lint on the template as written.
say "cfn-lint $template: CloudFormation schema, references, conditions, best practices"
cfn-lint "$template" >&2 || fail "cfn-lint $template"

# 3. checkov: zero failed checks; every skip is an inline comment with its reason.
say "checkov --framework cloudformation: security checks (zero failed allowed)"
out="$(checkov -f "$template" --framework cloudformation --quiet --compact --skip-download 2>&1)" || {
  echo "$out" >&2
  fail "checkov reports failed checks in $template"
}
summary="$(echo "$out" | grep -E 'Passed checks: [0-9]+, Failed checks: [0-9]+, Skipped checks: [0-9]+' || true)"
[ -n "$summary" ] || { echo "$out" >&2; fail "checkov printed no summary for $template"; }
echo "$summary" | grep -q 'Failed checks: 0,' || { echo "$out" >&2; fail "checkov $template: $summary"; }
say "checkov: $summary"
bad_skips="$(grep -nE 'checkov:skip=' "$template" | grep -vE 'checkov:skip=CKV2?_[A-Z0-9_]+:.{40,}' || true)"
[ -z "$bad_skips" ] || { echo "$bad_skips" >&2; fail "a checkov skip without a real reason in $template"; }
grep -oE 'checkov:skip=CKV2?_[A-Z0-9_]+' "$template" | sort | uniq -c | sed 's/^/check-template:   skipped (reason inline): /' >&2
# 4. No IAM action is `*` or `service:*` (nor any other wildcard), anywhere: identity
#    policies, trust policies, the key policy, queue policies, inside !If branches.
say "IAM actions: no '*' and no 'service:*'"
grep -nE "^[[:space:]]*(-[[:space:]]+)?(Action:[[:space:]]*)?[\"']?[a-zA-Z0-9-]+:\*" "$template" >&2 \
  && fail "grep found a service:* action"
grep -nE "Action:[[:space:]]*\[?[[:space:]]*[\"']?\*" "$template" >&2 && fail "grep found a '*' action"
python3 - "$template" >&2 <<'PY' || fail "an IAM action with a wildcard in $template"
import sys, yaml

class Loader(yaml.SafeLoader):
    pass

def any_tag(loader, suffix, node):
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_mapping(node, deep=True)

Loader.add_multi_constructor("!", any_tag)
doc = yaml.load(open(sys.argv[1]), Loader=Loader)
found, bad = [], []

def strings(v):
    if isinstance(v, str):
        yield v
    elif isinstance(v, list):
        for x in v:
            yield from strings(x)
    elif isinstance(v, dict):
        for x in v.values():
            yield from strings(x)

def walk(v):
    if isinstance(v, dict):
        for k, x in v.items():
            if k in ("Action", "NotAction"):
                for a in strings(x):
                    found.append(a)
                    if "*" in a or k == "NotAction":
                        bad.append(f"{k}: {a}")
            walk(x)
    elif isinstance(v, list):
        for x in v:
            walk(x)

walk(doc)
if not found:
    sys.exit("no IAM action found at all: the check itself is broken")
if bad:
    sys.exit("wildcard actions: " + ", ".join(bad))
print(f"check-template:   {len(found)} IAM actions, {len(set(found))} distinct, none with a wildcard")
PY

done

# 4b. Every samconfig environment: SAM CLI's own parser reads its parameter_overrides
#     (the ones `sam build` and `sam deploy` will pass), and each one is a parameter of
#     the template with an allowed value, AllowedPattern included (read from the
#     template, applied to each value of a list as CloudFormation does): a value SAM
#     would split (a space without quotes) or drop (an empty value), or a documentation
#     placeholder (oncall@example.com, account 111122223333), is caught here, not at
#     deploy time. An environment named `<name>-template` is a template to copy: its
#     placeholders are listed, not failed (scripts/check-samconfig.py).
say "samconfig: every environment's parameter_overrides against its template"
python3 scripts/check-samconfig.py samconfig.toml template.yaml infra/samconfig.toml infra/template.yaml >&2 \
  || fail "samconfig parameters"

# 5. sam build: cargo-lambda (zig as the linker) compiles each function in release
#    mode from the workspace root, in the shared CARGO_TARGET_DIR. A separate build
#    directory keeps these x86_64 artifacts away from a user's `sam build` output.
mode="${CHECK_TEMPLATE_BUILD:-release}"
case "$mode" in
  skip)
    say "sam build: skipped (CHECK_TEMPLATE_BUILD=skip)"
    exit 0 ;;
  release) unset SAM_BUILD_MODE ;;
  debug) export SAM_BUILD_MODE=debug ;;
  *) fail "CHECK_TEMPLATE_BUILD must be release, debug or skip, not '$mode'" ;;
esac
# The main stack's seven functions (an HttpEndpoint given, so the HTTP bridge is in
# it, and RequestDelivery=outbox, so the publisher is), then the harness's one (its
# MainStackName only names the imports; nothing is resolved at build time).
builds=(
  "template.yaml|.aws-sam/check-x86_64|Architecture=x86_64 HttpEndpoint=https://api.example.com/pay RequestDelivery=outbox"
  "infra/template.yaml|.aws-sam/check-harness-x86_64|MainStackName=check Architecture=x86_64"
)
binaries=(
  ".aws-sam/check-x86_64|ResponseHandlerFunction|response-handler"
  ".aws-sam/check-x86_64|RetryHandlerFunction|retry-handler"
  ".aws-sam/check-x86_64|ReconcilerFunction|reconciler"
  ".aws-sam/check-x86_64|AuditWriterFunction|audit-writer"
  ".aws-sam/check-x86_64|StarterFunction|starter"
  ".aws-sam/check-x86_64|HttpBridgeFunction|http-bridge"
  ".aws-sam/check-x86_64|PublisherFunction|publisher"
  ".aws-sam/check-harness-x86_64|HarnessFunction|harness"
)
start=$(date +%s)
for b in "${builds[@]}"; do
  IFS='|' read -r template build_dir overrides <<<"$b"
  say "sam build --parallel $template ($mode, $overrides, CARGO_TARGET_DIR=$CARGO_TARGET_DIR) into $build_dir"
  rm -rf "$build_dir"
  # shellcheck disable=SC2086 # the overrides are Key=Value words
  sam build --parallel --template-file "$template" \
    --parameter-overrides $overrides \
    --build-dir "$build_dir" --cache-dir .aws-sam/check-cache >&2 || fail "sam build $template"
done
elapsed=$(( $(date +%s) - start ))
for b in "${binaries[@]}"; do
  IFS='|' read -r build_dir logical_id function <<<"$b"
  bin="$build_dir/$logical_id/bootstrap"
  [ -x "$bin" ] || fail "sam build produced no executable $bin ($function)"
  magic="$(head -c 4 "$bin" | od -An -tx1 | tr -d ' \n')"
  [ "$magic" = "7f454c46" ] || fail "$bin is not an ELF executable"
  # ELF header byte 18-19: e_machine; 0x3e = x86-64.
  machine="$(od -An -tx1 -j18 -N1 "$bin" | tr -d ' \n')"
  [ "$machine" = "3e" ] || fail "$bin is not x86-64 (e_machine 0x$machine)"
  say "  $function: $bin ($(wc -c <"$bin") bytes, ELF x86-64)"
done
say "sam build ($mode) took ${elapsed} s"
# CHECK_TEMPLATE_CLEAN=1 (CI sets it): once checked, the x86_64 artifacts are removed;
# no test reads them, and on a small CI disk they are ~1.2 GB the test build needs.
if [ "${CHECK_TEMPLATE_CLEAN:-0}" = 1 ]; then
  rm -rf .aws-sam/check-x86_64 .aws-sam/check-harness-x86_64 .aws-sam/check-cache \
    "$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu"
  say "removed the checked build artifacts (CHECK_TEMPLATE_CLEAN=1)"
fi
say "all template checks passed"
