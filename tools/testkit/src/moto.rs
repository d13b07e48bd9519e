//! A real AWS API server on loopback (moto server) for tests and the local stack.
//!
//! [`MotoServer::start`] launches `scripts/moto_server_patched.py -H 127.0.0.1 -p <free
//! port>` (moto's server with fixes, found through the `python3` on `PATH` that
//! `. scripts/tools.sh` sets), waits until it answers and stops it when dropped. A small
//! `sh` watchdog holds a pipe from this process: when the process ends for any reason —
//! even a test binary exiting with the shared server still in a `static` — the pipe
//! closes and the watchdog stops moto. No server outlives its owner.
//!
//! [`shared_endpoint`] gives every test of one binary the same server (or the one named
//! by `AWS_ENDPOINT_URL`); tests isolate themselves with [`unique_prefix`].

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_dynamodb::config::{Credentials, SharedCredentialsProvider};
use std::io::{Read, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use thiserror::Error;

/// The region every local resource lives in.
pub const LOCAL_REGION: &str = "us-east-1";
/// The account id moto uses in ARNs.
pub const LOCAL_ACCOUNT: &str = "123456789012";

/// Why a local server could not be used.
#[derive(Debug, Error)]
pub enum LocalError {
    #[error("cannot start `moto_server` (is it on PATH? run `. scripts/tools.sh`): {0}")]
    Spawn(std::io::Error),
    #[error("no free loopback port: {0}")]
    Port(std::io::Error),
    #[error("moto server at {endpoint} did not answer within {waited:?}")]
    NotReady { endpoint: String, waited: Duration },
    #[error("moto server exited before answering (status {0})")]
    Exited(String),
    #[error("request to moto server at {endpoint} failed: {detail}")]
    Http { endpoint: String, detail: String },
    #[error("AWS_ENDPOINT_URL = {0:?} is not an http://host:port URL")]
    BadEndpoint(String),
    #[error("the task starting the moto server failed: {0}")]
    Task(String),
}

/// A moto server process on 127.0.0.1, stopped on drop.
#[derive(Debug)]
pub struct MotoServer {
    child: Child,
    /// Closing this pipe makes the watchdog stop moto.
    lifeline: Option<ChildStdin>,
    addr: SocketAddr,
}

impl MotoServer {
    /// The moto server the local stack, the tests and the benchmarks run: moto with
    /// the fixes of `scripts/moto_server_patched.py` (each DynamoDB request atomic, a
    /// cancelled transaction undoing only its own items, SQS speed fixes). Run from
    /// the repository (the path is the checkout's).
    pub const PROGRAM: &'static str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scripts/moto_server_patched.py"
    );
    /// Stock `moto_server`, for the tests that compare the two.
    pub const STOCK: &'static str = "moto_server";
    /// How long a start waits for the server to answer.
    pub const START_WAIT: Duration = Duration::from_secs(60);

    /// Starts moto on a free loopback port and waits (up to [`Self::START_WAIT`])
    /// until it answers.
    pub fn start() -> Result<Self, LocalError> {
        Self::start_with(Self::PROGRAM, Self::START_WAIT)
    }

    /// Starts `program` (a moto server executable) and waits up to `wait`.
    pub fn start_with(program: &str, wait: Duration) -> Result<Self, LocalError> {
        let port = free_port()?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        // The watchdog: start moto, then block reading stdin; EOF (our end closed,
        // normally or because this process died) stops moto.
        let script = "\"$0\" -H 127.0.0.1 -p \"$1\" >/dev/null 2>&1 & m=$!; \
                      trap 'kill $m 2>/dev/null; exit 0' TERM INT; \
                      cat >/dev/null; kill $m 2>/dev/null; wait $m 2>/dev/null; exit 0";
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg(program)
            .arg(port.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(LocalError::Spawn)?;
        let lifeline = child.stdin.take();
        let mut server = Self {
            child,
            lifeline,
            addr,
        };
        server.wait_ready(wait)?;
        Ok(server)
    }

    fn wait_ready(&mut self, wait: Duration) -> Result<(), LocalError> {
        let started = Instant::now();
        loop {
            if http(self.addr, "GET", "/moto-api/data.json").is_ok() {
                return Ok(());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(LocalError::Exited(status.to_string()));
            }
            if started.elapsed() > wait {
                return Err(LocalError::NotReady {
                    endpoint: self.endpoint_url(),
                    waited: wait,
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Starts `program` from async code, waiting up to [`Self::START_WAIT`]: the wait
    /// for the server runs on a blocking thread, not on the runtime's workers.
    pub async fn launch(program: &str) -> Result<Self, LocalError> {
        let program = program.to_owned();
        tokio::task::spawn_blocking(move || Self::start_with(&program, Self::START_WAIT))
            .await
            .map_err(|e| LocalError::Task(e.to_string()))?
    }

    /// Stops the server from async code (dropping it waits for the process to exit).
    pub async fn stop(self) {
        let _ = tokio::task::spawn_blocking(move || drop(self)).await;
    }

    /// `http://127.0.0.1:<port>`
    pub fn endpoint_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Forgets every resource (`POST /moto-api/reset`). Only for a server this test
    /// owns alone: tests sharing one server isolate by name instead.
    pub fn reset(&self) -> Result<(), LocalError> {
        reset(&self.endpoint_url())
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        // EOF on the watchdog's stdin stops moto; then reap the watchdog.
        drop(self.lifeline.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            match self.child.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `POST /moto-api/reset` on any moto endpoint.
pub fn reset(endpoint: &str) -> Result<(), LocalError> {
    let addr = parse_endpoint(endpoint)?;
    let status = http(addr, "POST", "/moto-api/reset").map_err(|detail| LocalError::Http {
        endpoint: endpoint.to_owned(),
        detail,
    })?;
    if (200..300).contains(&status) {
        Ok(())
    } else {
        Err(LocalError::Http {
            endpoint: endpoint.to_owned(),
            detail: format!("reset answered HTTP {status}"),
        })
    }
}

fn parse_endpoint(endpoint: &str) -> Result<SocketAddr, LocalError> {
    let rest = endpoint
        .strip_prefix("http://")
        .ok_or_else(|| LocalError::BadEndpoint(endpoint.to_owned()))?;
    let hostport = rest.trim_end_matches('/');
    let hostport = hostport.replace("localhost", "127.0.0.1");
    hostport
        .parse()
        .map_err(|_| LocalError::BadEndpoint(endpoint.to_owned()))
}

fn free_port() -> Result<u16, LocalError> {
    let l = TcpListener::bind(("127.0.0.1", 0)).map_err(LocalError::Port)?;
    let port = l.local_addr().map_err(LocalError::Port)?.port();
    Ok(port)
}

/// A minimal HTTP/1.1 request without a body; returns the status code.
fn http(addr: SocketAddr, method: &str, path: &str) -> Result<u16, String> {
    let timeout = Duration::from_secs(5);
    let mut s = TcpStream::connect_timeout(&addr, timeout).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
    let mut head = [0u8; 64];
    let mut got = 0;
    while got < 12 {
        let n = s.read(&mut head[got..]).map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        got += n;
    }
    let text = String::from_utf8_lossy(&head[..got]);
    let mut parts = text.split_whitespace();
    match (parts.next(), parts.next()) {
        (Some(v), Some(code)) if v.starts_with("HTTP/1.") => code
            .parse()
            .map_err(|_| format!("bad status line {text:?}")),
        _ => Err(format!("not an HTTP answer: {text:?}")),
    }
}

static SHARED: OnceLock<Result<MotoServer, String>> = OnceLock::new();

/// The endpoint every test of this binary shares: `AWS_ENDPOINT_URL` when set,
/// otherwise one moto server started on first use and stopped when the process ends.
pub fn shared_endpoint() -> Result<String, LocalError> {
    if let Ok(url) = std::env::var("AWS_ENDPOINT_URL") {
        if !url.trim().is_empty() {
            return Ok(url);
        }
    }
    match SHARED.get_or_init(|| MotoServer::start().map_err(|e| e.to_string())) {
        Ok(server) => Ok(server.endpoint_url()),
        Err(e) => Err(LocalError::Http {
            endpoint: "(shared moto server)".to_owned(),
            detail: e.clone(),
        }),
    }
}

/// A short name prefix unique to this process and call (`t<pid>x<n>`), for tests that
/// share a server: every resource a test creates carries it.
pub fn unique_prefix(tag: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{tag}{}x{n}", std::process::id())
}

/// How long one attempt of a call to the local endpoint may take before it fails (and
/// is retried): above SQS's longest long poll (20 s), so only a hung call hits it.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one call, retries included, may take before it fails.
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(120);

/// SDK configuration for a loopback endpoint: dummy credentials, region us-east-1, and
/// [`ATTEMPT_TIMEOUT`] / [`OPERATION_TIMEOUT`] so a hung server fails a call instead of
/// hanging its caller.
pub async fn sdk_config(endpoint: &str) -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .region(Region::new(LOCAL_REGION))
        .endpoint_url(endpoint)
        .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
            "testing", "testing", None, None, "loopback",
        )))
        .timeout_config(
            aws_config::timeout::TimeoutConfig::builder()
                .operation_attempt_timeout(ATTEMPT_TIMEOUT)
                .operation_timeout(OPERATION_TIMEOUT)
                .build(),
        )
        .load()
        .await
}

/// Where each AWS service of the stack is served. DynamoDB Streams reads the tables'
/// own streams, so it is always DynamoDB's server; nothing else crosses services
/// inside moto (the scheduler emulator, not moto, fires schedules, through SQS).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoints {
    /// DynamoDB and DynamoDB Streams.
    pub dynamodb: String,
    pub sqs: String,
    pub scheduler: String,
}

impl Endpoints {
    /// Every service on one endpoint.
    pub fn single(endpoint: &str) -> Self {
        Self {
            dynamodb: endpoint.to_owned(),
            sqs: endpoint.to_owned(),
            scheduler: endpoint.to_owned(),
        }
    }

    /// Whether every service is on one endpoint.
    pub fn is_single(&self) -> bool {
        self.dynamodb == self.sqs && self.sqs == self.scheduler
    }

    /// The endpoint serving the SDK service id (`DynamoDB`, `DynamoDB Streams`,
    /// `SQS`, `Scheduler`); any other service goes to DynamoDB's.
    pub fn for_service(&self, service_id: &str) -> &str {
        match service_id {
            "SQS" => &self.sqs,
            "Scheduler" => &self.scheduler,
            _ => &self.dynamodb,
        }
    }

    /// The environment that points the AWS SDK (and `retryctl`) at these endpoints:
    /// `AWS_ENDPOINT_URL=…` alone, or one `AWS_ENDPOINT_URL_<SERVICE>=…` per service.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        if self.is_single() {
            return vec![("AWS_ENDPOINT_URL", self.dynamodb.clone())];
        }
        vec![
            ("AWS_ENDPOINT_URL_DYNAMODB", self.dynamodb.clone()),
            ("AWS_ENDPOINT_URL_DYNAMODB_STREAMS", self.dynamodb.clone()),
            ("AWS_ENDPOINT_URL_SQS", self.sqs.clone()),
            ("AWS_ENDPOINT_URL_SCHEDULER", self.scheduler.clone()),
        ]
    }
}

impl std::fmt::Display for Endpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_single() {
            return f.write_str(&self.dynamodb);
        }
        write!(
            f,
            "DynamoDB {}, SQS {}, Scheduler {}",
            self.dynamodb, self.sqs, self.scheduler
        )
    }
}

/// The per-service endpoints, as the SDK's clients ask for them.
#[derive(Debug)]
struct ServiceEndpoints(Endpoints);

impl aws_types::service_config::LoadServiceConfig for ServiceEndpoints {
    fn load_config(&self, key: aws_types::service_config::ServiceConfigKey<'_>) -> Option<String> {
        (key.profile() == "endpoint_url").then(|| self.0.for_service(key.service_id()).to_owned())
    }
}

/// [`sdk_config`] with each service on its own endpoint. Every client built from it
/// calls its service's endpoint; [`SdkConfig::endpoint_url`] is DynamoDB's.
pub async fn sdk_config_for(endpoints: &Endpoints) -> SdkConfig {
    let base = sdk_config(&endpoints.dynamodb).await;
    if endpoints.is_single() {
        return base;
    }
    let mut builder = base.into_builder();
    // Not client configuration: a client reads its service's endpoint first.
    builder.insert_origin(
        "endpoint_url",
        aws_types::origin::Origin::shared_environment_variable(),
    );
    builder
        .service_config(ServiceEndpoints(endpoints.clone()))
        .build()
}

/// A request for the one-time schedule `name` in `group`, due in 2099 and aimed at a
/// queue that need not exist: for tests of the Scheduler API itself, where nothing
/// fires.
pub fn far_schedule(
    scheduler: &aws_sdk_scheduler::Client,
    group: &str,
    name: &str,
) -> aws_sdk_scheduler::operation::create_schedule::builders::CreateScheduleFluentBuilder {
    use aws_sdk_scheduler::types::{FlexibleTimeWindow, FlexibleTimeWindowMode, Target};
    scheduler
        .create_schedule()
        .group_name(group)
        .name(name)
        .schedule_expression("at(2099-01-01T00:00:00)")
        .set_flexible_time_window(
            FlexibleTimeWindow::builder()
                .mode(FlexibleTimeWindowMode::Off)
                .build()
                .ok(),
        )
        .set_target(
            Target::builder()
                .arn(format!("arn:aws:sqs:{LOCAL_REGION}:{LOCAL_ACCOUNT}:q"))
                .role_arn(format!("arn:aws:iam::{LOCAL_ACCOUNT}:role/r"))
                .input("{}")
                .build()
                .ok(),
        )
}

/// Receives up to 10 messages of `url` with visibility 0 (visible again at once, each
/// receive counted): how many came.
pub async fn receive_at_once(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
) -> Result<
    usize,
    aws_sdk_sqs::error::SdkError<aws_sdk_sqs::operation::receive_message::ReceiveMessageError>,
> {
    let out = sqs
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .visibility_timeout(0)
        .send()
        .await?;
    Ok(out.messages().len())
}

/// Takes every message off `url` (received without waiting, then deleted): their
/// bodies, oldest first.
pub async fn take_all(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
) -> Result<Vec<String>, aws_sdk_sqs::Error> {
    let taken = take_messages(sqs, url, 0).await?;
    Ok(taken
        .into_iter()
        .map(|m| m.body.unwrap_or_default())
        .collect())
}

/// Takes every message off `url` with its message attributes (received in batches,
/// each waiting up to `wait_seconds`, then deleted), oldest first.
pub async fn take_messages(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
    wait_seconds: i32,
) -> Result<Vec<aws_sdk_sqs::types::Message>, aws_sdk_sqs::Error> {
    let mut taken = Vec::new();
    loop {
        let out = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .wait_time_seconds(wait_seconds)
            .message_attribute_names("All")
            .send()
            .await?;
        if out.messages().is_empty() {
            return Ok(taken);
        }
        for m in out.messages() {
            sqs.delete_message()
                .queue_url(url)
                .set_receipt_handle(m.receipt_handle().map(str::to_owned))
                .send()
                .await?;
        }
        taken.extend(out.messages.unwrap_or_default());
    }
}

/// Whether the schedule `name` of `group` exists.
pub async fn schedule_exists(
    scheduler: &aws_sdk_scheduler::Client,
    group: &str,
    name: &str,
) -> bool {
    scheduler
        .get_schedule()
        .group_name(group)
        .name(name)
        .send()
        .await
        .is_ok()
}

/// The names of every schedule of `group`, all pages.
pub async fn schedule_names(
    scheduler: &aws_sdk_scheduler::Client,
    group: &str,
) -> Result<Vec<String>, aws_sdk_scheduler::Error> {
    let schedules = scheduler
        .list_schedules()
        .group_name(group)
        .into_paginator()
        .items()
        .send()
        .try_collect()
        .await?;
    Ok(schedules.into_iter().filter_map(|s| s.name).collect())
}

/// Creates the SNS topic `name` and adds it to a stack's `outputs` (its `Outputs`
/// array, or the `Stacks[0].Outputs` of `describe-stacks`) as `AlarmTopicArn`: the
/// topic the deploy check reads the subscriptions of. Its ARN, or `None` (and no
/// output added) where CreateTopic answered without one.
pub async fn alarm_topic(
    sdk: &SdkConfig,
    name: &str,
    outputs: &mut Vec<serde_json::Value>,
) -> Result<Option<String>, aws_sdk_sns::Error> {
    let created = aws_sdk_sns::Client::new(sdk)
        .create_topic()
        .name(name)
        .send()
        .await?;
    let arn = created.topic_arn().map(str::to_owned);
    if let Some(arn) = &arn {
        outputs.push(serde_json::json!({"OutputKey": "AlarmTopicArn", "OutputValue": arn}));
    }
    Ok(arn)
}

/// Subscribes the SQS queue `queue_arn` to `topic`: the alarms page it.
pub async fn page_queue(
    sdk: &SdkConfig,
    topic: &str,
    queue_arn: &str,
) -> Result<(), aws_sdk_sns::Error> {
    aws_sdk_sns::Client::new(sdk)
        .subscribe()
        .topic_arn(topic)
        .protocol("sqs")
        .endpoint(queue_arn)
        .send()
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse() {
        assert_eq!(
            parse_endpoint("http://127.0.0.1:5000").unwrap(),
            SocketAddr::from(([127, 0, 0, 1], 5000))
        );
        assert_eq!(
            parse_endpoint("http://localhost:5000/").unwrap(),
            SocketAddr::from(([127, 0, 0, 1], 5000))
        );
        assert!(parse_endpoint("https://example.com").is_err());
    }

    #[test]
    fn prefixes_are_unique() {
        let a = unique_prefix("t");
        let b = unique_prefix("t");
        assert_ne!(a, b);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric()));
    }
}
