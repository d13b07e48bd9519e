//! A recording HTTP pass-through in front of the local AWS endpoint (moto). Every request
//! sent to [`Proxy::endpoint`] is forwarded unchanged and recorded as one [`Call`]: when
//! it arrived, who signed it (the access key id of `Authorization`), the service and
//! operation (`X-Amz-Target`, or method and path for Scheduler's REST API), the resources
//! as ARNs, and the answer's HTTP status. On the wire, it sees what an AWS endpoint
//! would: every SDK retry, every error path, no change to production code; tests
//! attribute calls by giving each function its own access key id ([`sdk_config_as`]).
//! One exchange step per request (read, parse, decide its fault, forward, record); with
//! [`ProxyOptions::faults`] it injects what [`crate::faults`] describes, tallied by
//! [`Proxy::faults_injected`]. One upstream connection per request (`Connection: close`
//! both ways): a request without a `Content-Length` body (chunked) is piped through and
//! recorded without its body's details. See `docs/verification.md#chaos-at-the-aws-api-boundary`.

use crate::faults::{error_response, Fault, FaultKind, Faults, Injector};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One part of a request that IAM authorizes on its own (an item of a
/// `TransactWriteItems`: `Put`, `Update`, `Delete`, `ConditionCheck`; of a
/// `TransactGetItems`: `Get`), with the ARN of the table it names.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Part {
    pub kind: String,
    pub resource: String,
}

/// One API request as it reached the endpoint.
///
/// The service and operation come from `X-Amz-Target` for the JSON protocols of
/// DynamoDB, DynamoDB Streams and SQS, and from the method and path for EventBridge
/// Scheduler's REST API; the resources from `TableName`, `IndexName`, `QueueUrl`,
/// `QueueName`, `StreamArn`, the schedule name and group…
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// Wall-clock milliseconds since the epoch when the request had fully arrived.
    pub epoch_ms: i64,
    /// Monotonic, since the proxy started.
    pub since_start: Duration,
    /// The access key id that signed the request (empty when unsigned).
    pub caller: String,
    /// The IAM service prefix: `dynamodb` (DynamoDB Streams included), `sqs`,
    /// `scheduler`; for anything else the signing name of the credential scope.
    pub service: String,
    /// The API operation: `UpdateItem`, `SendMessage`, `CreateSchedule`…
    pub operation: String,
    /// ARNs of the resources the operation acts on (none for list operations).
    pub resources: Vec<String>,
    /// The parts authorized one by one (transactions).
    pub parts: Vec<Part>,
    /// The role a request hands to a service (`Target.RoleArn` of a schedule).
    pub passed_role: Option<String>,
    /// Bodies of the messages of a `SendMessage` / `SendMessageBatch`.
    pub message_bodies: Vec<String>,
    /// HTTP status of the answer (0 when none came).
    pub status: u16,
}

impl Call {
    /// The first resource ARN, if any.
    pub fn resource(&self) -> Option<&str> {
        self.resources.first().map(String::as_str)
    }
}

/// Names the proxy needs to turn names into ARNs.
#[derive(Debug, Clone)]
pub struct ProxyOptions {
    /// The account of every resource (moto's default account).
    pub account: String,
    /// The region when a request's credential scope names none.
    pub region: String,
    /// Faults to inject (none: a pure recording pass-through).
    pub faults: Option<Faults>,
}

impl Default for ProxyOptions {
    fn default() -> Self {
        Self {
            account: crate::moto::LOCAL_ACCOUNT.to_owned(),
            region: crate::moto::LOCAL_REGION.to_owned(),
            faults: None,
        }
    }
}

#[derive(Debug, Default)]
struct Log {
    calls: Vec<Call>,
    /// DynamoDB Streams shard iterators handed out, and the stream each one reads
    /// (`GetRecords` names only the iterator).
    iterators: HashMap<String, String>,
}

/// The running proxy; it stops when dropped (or with [`Proxy::stop`]).
pub struct Proxy {
    pub endpoint: String,
    log: Arc<Mutex<Log>>,
    injector: Option<Arc<Injector>>,
    started: Instant,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `upstream` (`http://host:port`).
    pub async fn start(upstream: &str) -> std::io::Result<Proxy> {
        Self::start_with(upstream, ProxyOptions::default()).await
    }

    /// A proxy injecting `faults` in front of `upstream`.
    pub async fn with_faults(upstream: &str, faults: Faults) -> std::io::Result<Proxy> {
        let options = ProxyOptions {
            faults: Some(faults),
            ..ProxyOptions::default()
        };
        Self::start_with(upstream, options).await
    }

    pub async fn start_with(upstream: &str, options: ProxyOptions) -> std::io::Result<Proxy> {
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
        let log: Arc<Mutex<Log>> = Arc::default();
        let started = Instant::now();
        let injector = options.faults.clone().map(|f| Arc::new(Injector::new(f)));
        let shared = Arc::new(Shared {
            upstream,
            options,
            log: log.clone(),
            started,
            injector: injector.clone(),
        });
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let shared = shared.clone();
                tokio::spawn(async move {
                    let _ = shared.exchange(client).await;
                });
            }
        });
        Ok(Proxy {
            endpoint,
            log,
            injector,
            started,
            task,
        })
    }

    /// Every call recorded so far, in arrival order.
    pub fn calls(&self) -> Vec<Call> {
        self.log.lock().map(|l| l.calls.clone()).unwrap_or_default()
    }

    /// The faults injected so far: (`service:Operation`, kind) → count.
    pub fn faults_injected(&self) -> BTreeMap<(String, FaultKind), u64> {
        self.injector
            .as_ref()
            .map(|i| i.tally())
            .unwrap_or_default()
    }

    /// The faults this proxy injects, if any.
    pub fn faults(&self) -> Option<&Faults> {
        self.injector.as_deref().map(Injector::faults)
    }

    /// Forgets the calls recorded so far.
    pub fn clear(&self) {
        if let Ok(mut l) = self.log.lock() {
            l.calls.clear();
        }
    }

    /// Time since the proxy started (the clock of [`Call::since_start`]).
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    pub fn stop(self) {
        self.task.abort();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Shared {
    upstream: SocketAddr,
    options: ProxyOptions,
    log: Arc<Mutex<Log>>,
    started: Instant,
    injector: Option<Arc<Injector>>,
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().skip(1).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

fn epoch_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// `Credential=<AKID>/<date>/<region>/<service>/aws4_request` → (AKID, region, service).
fn credential(authorization: &str) -> Option<(String, String, String)> {
    let rest = authorization.split("Credential=").nth(1)?;
    let scope = rest.split([',', ' ']).next()?;
    let mut parts = scope.split('/');
    let akid = parts.next()?.to_owned();
    let _date = parts.next();
    let region = parts.next().unwrap_or_default().to_owned();
    let service = parts.next().unwrap_or_default().to_owned();
    Some((akid, region, service))
}

/// `%XX` sequences decoded (schedule names travel in the path).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() + 1 {
            if let Some(b) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn query_param(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == name).then(|| percent_decode(v))
    })
}

/// The body of an HTTP response (dechunked when `Transfer-Encoding: chunked`).
fn response_body(response: &[u8]) -> Option<Vec<u8>> {
    let end = response.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(&response[..end]);
    let body = &response[end..];
    if header(&head, "transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        let mut out = Vec::new();
        let mut rest = body;
        loop {
            let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
            let size_text = String::from_utf8_lossy(&rest[..line_end]);
            let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
            if size == 0 {
                return Some(out);
            }
            let start = line_end + 2;
            out.extend_from_slice(rest.get(start..start + size)?);
            rest = rest.get(start + size + 2..)?;
        }
    }
    Some(body.to_vec())
}

fn status_of(response: &[u8]) -> u16 {
    let line = String::from_utf8_lossy(&response[..response.len().min(32)]).into_owned();
    line.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

impl Shared {
    fn arn(&self, region: &str, service: &str, resource: &str) -> String {
        format!(
            "arn:aws:{service}:{region}:{}:{resource}",
            self.options.account
        )
    }

    fn table_arn(&self, region: &str, table: &str) -> String {
        self.arn(region, "dynamodb", &format!("table/{table}"))
    }

    /// `http://host/<account>/<name>` → `arn:aws:sqs:<region>:<account>:<name>`.
    fn queue_arn(&self, region: &str, url: &str) -> String {
        let mut segments = url.trim_end_matches('/').rsplit('/');
        let name = segments.next().unwrap_or_default();
        let account = segments
            .next()
            .filter(|a| a.chars().all(|c| c.is_ascii_digit()) && !a.is_empty())
            .unwrap_or(&self.options.account);
        format!("arn:aws:sqs:{region}:{account}:{name}")
    }

    /// Parses the request into a call (status and time filled in later).
    fn parse(&self, head: &str, body: &[u8]) -> Call {
        let (caller, region, signing) = header(head, "authorization")
            .and_then(credential)
            .unwrap_or_default();
        let region = if region.is_empty() {
            self.options.region.clone()
        } else {
            region
        };
        let json: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
        let mut call = Call {
            epoch_ms: 0,
            since_start: Duration::ZERO,
            caller,
            service: signing.clone(),
            operation: String::new(),
            resources: vec![],
            parts: vec![],
            passed_role: None,
            message_bodies: vec![],
            status: 0,
        };
        if let Some(target) = header(head, "x-amz-target") {
            let (prefix, op) = target.split_once('.').unwrap_or((target, ""));
            call.operation = op.to_owned();
            if prefix.starts_with("DynamoDBStreams") {
                call.service = "dynamodb".to_owned();
                if let Some(arn) = text(&json, "StreamArn") {
                    call.resources.push(arn);
                } else if let Some(it) = text(&json, "ShardIterator") {
                    if let Some(arn) = self
                        .log
                        .lock()
                        .ok()
                        .and_then(|l| l.iterators.get(&it).cloned())
                    {
                        call.resources.push(arn);
                    }
                } else if let Some(t) = text(&json, "TableName") {
                    call.resources.push(self.table_arn(&region, &t));
                }
            } else if prefix.starts_with("DynamoDB") {
                call.service = "dynamodb".to_owned();
                if let Some(t) = text(&json, "TableName") {
                    let mut arn = self.table_arn(&region, &t);
                    if let Some(ix) = text(&json, "IndexName") {
                        arn = format!("{arn}/index/{ix}");
                    }
                    call.resources.push(arn);
                }
                if let Some(items) = json.get("TransactItems").and_then(Value::as_array) {
                    for item in items.iter().filter_map(Value::as_object) {
                        for (kind, inner) in item {
                            if let Some(t) = text(inner, "TableName") {
                                call.parts.push(Part {
                                    kind: kind.clone(),
                                    resource: self.table_arn(&region, &t),
                                });
                            }
                        }
                    }
                }
                if let Some(tables) = json.get("RequestItems").and_then(Value::as_object) {
                    for t in tables.keys() {
                        call.resources.push(self.table_arn(&region, t));
                    }
                }
            } else if prefix == "AmazonSQS" {
                call.service = "sqs".to_owned();
                if let Some(url) = text(&json, "QueueUrl") {
                    call.resources.push(self.queue_arn(&region, &url));
                } else if let Some(name) = text(&json, "QueueName") {
                    let account = text(&json, "QueueOwnerAWSAccountId")
                        .unwrap_or_else(|| self.options.account.clone());
                    call.resources
                        .push(format!("arn:aws:sqs:{region}:{account}:{name}"));
                }
                match json.get("Entries").and_then(Value::as_array) {
                    Some(entries) => call
                        .message_bodies
                        .extend(entries.iter().filter_map(|e| text(e, "MessageBody"))),
                    None => call.message_bodies.extend(text(&json, "MessageBody")),
                }
            }
            return call;
        }
        // Query protocol (form body `Action=…&…`): CloudFormation (the stack as its
        // ARN with any stack id, `stack/<name>/*`), SNS (the topic) and STS.
        if matches!(signing.as_str(), "cloudformation" | "sns" | "sts") {
            let form = String::from_utf8_lossy(body);
            call.operation = query_param(&form, "Action").unwrap_or_default();
            call.resources.extend(query_param(&form, "TopicArn"));
            if let Some(name) = query_param(&form, "StackName") {
                call.resources.push(self.arn(
                    &region,
                    "cloudformation",
                    &format!("stack/{name}/*"),
                ));
            }
            return call;
        }
        // REST: EventBridge Scheduler.
        let mut first = head.lines().next().unwrap_or_default().split_whitespace();
        let method = first.next().unwrap_or_default();
        let target = first.next().unwrap_or_default();
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let segments: Vec<String> = path
            .split('/')
            .filter(|s| !s.is_empty())
            .map(percent_decode)
            .collect();
        if signing == "scheduler" {
            call.service = "scheduler".to_owned();
            match segments.as_slice() {
                [kind, name] if kind == "schedules" => {
                    call.operation = match method {
                        "POST" => "CreateSchedule",
                        "PUT" => "UpdateSchedule",
                        "DELETE" => "DeleteSchedule",
                        _ => "GetSchedule",
                    }
                    .to_owned();
                    let group = text(&json, "GroupName")
                        .or_else(|| query_param(query, "groupName"))
                        .unwrap_or_else(|| "default".to_owned());
                    call.resources.push(self.arn(
                        &region,
                        "scheduler",
                        &format!("schedule/{group}/{name}"),
                    ));
                    call.passed_role = json.get("Target").and_then(|t| text(t, "RoleArn"));
                }
                [kind] if kind == "schedules" => call.operation = "ListSchedules".to_owned(),
                [kind, name] if kind == "schedule-groups" => {
                    call.operation = match method {
                        "POST" => "CreateScheduleGroup",
                        "DELETE" => "DeleteScheduleGroup",
                        _ => "GetScheduleGroup",
                    }
                    .to_owned();
                    call.resources.push(self.arn(
                        &region,
                        "scheduler",
                        &format!("schedule-group/{name}"),
                    ));
                }
                [kind] if kind == "schedule-groups" => {
                    call.operation = "ListScheduleGroups".to_owned();
                }
                _ => call.operation = format!("{method} {path}"),
            }
        } else {
            call.operation = format!("{method} {path}");
        }
        call
    }

    /// Learns which stream each shard iterator in an answer reads.
    fn learn_iterators(&self, call: &Call, response: &[u8]) {
        if call.service != "dynamodb"
            || !matches!(call.operation.as_str(), "GetShardIterator" | "GetRecords")
        {
            return;
        }
        let Some(stream) = call.resource().map(str::to_owned) else {
            return;
        };
        let Some(body) = response_body(response) else {
            return;
        };
        let Ok(json) = serde_json::from_slice::<Value>(&body) else {
            return;
        };
        if let Ok(mut log) = self.log.lock() {
            for key in ["ShardIterator", "NextShardIterator"] {
                if let Some(it) = json.get(key).and_then(Value::as_str) {
                    log.iterators.insert(it.to_owned(), stream.clone());
                }
            }
        }
    }

    /// One request: read it, parse it, forward it, answer, record.
    async fn exchange(&self, mut client: TcpStream) -> std::io::Result<()> {
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
        // A request without a body (DELETE, GET) has no length: 0. Only a chunked one
        // is piped through as it is.
        let chunked = header(&head, "transfer-encoding").is_some();
        let length = match header(&head, "content-length") {
            Some(v) => v.parse::<usize>().ok(),
            None if chunked => None,
            None => Some(0),
        };
        let Some(length) = length else {
            // Not a plain request with a length: pipe it through as it is.
            let mut call = self.parse(&head, &[]);
            call.epoch_ms = epoch_ms();
            call.since_start = self.started.elapsed();
            self.record(call);
            let mut server = TcpStream::connect(self.upstream).await?;
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
        let mut call = self.parse(&head, &buf[head_end..head_end + length]);
        call.epoch_ms = epoch_ms();
        call.since_start = self.started.elapsed();
        let decision = self
            .injector
            .as_ref()
            .map(|i| i.decide(&call.service, &call.operation))
            .unwrap_or_default();
        if !decision.delay.is_zero() {
            tokio::time::sleep(decision.delay).await;
        }
        if let Some(fault @ (Fault::Throttle { .. } | Fault::ServerError { .. })) = decision.fault {
            // Refused before reaching the service: nothing applied.
            let response = error_response(&call.service, fault);
            call.status = status_of(&response);
            self.record(call);
            client.write_all(&response).await?;
            client.shutdown().await?;
            return Ok(());
        }
        let mut server = TcpStream::connect(self.upstream).await?;
        // Same request, asking the server to close the connection after its answer.
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
        let mut response = Vec::new();
        let read = server.read_to_end(&mut response).await;
        call.status = status_of(&response);
        self.learn_iterators(&call, &response);
        self.record(call);
        read?;
        if let Some(Fault::LoseResponse { stall }) = decision.fault {
            // Applied by the service; the caller never hears of it.
            if stall {
                let held = self.injector.as_ref().map(|i| i.faults().stall);
                tokio::time::sleep(held.unwrap_or_default()).await;
            }
            drop(client);
            return Ok(());
        }
        client.write_all(&response).await?;
        client.shutdown().await?;
        Ok(())
    }

    fn record(&self, call: Call) {
        if let Ok(mut log) = self.log.lock() {
            log.calls.push(call);
        }
    }
}

/// SDK configuration for a loopback endpoint signed with `access_key_id`: each
/// function of a test gets its own, so the proxy can tell their calls apart.
///
/// moto accepts any credentials, so the access key id only names the caller.
pub async fn sdk_config_as(endpoint: &str, access_key_id: &str) -> aws_config::SdkConfig {
    use aws_sdk_sqs::config::{Credentials, SharedCredentialsProvider};
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new(crate::moto::LOCAL_REGION))
        .endpoint_url(endpoint)
        .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
            access_key_id,
            "testing",
            None,
            None,
            "testkit",
        )))
        .load()
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared() -> Shared {
        Shared {
            upstream: SocketAddr::from(([127, 0, 0, 1], 1)),
            options: ProxyOptions::default(),
            log: Arc::default(),
            started: Instant::now(),
            injector: None,
        }
    }

    const AUTH: &str = "Authorization: AWS4-HMAC-SHA256 Credential=reconciler/20261203/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=0";
    const FORM: &str = "content-type: application/x-www-form-urlencoded\r\n";

    /// The call a request parses to: `request` (method and target), signed for
    /// `service`, with `headers` (each line ending in CRLF) and `body`.
    fn call(request: &str, service: &str, headers: &str, body: &[u8]) -> Call {
        let auth = AUTH.replace("/dynamodb/", &format!("/{service}/"));
        shared().parse(
            &format!("{request} HTTP/1.1\r\n{auth}\r\n{headers}\r\n"),
            body,
        )
    }

    /// A call of a JSON protocol: `POST /` with `X-Amz-Target: target`.
    fn json_call(service: &str, target: &str, body: &[u8]) -> Call {
        call(
            "POST /",
            service,
            &format!("X-Amz-Target: {target}\r\n"),
            body,
        )
    }

    #[test]
    fn dynamodb_calls_name_table_index_and_transaction_items() {
        let c = json_call(
            "dynamodb",
            "DynamoDB_20120810.Query",
            br#"{"TableName":"p-transactions","IndexName":"reconcile-index"}"#,
        );
        assert_eq!(c.caller, "reconciler");
        assert_eq!(
            (c.service.as_str(), c.operation.as_str()),
            ("dynamodb", "Query")
        );
        assert_eq!(
            c.resources,
            vec!["arn:aws:dynamodb:us-east-1:123456789012:table/p-transactions/index/reconcile-index"]
        );
        let c = json_call(
            "dynamodb",
            "DynamoDB_20120810.TransactWriteItems",
            br#"{"TransactItems":[{"Put":{"TableName":"a"}},{"ConditionCheck":{"TableName":"b"}}]}"#,
        );
        assert_eq!(
            c.parts,
            vec![
                Part {
                    kind: "Put".into(),
                    resource: "arn:aws:dynamodb:us-east-1:123456789012:table/a".into()
                },
                Part {
                    kind: "ConditionCheck".into(),
                    resource: "arn:aws:dynamodb:us-east-1:123456789012:table/b".into()
                }
            ]
        );
    }

    #[test]
    fn query_protocol_calls_name_the_stack() {
        let c = call(
            "POST /",
            "cloudformation",
            FORM,
            b"Action=DescribeStacks&Version=2010-05-15&StackName=dr%2Dprod",
        );
        assert_eq!(
            (c.service.as_str(), c.operation.as_str()),
            ("cloudformation", "DescribeStacks")
        );
        assert_eq!(
            c.resource(),
            Some("arn:aws:cloudformation:us-east-1:123456789012:stack/dr-prod/*")
        );
        let c = call(
            "POST /",
            "sns",
            FORM,
            b"Action=ListSubscriptionsByTopic&TopicArn=arn%3Aaws%3Asns%3Aus-east-1%3A123456789012%3Ap-alarms",
        );
        assert_eq!(
            (c.service.as_str(), c.resource()),
            ("sns", Some("arn:aws:sns:us-east-1:123456789012:p-alarms"))
        );
        let c = call(
            "POST /",
            "sts",
            FORM,
            b"Action=GetCallerIdentity&Version=2011-06-15",
        );
        assert_eq!(
            (c.service.as_str(), c.operation.as_str()),
            ("sts", "GetCallerIdentity")
        );
        assert_eq!(c.resource(), None);
    }

    #[test]
    fn sqs_and_scheduler_calls_name_queue_schedule_and_passed_role() {
        let c = json_call(
            "sqs",
            "AmazonSQS.SendMessageBatch",
            br#"{"QueueUrl":"http://127.0.0.1:5000/123456789012/p-retry","Entries":[{"MessageBody":"a"},{"MessageBody":"b"}]}"#,
        );
        assert_eq!(c.service, "sqs");
        assert_eq!(
            c.resource(),
            Some("arn:aws:sqs:us-east-1:123456789012:p-retry")
        );
        assert_eq!(c.message_bodies, vec!["a", "b"]);

        let c = call(
            "POST /schedules/retry-TX%2D1-2",
            "scheduler",
            "",
            br#"{"GroupName":"p-retries","Target":{"RoleArn":"arn:aws:iam::123456789012:role/s"}}"#,
        );
        assert_eq!(c.operation, "CreateSchedule");
        assert_eq!(
            c.resource(),
            Some("arn:aws:scheduler:us-east-1:123456789012:schedule/p-retries/retry-TX-1-2")
        );
        assert_eq!(
            c.passed_role.as_deref(),
            Some("arn:aws:iam::123456789012:role/s")
        );
        let request = "DELETE /schedules/x?groupName=g&clientToken=1";
        let c = call(request, "scheduler", "", b"");
        assert_eq!(c.operation, "DeleteSchedule");
        assert_eq!(
            c.resource(),
            Some("arn:aws:scheduler:us-east-1:123456789012:schedule/g/x")
        );
    }

    #[test]
    fn chunked_answers_are_dechunked() {
        let r = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"a\r\n4\r\n\":1}\r\n0\r\n\r\n";
        assert_eq!(response_body(r).unwrap(), b"{\"a\":1}");
        assert_eq!(status_of(r), 200);
    }
}
