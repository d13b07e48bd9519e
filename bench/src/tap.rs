//! The burst's view of the recording proxy in front of the local AWS endpoint (moto):
//! every API request of the local stack goes through [`testkit::proxy::Proxy`]
//! unchanged, and each SQS `SendMessage` / `SendMessageBatch` it recorded gives the
//! instant its messages reached the endpoint — the exact outbound publish times the
//! rate limit is about, independent of how fast the simulated service takes requests
//! off its queue.

use testkit::proxy::Proxy;

/// One message sent to a queue, as it reached the endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct Sent {
    /// Wall-clock milliseconds since the epoch.
    pub epoch_ms: i64,
    /// Monotonic, since the tap started.
    pub since_start: std::time::Duration,
    /// ARN of the queue.
    pub queue_arn: String,
    pub body: String,
}

/// The running tap: the proxy; stops with the process (or [`Tap::stop`]).
pub struct Tap {
    pub endpoint: String,
    proxy: Proxy,
}

impl Tap {
    /// Listens on a free loopback port and forwards to `upstream` (`http://host:port`).
    pub async fn start(upstream: &str) -> std::io::Result<Tap> {
        let proxy = Proxy::start(upstream).await?;
        Ok(Tap {
            endpoint: proxy.endpoint.clone(),
            proxy,
        })
    }

    /// Every message sent so far to the queue named `queue_name`.
    pub fn sent_to(&self, queue_name: &str) -> Vec<Sent> {
        let suffix = format!(":{queue_name}");
        self.proxy
            .calls()
            .into_iter()
            .filter(|c| {
                c.service == "sqs"
                    && matches!(c.operation.as_str(), "SendMessage" | "SendMessageBatch")
            })
            .filter_map(|c| {
                let arn = c.resource()?.to_owned();
                arn.ends_with(&suffix).then(|| {
                    c.message_bodies
                        .iter()
                        .map(|body| Sent {
                            epoch_ms: c.epoch_ms,
                            since_start: c.since_start,
                            queue_arn: arn.clone(),
                            body: body.clone(),
                        })
                        .collect::<Vec<_>>()
                })
            })
            .flatten()
            .collect()
    }

    pub fn stop(self) {
        self.proxy.stop();
    }
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
