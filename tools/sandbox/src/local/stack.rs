//! The whole local stack: moto, every resource, the functions in process behind the
//! emulators (the starter on the intake queue among them), the reconciler on its cron,
//! the audit stream and the external service.

use super::esm::{self, EsmSettings, EsmStats, SqsFunction};
use super::external::{self, ExternalSettings, ExternalStats};
use super::http_service;
use super::scheduler::{self, SchedulerSettings, SchedulerStats};
use super::stop::{Stop, StopSource};
use super::stream_esm::{self, StreamEsmSettings, StreamEsmStats, StreamFunction};
use super::SqsDirectory;
use crate::args::ServiceVia;
use crate::error::Error;
use aws::audit::{AuditWriter, Retention};
use aws::config::vars;
use aws::config::{
    AuditWriterConfig, HttpBridgeConfig, PublisherConfig, ReconcilerConfig, ResponseHandlerConfig,
    RetryHandlerConfig, StackNames, StarterConfig,
};
use domain::decide::Delivery;
use domain::defaults as d;
use domain::ports::SystemClock;
use domain::ports::{Clock, PortError, RequestPublisher, RetryPublisher};
use domain::RetryEvent;
use reconciler::Reconciler;
use retry_handler::RetryHandler;
use runtime::rate::{Paced, Pacer};
use runtime::Metrics;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use testkit::drain::{drain_into, StreamPosition};
use testkit::faults::Faults;
use testkit::moto::{Endpoints, MotoServer};
use testkit::provision::Provisioned;
use testkit::proxy::Proxy;
use tokio::task::JoinHandle;

/// The event source mapping settings of `template.yaml` (its parameter defaults;
/// `tests/template.rs` checks they are the same).
pub mod template {
    pub const RESPONSE_BATCH_SIZE: usize = 10;
    pub const RESPONSE_BATCHING_WINDOW_SECONDS: u64 = 1;
    pub const RESPONSE_MAX_CONCURRENCY: usize = 5;
    pub const RETRY_BATCH_SIZE: usize = 10;
    pub const RETRY_BATCHING_WINDOW_SECONDS: u64 = 1;
    pub const RETRY_MAX_CONCURRENCY: usize = 2;
    pub const MAX_REQUESTS_PER_SECOND: f64 = 5.0;
    pub const INTAKE_BATCH_SIZE: usize = 10;
    /// The intake's event source has no batching window.
    pub const INTAKE_BATCHING_WINDOW_SECONDS: u64 = 0;
    pub const INTAKE_MAX_CONCURRENCY: usize = 2;
    pub const INTAKE_STARTS_PER_SECOND: f64 = 5.0;
    pub const HTTP_BRIDGE_BATCH_SIZE: usize = 10;
    /// The HTTP bridge's event source has no batching window.
    pub const HTTP_BRIDGE_BATCHING_WINDOW_SECONDS: u64 = 0;
    pub const HTTP_BRIDGE_MAX_CONCURRENCY: usize = 2;
    /// The publisher's stream event source (outbox delivery): the audit writer's
    /// BatchSize and MaximumRetryAttempts, bisect on error, and its filter.
    pub const PUBLISHER_BATCH_SIZE: usize = 100;
    pub const PUBLISHER_MAX_RETRY_ATTEMPTS: u32 = 10;
    pub const PUBLISHER_FILTER: &str = r#"{"dynamodb":{"NewImage":{"status":{"S":["SENDING"]},"publishing_since":{"S":[{"exists":false}]}}}}"#;
    /// Lambda invokes a stream's function once per shard at a time
    /// (ParallelizationFactor 1): one publisher execution environment per shard.
    pub const PUBLISHER_ENVIRONMENTS: usize = 1;
}

/// One event source mapping's tuning.
#[derive(Debug, Clone, Copy)]
pub struct EsmTuning {
    pub batch_size: usize,
    pub batching_window: Duration,
    pub max_concurrency: usize,
}

/// How to run the local stack.
#[derive(Debug, Clone)]
pub struct StackOptions {
    /// Prefix of every resource name.
    pub prefix: String,
    /// Use this moto endpoint instead of starting a server.
    pub moto_endpoint: Option<String>,
    /// When the stack starts moto itself and injects no faults: one moto server per
    /// service (DynamoDB with its streams, SQS, Scheduler) rather than one for all,
    /// so the services' calls are answered in parallel.
    pub split_services: bool,
    /// Function environment set on top of what the template sets (the demo compresses
    /// time: BACKOFF_*, RECONCILE_THRESHOLD_SECONDS, MAX_REQUESTS_PER_SECOND…).
    pub env: Vec<(&'static str, String)>,
    pub response_esm: EsmTuning,
    pub retry_esm: EsmTuning,
    /// The starter's event source mapping on the intake queue.
    pub intake_esm: EsmTuning,
    /// The HTTP bridge's event source mapping on the request queue
    /// (`service: Http`).
    pub http_esm: EsmTuning,
    /// Visibility timeout of received messages; `None` = each queue's own.
    pub visibility_timeout: Option<i32>,
    pub reconcile_every: Duration,
    pub scheduler_tick: Duration,
    pub audit_poll: Duration,
    pub external: ExternalOptions,
    /// Run the simulated external service on the request queue (`false`: something
    /// else answers, e.g. the staging harness in `retryctl verify`'s tests).
    pub external_service: bool,
    /// How the simulated service is reached: it reads the request queue itself, or
    /// it is an HTTP server on loopback and the HTTP bridge calls it.
    pub service: ServiceVia,
    /// How requests reach the request queue: `Direct` (the deciding function
    /// publishes) or `Outbox` (a FIFO request queue and DLQ, `REQUEST_DELIVERY=outbox`
    /// in every function's environment, and the publisher on the transactions
    /// table's stream behind an emulation of its event source).
    pub delivery: Delivery,
    /// Faults injected between the functions (and the workload's starts) and the
    /// AWS endpoint, by the fault proxy. The emulators of what AWS runs (event source
    /// mappings, scheduler, stream) talk to the endpoint directly.
    pub faults: Option<Faults>,
}

/// The simulated external service's behaviour.
#[derive(Debug, Clone)]
pub struct ExternalOptions {
    pub cancel_probability: f64,
    pub latency_min: Duration,
    pub latency_max: Duration,
    pub duplicate_response_probability: f64,
    /// Probability that a request is never answered.
    pub silent_probability: f64,
    pub seed: u64,
    /// A window of the run during which the service answers ERROR, or nothing.
    pub outage: Option<external::Outage>,
}

impl StackOptions {
    /// The template's settings with the given prefix (no time compression).
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
            moto_endpoint: None,
            split_services: false,
            env: vec![],
            response_esm: EsmTuning {
                batch_size: template::RESPONSE_BATCH_SIZE,
                batching_window: Duration::from_secs(template::RESPONSE_BATCHING_WINDOW_SECONDS),
                max_concurrency: template::RESPONSE_MAX_CONCURRENCY,
            },
            retry_esm: EsmTuning {
                batch_size: template::RETRY_BATCH_SIZE,
                batching_window: Duration::from_secs(template::RETRY_BATCHING_WINDOW_SECONDS),
                max_concurrency: template::RETRY_MAX_CONCURRENCY,
            },
            intake_esm: EsmTuning {
                batch_size: template::INTAKE_BATCH_SIZE,
                batching_window: Duration::from_secs(template::INTAKE_BATCHING_WINDOW_SECONDS),
                max_concurrency: template::INTAKE_MAX_CONCURRENCY,
            },
            http_esm: EsmTuning {
                batch_size: template::HTTP_BRIDGE_BATCH_SIZE,
                batching_window: Duration::from_secs(template::HTTP_BRIDGE_BATCHING_WINDOW_SECONDS),
                max_concurrency: template::HTTP_BRIDGE_MAX_CONCURRENCY,
            },
            visibility_timeout: None,
            reconcile_every: Duration::from_secs(300),
            scheduler_tick: Duration::from_millis(100),
            audit_poll: Duration::from_millis(250),
            external: ExternalOptions {
                cancel_probability: 0.5,
                latency_min: Duration::from_millis(20),
                latency_max: Duration::from_millis(200),
                duplicate_response_probability: 0.0,
                silent_probability: 0.0,
                seed: 7,
                outage: None,
            },
            external_service: true,
            service: ServiceVia::Queue,
            delivery: Delivery::Direct,
            faults: None,
        }
    }
}

/// Counters of the reconciler cron and the audit stream.
#[derive(Debug, Default)]
pub struct CronStats {
    pub runs: AtomicU64,
    pub examined: AtomicU64,
    /// `"<STATUS>/<action>"` → count.
    pub actions: Mutex<BTreeMap<String, u64>>,
}

#[derive(Debug, Default)]
pub struct AuditStats {
    pub rows_written: AtomicU64,
    pub errors: AtomicU64,
    /// Passes over the stream started so far (the first is pass 1).
    pub passes: AtomicU64,
    /// The number of the last pass that read no new change and wrote without error
    /// (0: none yet): once it is past the pass under way at some instant, every
    /// change made before that instant has been audited.
    pub last_empty_pass: AtomicU64,
}

/// What the audit stream had done at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AuditSnapshot {
    pub passes: u64,
    pub last_empty_pass: u64,
    pub rows_written: u64,
    pub errors: u64,
}

impl AuditStats {
    pub fn snapshot(&self) -> AuditSnapshot {
        AuditSnapshot {
            passes: self.passes.load(Ordering::SeqCst),
            last_empty_pass: self.last_empty_pass.load(Ordering::SeqCst),
            rows_written: self.rows_written.load(Ordering::SeqCst),
            errors: self.errors.load(Ordering::SeqCst),
        }
    }
}

/// A running local stack. [`Stack::shutdown`] stops everything it started.
pub struct Stack {
    moto: Vec<MotoServer>,
    /// The endpoint of every service when they share one; DynamoDB's when
    /// [`StackOptions::split_services`] put each on its own (see `endpoints`).
    pub endpoint: String,
    /// Where each service is served.
    pub endpoints: Endpoints,
    pub sdk: aws_config::SdkConfig,
    /// What the functions and the workload's starts call AWS with: through the fault
    /// proxy when faults are injected, else the same as `sdk`.
    pub functions_sdk: aws_config::SdkConfig,
    /// The fault proxy, when faults are injected (its tally of what it injected).
    pub proxy: Option<Proxy>,
    pub provisioned: Provisioned,
    /// The environment each function got (template values + overrides).
    pub env: HashMap<&'static str, HashMap<String, String>>,
    pub response_esm: Arc<EsmStats>,
    pub retry_esm: Arc<EsmStats>,
    pub intake_esm: Arc<EsmStats>,
    /// The HTTP bridge's event source mapping, when the service is reached over HTTP.
    pub http_esm: Option<Arc<EsmStats>>,
    /// The simulated service's URL template, when it is reached over HTTP.
    pub http_endpoint: Option<String>,
    pub scheduler: Arc<SchedulerStats>,
    /// How requests reach the request queue.
    pub delivery: Delivery,
    /// The publisher's stream event source (outbox delivery).
    pub publisher_esm: Option<Arc<StreamEsmStats>>,
    pub external: Arc<ExternalStats>,
    pub reconciler: Arc<CronStats>,
    pub audit: Arc<AuditStats>,
    /// Each function's metrics, summed over every invocation.
    pub metrics: BTreeMap<&'static str, Arc<Metrics>>,
    /// MaximumConcurrency × ⌊MAX_REQUESTS_PER_SECOND⌋ of the retry handler: the most
    /// requests the fleet may publish in any one-second window.
    pub rate_bound: f64,
    /// When each retried request left a retry handler (ms, after its pacer).
    pub publish_times: Arc<Mutex<Vec<i64>>>,
    /// Each retry event the breaker held back: its transaction, and when (ms).
    pub held: Arc<Mutex<Vec<(String, i64)>>>,
    source: StopSource,
    tasks: Vec<JoinHandle<()>>,
}

fn lookup(map: &HashMap<String, String>) -> impl Fn(&str) -> Option<String> + '_ {
    move |k| map.get(k).cloned()
}

fn config_error(function: &str, e: impl std::fmt::Display) -> Error {
    Error::Missing(format!("{function} configuration: {e}"))
}

/// Accessors of the settings the functions were given: each read from one function's
/// configuration, `default` (the configuration's own) when the stack left it unset.
macro_rules! given {
    ($($(#[doc = $doc:expr])* $name:ident: $t:ty = $function:literal $var:ident, $default:expr;)*) => {
        $(
            $(#[doc = $doc])*
            pub fn $name(&self) -> $t {
                self.setting($function, vars::$var.name, $default)
            }
        )*
    };
}

impl Stack {
    /// A setting `function` was given (its configuration's own default when the
    /// local stack left it unset).
    fn setting<T: std::str::FromStr>(&self, function: &str, name: &str, default: T) -> T {
        self.env
            .get(function)
            .and_then(|m| m.get(name))
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    }

    given! {
        /// The shard count of the reconciler index the functions were given.
        reconcile_shards: u16 = "retry-handler" RECONCILE_SHARDS, d::RECONCILE_SHARDS;
        /// The reconcile threshold the reconciler was given, in seconds.
        reconcile_threshold_seconds: u64 =
            "reconciler" RECONCILE_THRESHOLD_SECONDS, d::RECONCILE_THRESHOLD.as_secs();
        /// The requeue bound the reconciler was given.
        reconcile_requeue_max: u32 = "reconciler" RECONCILE_REQUEUE_MAX, d::RECONCILE_REQUEUE_MAX;
        /// The transaction deadline the functions were given, in seconds.
        transaction_deadline_seconds: u64 =
            "reconciler" TRANSACTION_DEADLINE_SECONDS, d::TRANSACTION_DEADLINE.as_secs();
        /// The retention of finished transactions the functions were given, in days.
        retention_days: u32 = "reconciler" RETENTION_DAYS, d::RETENTION_DAYS;
        /// The answer timeout the functions were given, in seconds.
        answer_timeout_seconds: u64 =
            "reconciler" ANSWER_TIMEOUT_SECONDS, d::ANSWER_TIMEOUT.as_secs();
    }

    /// Starts moto (unless an endpoint is given), provisions every resource and starts
    /// every component.
    pub async fn start(opts: StackOptions) -> Result<Stack, Error> {
        let (moto, endpoints) = match &opts.moto_endpoint {
            Some(e) => (vec![], Endpoints::single(e)),
            None if opts.split_services && opts.faults.is_none() => {
                let (d, q, s) = tokio::join!(
                    MotoServer::launch(MotoServer::PROGRAM),
                    MotoServer::launch(MotoServer::PROGRAM),
                    MotoServer::launch(MotoServer::PROGRAM)
                );
                let aws = |e: testkit::moto::LocalError| Error::Aws(e.to_string());
                let servers = vec![d.map_err(aws)?, q.map_err(aws)?, s.map_err(aws)?];
                let endpoints = Endpoints {
                    dynamodb: servers[0].endpoint_url(),
                    sqs: servers[1].endpoint_url(),
                    scheduler: servers[2].endpoint_url(),
                };
                (servers, endpoints)
            }
            None => {
                let server = MotoServer::launch(MotoServer::PROGRAM)
                    .await
                    .map_err(|e| Error::Aws(e.to_string()))?;
                let e = Endpoints::single(&server.endpoint_url());
                (vec![server], e)
            }
        };
        let endpoint = endpoints.dynamodb.clone();
        let sdk = testkit::moto::sdk_config_for(&endpoints).await;
        let names = StackNames::new(&opts.prefix);
        let outbox = opts.delivery.is_outbox();
        let provisioned = testkit::provision::provision_for(&sdk, &names, outbox)
            .await
            .map_err(|e| Error::Aws(e.to_string()))?;

        let (process, seed) = opts
            .faults
            .as_ref()
            .map(|f| (f.process, f.seed))
            .unwrap_or_default();
        let (proxy, functions_sdk) = match &opts.faults {
            Some(f) => {
                let proxy = Proxy::with_faults(&endpoint, f.clone())
                    .await
                    .map_err(|e| Error::Aws(format!("fault proxy: {e}")))?;
                let through = testkit::moto::sdk_config(&proxy.endpoint).await;
                (Some(proxy), through)
            }
            None => (None, sdk.clone()),
        };

        let mut env: HashMap<&'static str, HashMap<String, String>> = HashMap::new();
        for f in [
            "response-handler",
            "retry-handler",
            "reconciler",
            "audit-writer",
            starter::FUNCTION,
            publisher::FUNCTION,
        ] {
            if f == publisher::FUNCTION && !outbox {
                continue;
            }
            let mut m: HashMap<String, String> = provisioned
                .env_for(f)
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect();
            if outbox {
                m.insert(
                    vars::REQUEST_DELIVERY.name.to_owned(),
                    opts.delivery.as_str().to_owned(),
                );
            }
            for (k, v) in &opts.env {
                m.insert((*k).to_owned(), v.clone());
            }
            env.insert(f, m);
        }
        let empty = HashMap::new();
        let env_of = |f: &str| env.get(f).unwrap_or(&empty);
        let response_cfg = ResponseHandlerConfig::from_lookup(&lookup(env_of("response-handler")))
            .map_err(|e| config_error("response-handler", e))?;
        let retry_cfg = RetryHandlerConfig::from_lookup(&lookup(env_of("retry-handler")))
            .map_err(|e| config_error("retry-handler", e))?;
        let reconciler_cfg = ReconcilerConfig::from_lookup(&lookup(env_of("reconciler")))
            .map_err(|e| config_error("reconciler", e))?;
        let audit_cfg = AuditWriterConfig::from_lookup(&lookup(env_of("audit-writer")))
            .map_err(|e| config_error("audit-writer", e))?;
        let starter_cfg = StarterConfig::from_lookup(&lookup(env_of(starter::FUNCTION)))
            .map_err(|e| config_error(starter::FUNCTION, e))?;

        let ddb = aws_sdk_dynamodb::Client::new(&sdk);
        let sqs = aws_sdk_sqs::Client::new(&sdk);
        let sched = aws_sdk_scheduler::Client::new(&sdk);
        let streams = aws_sdk_dynamodbstreams::Client::new(&sdk);
        let (source, stop) = StopSource::new();
        let mut tasks = Vec::new();
        let mut metrics = BTreeMap::new();

        // Response handler behind its event source mapping: one handler per execution
        // environment, built exactly as the Lambda `main` does.
        let responders = per_environment(
            (
                &mut metrics,
                &response_cfg.metrics_namespace,
                response_handler::FUNCTION,
            ),
            opts.response_esm.max_concurrency,
            |_| {
                Ok::<_, std::convert::Infallible>(response_handler::wiring::response_handler(
                    &functions_sdk,
                    &response_cfg,
                ))
            },
            |h, event, m| async move { h.handle_event(event, &m).await.map_err(|e| e.to_string()) },
        )?;
        let (h, response_esm) = esm::spawn(
            sqs.clone(),
            esm_on(
                response_handler::FUNCTION,
                &provisioned.response,
                &opts.response_esm,
                opts.visibility_timeout,
                process.kill_invocation,
                seed ^ 0x5eed_e5a1,
            ),
            |i| responders[i % responders.len()].clone(),
            stop.clone(),
        );
        tasks.extend(h);

        // Retry handler: one pacer per execution environment (poller).
        let max_wait = opts
            .visibility_timeout
            .map(|v| Duration::from_secs(u64::try_from(v).unwrap_or(20) / 2))
            .unwrap_or(runtime::rate::DEFAULT_MAX_WAIT);
        let mut pacers = Vec::new();
        for _ in 0..opts.retry_esm.max_concurrency.max(1) {
            pacers.push(Arc::new(
                Pacer::per_second(retry_cfg.max_requests_per_second)
                    .map_err(|e| config_error("retry-handler", e))?,
            ));
        }
        // Built as the Lambda `main` does, except that each execution environment has
        // its own pacer (in Lambda each environment is its own process; here they
        // share one, so the process-wide pacer is replaced per environment).
        let publish_times: Arc<Mutex<Vec<i64>>> = Arc::default();
        let held: Arc<Mutex<Vec<(String, i64)>>> = Arc::default();
        let retry_functions = per_environment(
            (
                &mut metrics,
                &retry_cfg.metrics_namespace,
                retry_handler::FUNCTION,
            ),
            opts.retry_esm.max_concurrency,
            |i| {
                let pacer = pacers[i].clone();
                // The same handler, its publisher wrapped (inside the pacer) to record
                // when each request leaves.
                retry_handler::wiring::retry_handler(&functions_sdk, &retry_cfg).map(|h| {
                    RetryHandler {
                        store: h.store,
                        requests: Paced {
                            inner: Timed {
                                inner: h.requests.inner,
                                times: publish_times.clone(),
                            },
                            pacer: pacer.clone(),
                            max_wait,
                        },
                        retries: Held {
                            inner: h.retries,
                            held: held.clone(),
                        },
                        breaker: h.breaker,
                        pacer: Some(pacer),
                        function: h.function,
                    }
                })
            },
            |h, event, m| async move { h.handle_event(event, &m).await.map_err(|e| e.to_string()) },
        )?;
        let (h, retry_esm) = esm::spawn(
            sqs.clone(),
            esm_on(
                retry_handler::FUNCTION,
                &provisioned.retry,
                &opts.retry_esm,
                opts.visibility_timeout,
                process.kill_invocation,
                seed ^ 0x5eed_e5a2,
            ),
            |i| retry_functions[i % retry_functions.len()].clone(),
            stop.clone(),
        );
        tasks.extend(h);
        let mut rate_bound = pacers.first().map(|p| p.burst()).unwrap_or(1) as f64
            * opts.retry_esm.max_concurrency.max(1) as f64;

        // The starter on the intake queue: one per execution environment (each with
        // its own pacer), built exactly as the Lambda `main` does.
        let starters = per_environment(
            (
                &mut metrics,
                &starter_cfg.metrics_namespace,
                starter::FUNCTION,
            ),
            opts.intake_esm.max_concurrency,
            |_| starter::wiring::starter(&functions_sdk, &starter_cfg),
            |h, event, m| async move { h.handle_event(event, &m).await.map_err(|e| e.to_string()) },
        )?;
        let (h, intake_esm) = esm::spawn(
            sqs.clone(),
            esm_on(
                starter::FUNCTION,
                &provisioned.intake,
                &opts.intake_esm,
                opts.visibility_timeout,
                process.kill_invocation,
                seed ^ 0x5eed_e5a3,
            ),
            |i| starters[i % starters.len()].clone(),
            stop.clone(),
        );
        tasks.extend(h);

        // The scheduler, delivering one-time schedules to the retry queue.
        let (h, scheduler_stats) = scheduler::spawn(
            sched.clone(),
            SqsDirectory::new(sqs.clone()),
            SchedulerSettings {
                group: provisioned.names.schedule_group.clone(),
                tick: opts.scheduler_tick,
                process,
                seed: seed ^ 0x5eed_5c4e,
            },
            stop.clone(),
        );
        tasks.push(h);

        // The reconciler on its cron.
        let reconciler_metrics = registered(
            &mut metrics,
            &reconciler_cfg.metrics_namespace,
            reconciler::FUNCTION,
        );
        let reconciler = reconciler::wiring::reconciler(&functions_sdk, &reconciler_cfg);
        let cron = Arc::new(CronStats::default());
        tasks.push(tokio::spawn(reconcile_cron(
            reconciler,
            reconciler_metrics,
            opts.reconcile_every,
            cron.clone(),
            stop.clone(),
        )));

        // Outbox delivery: the publisher on the transactions table's stream, the
        // second reader beside the audit writer; it sends every request, so the
        // bound on requests per second is its environments' pacers.
        let mut publisher_esm = None;
        if outbox {
            let cfg = PublisherConfig::from_lookup(&lookup(env_of(publisher::FUNCTION)))
                .map_err(|e| config_error(publisher::FUNCTION, e))?;
            let (function, bound) =
                publisher_function(&functions_sdk, &cfg, publish_times.clone(), max_wait)?;
            let m = registered(&mut metrics, &cfg.metrics_namespace, publisher::FUNCTION);
            let invoke: StreamFunction = Arc::new(move |event| {
                let (f, m) = (function.clone(), m.clone());
                Box::pin(async move { Ok(f.handle_event(&event, &m).await) })
            });
            let filter = serde_json::from_str(template::PUBLISHER_FILTER)
                .map_err(|e| Error::Missing(format!("the publisher's filter: {e}")))?;
            let (h, stats) = stream_esm::spawn(
                streams.clone(),
                StreamEsmSettings {
                    function: publisher::FUNCTION.into(),
                    stream_arn: provisioned.transactions_stream_arn.clone(),
                    region: testkit::moto::LOCAL_REGION.into(),
                    batch_size: template::PUBLISHER_BATCH_SIZE,
                    max_retry_attempts: template::PUBLISHER_MAX_RETRY_ATTEMPTS,
                    bisect_on_error: true,
                    filter: Some(filter),
                    poll: opts.audit_poll,
                    kill_probability: process.kill_invocation,
                    seed: seed ^ 0x5eed_e5a5,
                },
                invoke,
                stop.clone(),
            );
            tasks.push(h);
            publisher_esm = Some(stats);
            rate_bound = bound * template::PUBLISHER_ENVIRONMENTS as f64;
        }

        // The transactions table's stream → the audit writer.
        let audit = Arc::new(AuditStats::default());
        tasks.push(tokio::spawn(audit_stream(
            streams,
            AuditWriter::new(
                ddb.clone(),
                &audit_cfg.audit_table,
                Retention::new(audit_cfg.retention_days, audit_cfg.transaction_deadline),
            )
            .with_payloads(&audit_cfg.payloads_table, audit_cfg.retention),
            provisioned.transactions_stream_arn.clone(),
            opts.audit_poll,
            audit.clone(),
            stop.clone(),
        )));

        // The external service: on the request queue, or over HTTP behind the bridge.
        let service_settings = ExternalSettings {
            request_queue_url: provisioned.request.url.clone(),
            response_queue_url: provisioned.response.url.clone(),
            cancel_probability: opts.external.cancel_probability,
            latency_min: opts.external.latency_min,
            latency_max: opts.external.latency_max,
            duplicate_response_probability: opts.external.duplicate_response_probability,
            silent_probability: opts.external.silent_probability,
            cancel_reason: CANCEL_REASON.into(),
            consumers: 4,
            seed: opts.external.seed,
            outage: opts.external.outage,
        };
        let (mut http_esm, mut http_endpoint) = (None, None);
        let external_stats = match (opts.external_service, opts.service) {
            (false, _) => Arc::default(),
            (true, ServiceVia::Queue) => {
                let (h, stats) = external::spawn(sqs.clone(), service_settings, stop);
                tasks.extend(h);
                stats
            }
            (true, ServiceVia::Http) => {
                let (addr, h, stats) = http_service::spawn(service_settings, stop.clone())
                    .await
                    .map_err(|e| Error::Aws(format!("the HTTP service on 127.0.0.1: {e}")))?;
                tasks.push(h);
                let endpoint = format!("http://{addr}{}", http_service::PATH_TEMPLATE);
                let bridge_env = http_bridge_env(&provisioned, &opts, &endpoint);
                let config = HttpBridgeConfig::from_lookup(&lookup(&bridge_env))
                    .map_err(|e| config_error(http_bridge::FUNCTION, e))?;
                env.insert(http_bridge::FUNCTION, bridge_env);
                // One bridge per execution environment, built exactly as the Lambda
                // `main` does.
                let bridges = per_environment(
                    (
                        &mut metrics,
                        &config.metrics_namespace,
                        http_bridge::FUNCTION,
                    ),
                    opts.http_esm.max_concurrency,
                    |_| http_bridge::wiring::bridge(&functions_sdk, &config),
                    |b, event, m| async move {
                        b.handle_event(event, &m).await.map_err(|e| e.to_string())
                    },
                )?;
                let (h, esm_stats) = esm::spawn(
                    sqs.clone(),
                    esm_on(
                        http_bridge::FUNCTION,
                        &provisioned.request,
                        &opts.http_esm,
                        // A call may take the whole function timeout: a compressed
                        // visibility timeout shorter than it would redeliver requests
                        // still being sent.
                        opts.visibility_timeout.map(|v| {
                            v.max(
                                i32::try_from(aws::config::timeouts::HTTP_BRIDGE_SECONDS)
                                    .unwrap_or(30),
                            )
                        }),
                        process.kill_invocation,
                        seed ^ 0x5eed_e5a4,
                    ),
                    |i| bridges[i % bridges.len()].clone(),
                    stop,
                );
                tasks.extend(h);
                http_esm = Some(esm_stats);
                http_endpoint = Some(endpoint);
                stats
            }
        };

        let stack = Stack {
            moto,
            endpoint,
            endpoints,
            sdk,
            functions_sdk,
            proxy,
            provisioned,
            env,
            response_esm,
            retry_esm,
            intake_esm,
            http_esm,
            http_endpoint,
            scheduler: scheduler_stats,
            delivery: opts.delivery,
            publisher_esm,
            external: external_stats,
            reconciler: cron,
            audit,
            metrics,
            rate_bound,
            publish_times,
            held,
            source,
            tasks,
        };
        // DescribeStacks of the prefix answers as for a deployed stack (`--stack`).
        stack.register().await?;
        Ok(stack)
    }

    /// The settings of the local stack as DescribeStacks lists a deployed stack's
    /// parameters (the values its functions were given).
    pub fn parameters(&self) -> Vec<(&'static str, String)> {
        vec![
            ("ReconcileShards", self.reconcile_shards().to_string()),
            (
                "AnswerTimeoutSeconds",
                self.answer_timeout_seconds().to_string(),
            ),
            (
                "ReconcileThresholdSeconds",
                self.reconcile_threshold_seconds().to_string(),
            ),
            (
                "ReconcileRequeueMax",
                self.reconcile_requeue_max().to_string(),
            ),
            (
                "TransactionDeadlineSeconds",
                self.transaction_deadline_seconds().to_string(),
            ),
            ("RetentionDays", self.retention_days().to_string()),
            ("RequestDelivery", self.delivery.as_str().to_owned()),
        ]
    }

    /// Registers the local stack in moto's CloudFormation under its prefix, as
    /// `template.yaml` would have created it: DescribeStacks answers with its outputs and
    /// parameters, so `retryctl --stack PREFIX` reaches it as it reaches a deployed one.
    pub async fn register(&self) -> Result<(), Error> {
        let entry = crate::outputs::local(
            &self.provisioned,
            self.reconcile_shards(),
            self.answer_timeout_seconds(),
        );
        crate::outputs::register_stack(&self.sdk, &self.endpoint, &entry, &self.parameters()).await
    }

    pub fn names(&self) -> &StackNames {
        &self.provisioned.names
    }

    /// A stop signal that fires when the stack shuts down.
    pub fn stop_token(&self) -> Stop {
        self.source.token()
    }

    /// Stops every component, waits for them (at most 15 s) and stops moto.
    pub async fn shutdown(self) {
        self.source.stop();
        let all = futures::future::join_all(self.tasks);
        let _ = tokio::time::timeout(Duration::from_secs(15), all).await;
        for moto in self.moto {
            moto.stop().await;
        }
    }
}

/// `function`'s event source mapping on `queue`, tuned as `tuning` says, polling for
/// 1 s at a time.
fn esm_on(
    function: &str,
    queue: &testkit::provision::QueueRef,
    tuning: &EsmTuning,
    visibility_timeout: Option<i32>,
    kill_probability: f64,
    seed: u64,
) -> EsmSettings {
    EsmSettings {
        function: function.into(),
        queue_url: queue.url.clone(),
        queue_arn: queue.arn.clone(),
        region: testkit::moto::LOCAL_REGION.into(),
        batch_size: tuning.batch_size,
        batching_window: tuning.batching_window,
        max_concurrency: tuning.max_concurrency,
        poll_wait_seconds: 1,
        visibility_timeout,
        kill_probability,
        seed,
    }
}

/// `function`'s metrics, registered under its name for the report.
fn registered(
    metrics: &mut BTreeMap<&'static str, Arc<Metrics>>,
    namespace: &str,
    function: &'static str,
) -> Arc<Metrics> {
    let m = Arc::new(Metrics::new(namespace, function));
    metrics.insert(function, m.clone());
    m
}

/// `function` once per execution environment (`n` of them, at least one), each with
/// its own handler built by `build` (given the environment's index) as the Lambda
/// `main` builds it, invoked by `invoke` with the function's metrics, registered in
/// `metrics` under `namespace`.
fn per_environment<H, E, Fut>(
    (metrics, namespace, function): (
        &mut BTreeMap<&'static str, Arc<Metrics>>,
        &str,
        &'static str,
    ),
    n: usize,
    build: impl Fn(usize) -> Result<H, E>,
    invoke: impl Fn(Arc<H>, runtime::SqsEvent, Arc<Metrics>) -> Fut + Clone + Send + Sync + 'static,
) -> Result<Vec<SqsFunction>, Error>
where
    H: Send + Sync + 'static,
    E: std::fmt::Display,
    Fut: std::future::Future<Output = Result<runtime::SqsBatchResponse, String>> + Send + 'static,
{
    let metrics = registered(metrics, namespace, function);
    (0..n.max(1))
        .map(|i| -> Result<SqsFunction, Error> {
            let handler = Arc::new(build(i).map_err(|e| config_error(function, e))?);
            let (m, invoke) = (metrics.clone(), invoke.clone());
            Ok(Arc::new(move |event| {
                Box::pin(invoke(handler.clone(), event, m.clone()))
            }))
        })
        .collect()
}

/// The publisher as its Lambda `main` builds it, its requests recorded (inside its
/// pacer) when they leave, as the retry handler's are; and its pacer's bound on
/// requests per second.
fn publisher_function(
    sdk: &aws_config::SdkConfig,
    cfg: &PublisherConfig,
    times: Arc<Mutex<Vec<i64>>>,
    max_wait: Duration,
) -> Result<(Arc<LocalPublisher>, f64), Error> {
    let p =
        publisher::wiring::publisher(sdk, cfg).map_err(|e| config_error(publisher::FUNCTION, e))?;
    let pacer = p.requests.pacer.clone();
    let bound = pacer.burst() as f64;
    let handler = publisher::Publisher {
        store: p.store,
        requests: Paced {
            inner: Timed {
                inner: p.requests.inner,
                times,
            },
            pacer: pacer.clone(),
            max_wait,
        },
        notes: p.notes,
        clock: p.clock,
        settings: p.settings,
        concurrency: p.concurrency,
        seeds: p.seeds,
        pacer: Some(pacer),
        namespace: p.namespace,
    };
    Ok((Arc::new(handler), bound))
}

/// The publisher of the local stack: [`publisher::wiring::AwsPublisher`] with its
/// requests timed.
type LocalPublisher = publisher::Publisher<
    aws::dynamo::DynamoStore<aws::dynamo::PayloadsTable>,
    Paced<Timed<aws::sqs::SqsRequestPublisher>>,
    AuditWriter,
>;

/// The `reason` of the simulated service's CANCELLED answers.
pub const CANCEL_REASON: &str = "NOT_AVAILABLE";

/// The HTTP bridge's environment as the template sets it (the stack's queues, the
/// parameters' defaults), with the simulated service as `HTTP_ENDPOINT`, its
/// classification as `HTTP_CLASSIFICATION`, and the local stack's overrides.
fn http_bridge_env(
    provisioned: &Provisioned,
    opts: &StackOptions,
    endpoint: &str,
) -> HashMap<String, String> {
    let mut m: HashMap<String, String> = provisioned
        .env_for(http_bridge::FUNCTION)
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    m.insert(vars::HTTP_ENDPOINT.name.to_owned(), endpoint.to_owned());
    m.insert(
        vars::HTTP_CLASSIFICATION.name.to_owned(),
        http_service::classification(CANCEL_REASON),
    );
    for (k, v) in &opts.env {
        m.insert((*k).to_owned(), v.clone());
    }
    m
}

async fn reconcile_cron<St, Sc, Rt, Rq, Nt, Br>(
    reconciler: Reconciler<St, Sc, Rt, Rq, Nt, Br, SystemClock>,
    metrics: Arc<Metrics>,
    every: Duration,
    stats: Arc<CronStats>,
    mut stop: Stop,
) where
    St: reconciler::ReconcileStore,
    Sc: domain::ports::ScheduleCreator,
    Rt: domain::ports::RetryPublisher,
    Rq: domain::ports::RequestPublisher,
    Nt: domain::ports::AuditNotes,
    Br: runtime::breaker::BreakerStore,
{
    loop {
        if stop.sleep(every).await {
            break;
        }
        let report = reconciler.run(&metrics).await;
        stats.runs.fetch_add(1, Ordering::Relaxed);
        stats.examined.fetch_add(report.examined, Ordering::Relaxed);
        if let Ok(mut a) = stats.actions.lock() {
            for (status, actions) in &report.actions {
                for (action, n) in actions {
                    *a.entry(format!("{status}/{action}")).or_insert(0) += n;
                }
            }
        }
    }
}

/// The stream → audit writer: what AWS does by invoking `audit-writer` with stream
/// batches, done by reading the stream and applying each change with the same writer.
async fn audit_stream(
    streams: aws_sdk_dynamodbstreams::Client,
    writer: AuditWriter,
    stream_arn: String,
    poll: Duration,
    stats: Arc<AuditStats>,
    mut stop: Stop,
) {
    let mut position = StreamPosition::default();
    loop {
        let pass = stats.passes.fetch_add(1, Ordering::SeqCst) + 1;
        match drain_into(&writer, &streams, &stream_arn, &mut position).await {
            Ok(r) => {
                stats
                    .rows_written
                    .fetch_add(r.rows as u64, Ordering::SeqCst);
                if r.changes == 0 {
                    stats.last_empty_pass.store(pass, Ordering::SeqCst);
                }
            }
            Err(e) => {
                stats.errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, "audit stream read failed; retrying");
            }
        }
        if stop.sleep(poll).await {
            // One last pass so that nothing written before the stop is missed.
            let _ = drain_into(&writer, &streams, &stream_arn, &mut position).await;
            break;
        }
    }
}

/// A request publisher that records when each request is published (the instant the
/// pacer let it through), then publishes it.
/// A retry publisher that notes each event the breaker holds back (published with a
/// delay), for the demo's report.
pub struct Held<P> {
    pub inner: P,
    pub held: Arc<Mutex<Vec<(String, i64)>>>,
}

impl<P: RetryPublisher> RetryPublisher for Held<P> {
    async fn publish(&self, event: &RetryEvent, delay_seconds: u32) -> Result<(), PortError> {
        if delay_seconds > 0 {
            if let Ok(mut h) = self.held.lock() {
                h.push((event.transaction_id.to_string(), SystemClock.now().millis()));
            }
        }
        self.inner.publish(event, delay_seconds).await
    }
}

pub struct Timed<P> {
    pub inner: P,
    pub times: Arc<Mutex<Vec<i64>>>,
}

impl<P: RequestPublisher> RequestPublisher for Timed<P> {
    async fn publish(&self, request: &domain::Request) -> Result<(), PortError> {
        if let Ok(mut t) = self.times.lock() {
            t.push(SystemClock.now().millis());
        }
        self.inner.publish(request).await
    }
}
