//! What a test's log lines say: a JSON subscriber, set as the thread's default,
//! writing into a buffer the test reads back.

use std::sync::{Arc, Mutex, PoisonError};
use tracing::subscriber::DefaultGuard;

/// The lines logged since [`capture`], as JSON.
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// Every line so far (a line that is not JSON is a string value).
    pub fn lines(&self) -> Vec<serde_json::Value> {
        let bytes = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        String::from_utf8_lossy(&bytes)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|_| l.into()))
            .collect()
    }

    /// The lines whose message starts with `message`.
    pub fn starting(&self, message: &str) -> Vec<serde_json::Value> {
        self.lines()
            .into_iter()
            .filter(|l| {
                l["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with(message))
            })
            .collect()
    }
}

/// Logs of this thread, in the functions' JSON form (flattened event, current span),
/// until the guard drops.
pub fn capture() -> (Captured, DefaultGuard) {
    let out = Captured::default();
    let writer = out.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_current_span(true)
        .with_writer(move || writer.clone())
        .finish();
    (out, tracing::subscriber::set_default(subscriber))
}
