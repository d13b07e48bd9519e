//! The progress bar `retryctl demo` and `retryctl loadtest` draw on stderr. One file,
//! compiled into both crates: the operator build of `retryctl` links no sandbox, so
//! its `verify` feature takes this file by path.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::time::Duration;

/// A bar of `len` transactions, the count of those done labelled `done`, drawn on
/// stderr when `show` (hidden otherwise); it ticks by itself every 200 ms.
pub fn bar(show: bool, len: u64, done: &str) -> ProgressBar {
    let bar = if show {
        ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr())
    } else {
        ProgressBar::hidden()
    };
    let template = format!("{{elapsed:>4}} [{{bar:30}}] {{pos}}/{{len}} {done}  {{msg}}");
    bar.set_style(
        ProgressStyle::with_template(&template)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}
