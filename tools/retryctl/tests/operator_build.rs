//! The operator build (`--no-default-features`, what `docs/operations.md` installs)
//! links no test tooling: no testkit (moto launcher, recording proxy, fault injector),
//! no staging harness, no sandbox.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::process::Command;

/// Packages the operator build must not link.
const TEST_TOOLING: [&str; 3] = [
    "deferred-retry-testkit",
    "deferred-retry-harness",
    "deferred-retry-sandbox",
];

#[test]
fn the_operator_build_links_no_test_tooling() {
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.toml");
    let out = Command::new(env!("CARGO"))
        .args([
            "tree",
            "--manifest-path",
            manifest,
            "-e",
            "normal",
            "-p",
            "retryctl",
        ])
        .args([
            "--no-default-features",
            "--prefix",
            "none",
            "--format",
            "{p}",
        ])
        .output()
        .expect("cargo tree runs");
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(tree.lines().any(|l| l.starts_with("retryctl ")), "{tree}");
    let linked: Vec<&str> = tree
        .lines()
        .filter(|l| TEST_TOOLING.iter().any(|p| l.starts_with(&format!("{p} "))))
        .collect();
    assert!(
        linked.is_empty(),
        "the operator build links test tooling: {linked:?}"
    );
}

/// The default build still has `demo` and `verify`: the check above looks at the
/// build it means to.
#[test]
fn the_default_build_links_the_sandbox() {
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.toml");
    let out = Command::new(env!("CARGO"))
        .args([
            "tree",
            "--manifest-path",
            manifest,
            "-e",
            "normal",
            "-p",
            "retryctl",
        ])
        .args(["--prefix", "none", "--format", "{p}"])
        .output()
        .expect("cargo tree runs");
    let tree = String::from_utf8_lossy(&out.stdout);
    for p in TEST_TOOLING {
        assert!(
            tree.lines().any(|l| l.starts_with(&format!("{p} "))),
            "{p}: {tree}"
        );
    }
}
