//! A recording pass-through in front of the local AWS endpoint (moto): every API
//! request of the local stack goes through it unchanged, and each SQS `SendMessage` /
//! `SendMessageBatch` is recorded with the instant it reached the endpoint — the
//! exact outbound publish times the rate limit is about, independent of how fast the
//! simulated service takes requests off its queue.
//!
//! One upstream connection per request (`Connection: close` both ways): simple and
//! correct for the SDK's HTTP/1.1 requests with a `Content-Length` body; anything
//! else (chunked bodies) is piped through without being recorded.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One message sent to a queue, as it reached the endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct Sent {
    /// Wall-clock milliseconds since the epoch.
    pub epoch_ms: i64,
    /// Monotonic, since the tap started.
    pub since_start: std::time::Duration,
    pub queue_url: String,
    pub body: String,
}

/// The running tap; stops with the process (or [`Tap::stop`]).
pub struct Tap {
    pub endpoint: String,
    sent: Arc<Mutex<Vec<Sent>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Tap {
    /// Listens on a free loopback port and forwards to `upstream` (`http://host:port`).
    pub async fn start(upstream: &str) -> std::io::Result<Tap> {
        let upstream: SocketAddr = upstream
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .replace("localhost", "127.0.0.1")
            .parse()
            .map_err(|e| {
                std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{upstream}: {e}"))
            })?;
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let endpoint = format!("http://{}", listener.local_addr()?);
        let sent = Arc::new(Mutex::new(Vec::new()));
        let started = Instant::now();
        let record = sent.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let record = record.clone();
                tokio::spawn(async move {
                    let _ = relay(client, upstream, &record, started).await;
                });
            }
        });
        Ok(Tap {
            endpoint,
            sent,
            task,
        })
    }

    /// Every message sent so far to a queue whose URL ends with `/<queue_name>`.
    pub fn sent_to(&self, queue_name: &str) -> Vec<Sent> {
        let suffix = format!("/{queue_name}");
        self.sent
            .lock()
            .map(|v| {
                v.iter()
                    .filter(|s| s.queue_url.ends_with(&suffix))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn stop(self) {
        self.task.abort();
    }
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().skip(1).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// Forwards one request (recording it) and its response, then closes both sides.
async fn relay(
    mut client: TcpStream,
    upstream: SocketAddr,
    record: &Mutex<Vec<Sent>>,
    started: Instant,
) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(8192);
    let mut chunk = [0u8; 16 * 1024];
    let head_end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut server = TcpStream::connect(upstream).await?;
    let Some(length) = header(&head, "content-length").and_then(|v| v.parse::<usize>().ok()) else {
        // Not a plain request with a length: pipe it through as it is.
        server.write_all(&buf).await?;
        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
        return Ok(());
    };
    while buf.len() < head_end + length {
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let arrived = started.elapsed();
    let epoch_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    let body = &buf[head_end..head_end + length];
    match header(&head, "x-amz-target") {
        Some("AmazonSQS.SendMessage") | Some("AmazonSQS.SendMessageBatch") => {
            if let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) {
                let url = v
                    .get("QueueUrl")
                    .and_then(|u| u.as_str())
                    .unwrap_or("")
                    .to_owned();
                let bodies: Vec<String> = match v.get("Entries").and_then(|e| e.as_array()) {
                    Some(entries) => entries
                        .iter()
                        .filter_map(|e| {
                            e.get("MessageBody")
                                .and_then(|b| b.as_str())
                                .map(str::to_owned)
                        })
                        .collect(),
                    None => v
                        .get("MessageBody")
                        .and_then(|b| b.as_str())
                        .map(|b| vec![b.to_owned()])
                        .unwrap_or_default(),
                };
                if let Ok(mut r) = record.lock() {
                    r.extend(bodies.into_iter().map(|body| Sent {
                        epoch_ms,
                        since_start: arrived,
                        queue_url: url.clone(),
                        body,
                    }));
                }
            }
        }
        _ => {}
    }
    // Same request, asking the server to close the connection after its response.
    let mut rewritten = String::new();
    for (i, line) in head.trim_end_matches("\r\n").split("\r\n").enumerate() {
        if i > 0
            && line
                .split_once(':')
                .is_some_and(|(k, _)| k.trim().eq_ignore_ascii_case("connection"))
        {
            continue;
        }
        rewritten.push_str(line);
        rewritten.push_str("\r\n");
    }
    rewritten.push_str("Connection: close\r\n\r\n");
    server.write_all(rewritten.as_bytes()).await?;
    server.write_all(&buf[head_end..head_end + length]).await?;
    // The response, until the server closes; then close the client's connection too.
    let mut response = Vec::new();
    server.read_to_end(&mut response).await?;
    client.write_all(&response).await?;
    client.shutdown().await?;
    Ok(())
}

/// Highest number of instants (ms) falling in one wall-clock second.
pub fn peak_per_wall_second(epoch_ms: &[i64]) -> u32 {
    let mut counts = std::collections::HashMap::<i64, u32>::new();
    for ms in epoch_ms {
        *counts.entry(ms.div_euclid(1000)).or_insert(0) += 1;
    }
    counts.values().copied().max().unwrap_or(0)
}

/// Highest number of instants within any window `[t, t + window)`.
pub fn peak_sliding(instants: &[std::time::Duration], window: std::time::Duration) -> u32 {
    u32::try_from(testkit::oracle::peak_in_window(instants, window)).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn peaks() {
        assert_eq!(peak_per_wall_second(&[999, 1000, 1999, 2000]), 2);
        assert_eq!(peak_per_wall_second(&[]), 0);
        let ms = |v: &[u64]| {
            v.iter()
                .map(|m| Duration::from_millis(*m))
                .collect::<Vec<_>>()
        };
        // Ten instants 100 ms apart fit one window; an eleventh 1 s after the first does not.
        let even = ms(&[0, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000]);
        assert_eq!(peak_sliding(&even, Duration::from_secs(1)), 10);
        // Jitter that compresses one interval puts 11 in a window.
        let jittered = ms(&[5, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1002]);
        assert_eq!(peak_sliding(&jittered, Duration::from_secs(1)), 11);
    }
}
