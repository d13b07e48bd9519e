//! Release binary size of each function, and its cold init time: process start until
//! its first request to the Lambda runtime API.
//!
//! A tiny HTTP server on 127.0.0.1 stands in for the runtime API: the binary is
//! started with `AWS_LAMBDA_RUNTIME_API` pointing at it, plus the variables Lambda sets
//! and the function's own configuration (endpoint: the local moto server). The server
//! records when `GET /2018-06-01/runtime/invocation/next` arrives; the process is then
//! stopped. Everything the `main` does before asking for work is in the figure:
//! tracing set-up, configuration from the environment, SDK configuration and clients.

use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The function binaries, as `template.yaml` and `cargo lambda` name them.
pub const FUNCTIONS: [&str; 6] = [
    "response-handler",
    "retry-handler",
    "reconciler",
    "audit-writer",
    "starter",
    "http-bridge",
];

/// The request the runtime client makes first.
pub const NEXT_INVOCATION: &str = "GET /2018-06-01/runtime/invocation/next";

/// A binary's size on disk.
#[derive(Debug, Clone, PartialEq)]
pub struct BinarySize {
    pub function: String,
    pub path: PathBuf,
    pub bytes: Option<u64>,
}

/// Sizes of the function binaries in `dir`.
pub fn sizes(dir: &Path) -> Vec<BinarySize> {
    FUNCTIONS
        .iter()
        .map(|f| {
            let path = dir.join(f);
            BinarySize {
                function: (*f).to_owned(),
                bytes: std::fs::metadata(&path)
                    .ok()
                    .filter(|m| m.is_file())
                    .map(|m| m.len()),
                path,
            }
        })
        .collect()
}

/// Cold init times of one function.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct InitTimes {
    pub function: String,
    pub runs: Vec<Duration>,
    /// Why a run failed (the first failure), if one did.
    pub error: Option<String>,
}

impl InitTimes {
    fn sorted(&self) -> Vec<Duration> {
        let mut v = self.runs.clone();
        v.sort();
        v
    }

    pub fn median(&self) -> Option<Duration> {
        let v = self.sorted();
        match v.len() {
            0 => None,
            n if n % 2 == 1 => Some(v[n / 2]),
            n => Some((v[n / 2 - 1] + v[n / 2]) / 2),
        }
    }

    pub fn min(&self) -> Option<Duration> {
        self.sorted().first().copied()
    }

    pub fn max(&self) -> Option<Duration> {
        self.sorted().last().copied()
    }
}

/// The variables Lambda sets for every function (besides the runtime API address).
pub fn lambda_env(function: &str, memory_mb: u32) -> Vec<(String, String)> {
    [
        ("AWS_LAMBDA_FUNCTION_NAME", function.to_owned()),
        ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST".to_owned()),
        ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", memory_mb.to_string()),
        (
            "AWS_LAMBDA_LOG_GROUP_NAME",
            format!("/aws/lambda/{function}"),
        ),
        ("AWS_LAMBDA_LOG_STREAM_NAME", "bench".to_owned()),
        ("AWS_LAMBDA_LOG_FORMAT", "JSON".to_owned()),
        ("AWS_LAMBDA_LOG_LEVEL", "INFO".to_owned()),
        ("AWS_REGION", testkit::moto::LOCAL_REGION.to_owned()),
        ("AWS_DEFAULT_REGION", testkit::moto::LOCAL_REGION.to_owned()),
        ("AWS_ACCESS_KEY_ID", "testing".to_owned()),
        ("AWS_SECRET_ACCESS_KEY", "testing".to_owned()),
        ("AWS_SESSION_TOKEN", "testing".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// What the fake runtime API saw first.
struct FirstRequest {
    at: Instant,
    line: String,
}

fn read_head(mut s: TcpStream) -> String {
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 16 * 1024 {
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    String::from_utf8_lossy(&buf)
        .lines()
        .next()
        .unwrap_or("")
        .to_owned()
}

/// One cold start: spawn, wait for the first runtime API request, stop the process.
pub fn one_cold_init(
    binary: &Path,
    env: &[(String, String)],
    timeout: Duration,
) -> Result<Duration, String> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("local_addr: {e}"))?;
    let (tx, rx) = mpsc::channel::<FirstRequest>();
    let acceptor = std::thread::spawn(move || {
        if let Ok((stream, _)) = listener.accept() {
            let line = read_head(stream);
            let _ = tx.send(FirstRequest {
                at: Instant::now(),
                line,
            });
        }
    });
    let started = Instant::now();
    let mut child = Command::new(binary)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env("AWS_LAMBDA_RUNTIME_API", addr.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawn {}: {e}", binary.display()))?;
    let result = loop {
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(first) if first.line.starts_with(NEXT_INVOCATION) => {
                break Ok(first.at.duration_since(started))
            }
            Ok(first) => {
                break Err(format!(
                    "first request was {:?}, not {NEXT_INVOCATION}",
                    first.line
                ))
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                break Err("the runtime API listener failed".into())
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if let Ok(Some(status)) = child.try_wait() {
                    let mut err = String::new();
                    if let Some(mut e) = child.stderr.take() {
                        let _ = e.read_to_string(&mut err);
                    }
                    let tail: String = err.lines().rev().take(3).collect::<Vec<_>>().join(" | ");
                    break Err(format!(
                        "exited with {status} before asking for work: {tail}"
                    ));
                }
                if started.elapsed() > timeout {
                    break Err(format!("no request to the runtime API within {timeout:?}"));
                }
            }
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    // Unblock the acceptor if nothing connected.
    let _ = TcpStream::connect(addr);
    let _ = acceptor.join();
    result
}

/// `runs` cold starts of one binary.
pub fn cold_init(
    binary: &Path,
    function: &str,
    env: &[(String, String)],
    runs: usize,
) -> InitTimes {
    let mut t = InitTimes {
        function: function.to_owned(),
        ..InitTimes::default()
    };
    if !binary.is_file() {
        t.error = Some(format!("{} not built", binary.display()));
        return t;
    }
    for _ in 0..runs {
        match one_cold_init(binary, env, Duration::from_secs(10)) {
            Ok(d) => t.runs.push(d),
            Err(e) => {
                t.error.get_or_insert(e);
            }
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_even_and_odd() {
        let ms = Duration::from_millis;
        let t = InitTimes {
            function: "f".into(),
            runs: vec![ms(5), ms(1), ms(3)],
            error: None,
        };
        assert_eq!(t.median(), Some(ms(3)));
        let t = InitTimes {
            runs: vec![ms(4), ms(1), ms(3), ms(2)],
            ..t
        };
        assert_eq!(t.median(), Some(Duration::from_micros(2500)));
        assert_eq!((t.min(), t.max()), (Some(ms(1)), Some(ms(4))));
    }
}
