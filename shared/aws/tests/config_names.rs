//! Each configuration variable is named once in the Rust source: its descriptor in
//! `aws::config::vars`. Everything else (the local stack, `retryctl`, the tests)
//! names it through that descriptor.

use aws::config::{AuditWriterConfig, ReconcilerConfig, ResponseHandlerConfig, RetryHandlerConfig};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Files where a variable's name may appear once more as a string literal, each
/// with its reason. None today.
const EXCEPTIONS: &[(&str, &str)] = &[];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "target" && name != ".git" && !name.starts_with(".venv") {
                rust_files(&path, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

#[test]
fn each_variable_is_named_once_in_the_source() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    assert!(files.len() > 50, "found only {} Rust files", files.len());
    let texts: Vec<(PathBuf, String)> = files
        .into_iter()
        .filter_map(|p| std::fs::read_to_string(&p).ok().map(|t| (p, t)))
        .collect();
    let names: BTreeSet<&str> = [
        ResponseHandlerConfig::env_vars(),
        RetryHandlerConfig::env_vars(),
        ReconcilerConfig::env_vars(),
        AuditWriterConfig::env_vars(),
    ]
    .concat()
    .into_iter()
    .collect();
    assert!(names.len() > 30, "{names:?}");
    let mut problems = Vec::new();
    for name in names {
        let literal = format!("\"{name}\"");
        let places: Vec<String> = texts
            .iter()
            .flat_map(|(path, text)| {
                let shown = path
                    .strip_prefix(&root)
                    .unwrap_or(path)
                    .display()
                    .to_string();
                std::iter::repeat_n(shown, text.matches(&literal).count())
            })
            .filter(|shown| !EXCEPTIONS.iter().any(|(file, _)| shown == file))
            .collect();
        if places.len() != 1 {
            problems.push(format!("{literal} {} times: {places:?}", places.len()));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
