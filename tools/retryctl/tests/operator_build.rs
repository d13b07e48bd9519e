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

/// The packages `retryctl` links (normal dependencies only), one `name version` line
/// each, built with these extra cargo flags.
fn linked(flags: &[&str]) -> Vec<String> {
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
        .args(flags)
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(tree.lines().any(|l| l.starts_with("retryctl ")), "{tree}");
    tree.lines().map(str::to_owned).collect()
}

fn links(tree: &[String], package: &str) -> bool {
    tree.iter().any(|l| l.starts_with(&format!("{package} ")))
}

#[test]
fn the_operator_build_links_no_test_tooling() {
    let tree = linked(&["--no-default-features"]);
    let found: Vec<&str> = TEST_TOOLING
        .into_iter()
        .filter(|p| links(&tree, p))
        .collect();
    assert!(
        found.is_empty(),
        "the operator build links test tooling: {found:?}"
    );
}

/// The default build has `demo` and `verify`, so it links all three: the check above
/// reads the names as `cargo tree` prints them.
#[test]
fn the_default_build_links_the_sandbox() {
    let tree = linked(&[]);
    for p in TEST_TOOLING {
        assert!(links(&tree, p), "{p}: {tree:?}");
    }
}
