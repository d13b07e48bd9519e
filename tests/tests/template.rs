//! `template.yaml` against the code: every function sets exactly the environment
//! variables its config struct reads (`aws::config::*Config::env_vars()`); tables (keys,
//! attributes, the reconcile index, stream view, TTL, billing) and queues (redrive,
//! maxReceiveCount, visibility, retention) are the definitions `testkit::provision`
//! creates; function timeouts are `aws::config::timeouts`, 6 × timeout within the
//! consumed queue's visibility timeout; no IAM action contains `*`; every DLQ alarms at
//! its first message, and business alarms read metrics the code emits (name, `Function`
//! dimension); build metadata, event sources, the scheduler role's trust policy; the
//! harness template against its code and the main exports, every `samconfig.toml`
//! environment, every output `retryctl verify` reads (`docs/deploy.md`). Each check
//! returns its problems; the `*_detects_*` tests break a copy of the template and
//! assert the check notices, so no check passes vacuously.

use aws::config::vars;
use aws::config::{
    timeouts, AuditWriterConfig, HttpBridgeConfig, PublisherConfig, ReconcilerConfig,
    ResponseHandlerConfig, RetryHandlerConfig, StackNames, StarterConfig,
};
use deferred_retry_tests::cfn::*;
use runtime::metrics::{names, DIMENSION};
use serde_yaml::{Mapping, Value};
use std::collections::{BTreeMap, BTreeSet};
use testkit::provision::{queue_definitions, table_definitions, QueueDef, TableDef};

/// SQS keeps messages 4 days unless told otherwise.
const SQS_DEFAULT_RETENTION_SECONDS: i64 = 345_600;

/// The functions of the stack: binary name → (environment variables read, timeout).
fn functions() -> BTreeMap<&'static str, (Vec<&'static str>, u32)> {
    BTreeMap::from([
        (
            "response-handler",
            (
                ResponseHandlerConfig::env_vars(),
                timeouts::RESPONSE_HANDLER_SECONDS,
            ),
        ),
        (
            "retry-handler",
            (
                RetryHandlerConfig::env_vars(),
                timeouts::RETRY_HANDLER_SECONDS,
            ),
        ),
        (
            "reconciler",
            (ReconcilerConfig::env_vars(), timeouts::RECONCILER_SECONDS),
        ),
        (
            "audit-writer",
            (
                AuditWriterConfig::env_vars(),
                timeouts::AUDIT_WRITER_SECONDS,
            ),
        ),
        (
            "starter",
            (StarterConfig::env_vars(), timeouts::STARTER_SECONDS),
        ),
        (
            "http-bridge",
            (HttpBridgeConfig::env_vars(), timeouts::HTTP_BRIDGE_SECONDS),
        ),
        (
            "publisher",
            (PublisherConfig::env_vars(), timeouts::PUBLISHER_SECONDS),
        ),
    ])
}

/// (binary, logical id, resource) of every function.
fn function_resources(t: &Value) -> Vec<(String, String, &Value)> {
    of_type(t, "AWS::Serverless::Function")
        .into_iter()
        .map(|(id, r)| {
            let bin = path(r, &["Metadata", "BuildProperties", "Binary"])
                .and_then(Value::as_str)
                .unwrap_or("<no Metadata.BuildProperties.Binary>")
                .to_owned();
            (bin, id, r)
        })
        .collect()
}

// ---------------------------------------------------------------------------------
// Checks: each returns the problems it found
// ---------------------------------------------------------------------------------

/// The keys of a mapping (none when it is absent).
fn keys_of(v: Option<&Value>) -> BTreeSet<String> {
    v.and_then(Value::as_mapping)
        .map(|m| {
            m.keys()
                .filter_map(|k| k.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The names of the environment variables a function sets.
fn env_names(function: &Value) -> BTreeSet<String> {
    keys_of(path(function, &["Properties", "Environment", "Variables"]))
}

/// Every function sets exactly the variables its config reads.
fn env_problems(t: &Value) -> Vec<String> {
    let mut problems = vec![];
    let expected = functions();
    let found = function_resources(t);
    let bins: BTreeSet<&str> = found.iter().map(|(b, _, _)| b.as_str()).collect();
    let wanted: BTreeSet<&str> = expected.keys().copied().collect();
    if bins != wanted {
        problems.push(format!("functions {bins:?}, expected {wanted:?}"));
    }
    for (bin, id, r) in &found {
        let Some((vars, _)) = expected.get(bin.as_str()) else {
            continue;
        };
        let set = env_names(r);
        let read: BTreeSet<String> = vars.iter().map(|s| (*s).to_owned()).collect();
        let missing: Vec<_> = read.difference(&set).collect();
        let unread: Vec<_> = set.difference(&read).collect();
        if !missing.is_empty() {
            problems.push(format!(
                "{id} ({bin}) does not set {missing:?}, which the code reads"
            ));
        }
        if !unread.is_empty() {
            problems.push(format!("{id} ({bin}) sets {unread:?}, which no code reads"));
        }
    }
    problems
}

/// (index name, key schema, projection type).
type IndexShape = (String, Vec<(String, String)>, String);

/// The (`first`, `second`) strings of each mapping in the sequence `v`.
fn pairs(v: Option<&Value>, first: &str, second: &str) -> Vec<(String, String)> {
    v.and_then(Value::as_sequence)
        .map(|s| {
            s.iter()
                .map(|k| {
                    let f = |n| get(k, n).and_then(Value::as_str).unwrap_or("").to_owned();
                    (f(first), f(second))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn key_schema(v: Option<&Value>) -> Vec<(String, String)> {
    pairs(v, "AttributeName", "KeyType")
}

fn expected_keys(hash: &str, range: Option<&str>) -> Vec<(String, String)> {
    let mut v = vec![(hash.to_owned(), "HASH".to_owned())];
    if let Some(r) = range {
        v.push((r.to_owned(), "RANGE".to_owned()));
    }
    v
}

fn table_problems_for(id: &str, r: &Value, def: &TableDef) -> Vec<String> {
    let mut p = vec![];
    let keys = key_schema(props(r, "KeySchema"));
    if keys != expected_keys(def.hash_key, def.range_key) {
        p.push(format!(
            "{id}: key schema {keys:?}, the code uses {}/{:?}",
            def.hash_key, def.range_key
        ));
    }
    let attrs: BTreeSet<(String, String)> = pairs(
        props(r, "AttributeDefinitions"),
        "AttributeName",
        "AttributeType",
    )
    .into_iter()
    .collect();
    let want: BTreeSet<(String, String)> = def
        .attributes
        .iter()
        .map(|(n, ty)| ((*n).to_owned(), (*ty).to_owned()))
        .collect();
    if attrs != want {
        p.push(format!(
            "{id}: attribute definitions {attrs:?}, the code uses {want:?}"
        ));
    }
    let gsis: Vec<IndexShape> = props(r, "GlobalSecondaryIndexes")
        .and_then(Value::as_sequence)
        .map(|s| {
            s.iter()
                .map(|g| {
                    (
                        get(g, "IndexName")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_owned(),
                        key_schema(get(g, "KeySchema")),
                        path(g, &["Projection", "ProjectionType"])
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let want_gsis: Vec<IndexShape> = def
        .indexes
        .iter()
        .map(|ix| {
            (
                ix.name.to_owned(),
                expected_keys(ix.hash_key, ix.range_key),
                ix.projection.to_owned(),
            )
        })
        .collect();
    if gsis != want_gsis {
        p.push(format!(
            "{id}: indexes {gsis:?}, the code queries {want_gsis:?}"
        ));
    }
    let stream = props(r, "StreamSpecification")
        .and_then(|s| get(s, "StreamViewType"))
        .and_then(Value::as_str);
    if stream != def.stream_view {
        p.push(format!(
            "{id}: stream {stream:?}, the code needs {:?}",
            def.stream_view
        ));
    }
    let ttl = props(r, "TimeToLiveSpecification").and_then(|s| {
        let enabled = get(s, "Enabled").and_then(Value::as_bool) == Some(true);
        enabled
            .then(|| get(s, "AttributeName").and_then(Value::as_str))
            .flatten()
    });
    if ttl != def.ttl_attribute {
        p.push(format!(
            "{id}: TTL {ttl:?}, the code writes {:?}",
            def.ttl_attribute
        ));
    }
    let billing = props(r, "BillingMode").and_then(Value::as_str);
    if billing != Some(def.billing_mode) {
        p.push(format!(
            "{id}: billing {billing:?}, expected {}",
            def.billing_mode
        ));
    }
    p
}

/// A definition `testkit::provision` creates, by the template's logical id.
trait Definition {
    const TYPE: &'static str;
    fn logical_id(&self) -> &'static str;
}

impl Definition for TableDef {
    const TYPE: &'static str = "AWS::DynamoDB::Table";
    fn logical_id(&self) -> &'static str {
        self.logical_id
    }
}

impl Definition for QueueDef {
    const TYPE: &'static str = "AWS::SQS::Queue";
    fn logical_id(&self) -> &'static str {
        self.logical_id
    }
}

/// The template's resources of `D`'s type are exactly the code's `defs`, by logical
/// id, and each is its definition (`check`).
fn definition_problems<D: Definition>(
    t: &Value,
    defs: &[D],
    check: impl Fn(&str, &Value, &D) -> Vec<String>,
) -> Vec<String> {
    let found = of_type(t, D::TYPE);
    let mut p = vec![];
    let ids: BTreeSet<&str> = found.iter().map(|(id, _)| id.as_str()).collect();
    let want: BTreeSet<&str> = defs.iter().map(D::logical_id).collect();
    if ids != want {
        p.push(format!("{} {ids:?}, the code provisions {want:?}", D::TYPE));
    }
    for def in defs {
        if let Some((id, r)) = found.iter().find(|(id, _)| id == def.logical_id()) {
            p.extend(check(id, r, def));
        }
    }
    p
}

/// Tables are the definitions the adapters provision (and query).
fn table_problems(t: &Value) -> Vec<String> {
    let defs = table_definitions(&StackNames::new("template-test"));
    definition_problems(t, &defs, table_problems_for)
}

fn queue_problems_for(t: &Value, id: &str, r: &Value, def: &QueueDef) -> Vec<String> {
    let mut p = vec![];
    let vis = props(r, "VisibilityTimeout");
    match def.visibility_timeout_seconds {
        Some(want) => {
            let got = vis.and_then(number);
            if got != Some(i64::from(want)) {
                p.push(format!(
                    "{id}: visibility timeout {got:?}, the code uses {want}"
                ));
            }
        }
        // Not consumed by a function of ours: its reader decides (a parameter), or
        // the SQS default.
        None => {
            if let Some(v) = vis {
                if ref_name(v).is_none() {
                    p.push(format!(
                        "{id}: visibility timeout {v:?} should be a parameter or unset"
                    ));
                }
            }
        }
    }
    let retention = props(r, "MessageRetentionPeriod")
        .and_then(|v| int_value(t, v))
        .unwrap_or(SQS_DEFAULT_RETENTION_SECONDS);
    let want = def
        .message_retention_seconds
        .map_or(SQS_DEFAULT_RETENTION_SECONDS, i64::from);
    if retention != want {
        p.push(format!(
            "{id}: retention {retention} s, the code uses {want} s"
        ));
    }
    let redrive = props(r, "RedrivePolicy");
    match (&def.redrive, redrive) {
        (None, None) => {}
        (None, Some(_)) => p.push(format!("{id}: has a redrive policy the code does not")),
        (Some(_), None) => p.push(format!("{id}: has no redrive policy")),
        (Some(want), Some(rp)) => {
            let dlq = get(rp, "deadLetterTargetArn").and_then(get_att);
            if dlq != Some((want.dlq_logical_id.to_owned(), "Arn".to_owned())) {
                p.push(format!(
                    "{id}: dead-letter target {dlq:?}, expected {}.Arn",
                    want.dlq_logical_id
                ));
            }
            let n = get(rp, "maxReceiveCount").and_then(number);
            if n != Some(i64::from(want.max_receive_count)) {
                p.push(format!(
                    "{id}: maxReceiveCount {n:?}, the code uses {}",
                    want.max_receive_count
                ));
            }
        }
    }
    p
}

/// Queues are the definitions the adapters provision.
fn queue_problems(t: &Value) -> Vec<String> {
    let mut defs = queue_definitions(&StackNames::new("template-test"));
    // Outbox mode's publisher reports a stream batch it gave up on there (the local
    // stack's stream reader retries in process and needs no such queue).
    defs.push(QueueDef {
        logical_id: "PublisherDLQ",
        name: "template-test-publisher-dlq".into(),
        visibility_timeout_seconds: None,
        message_retention_seconds: Some(testkit::provision::DLQ_RETENTION_SECONDS),
        redrive: None,
        fifo: false,
    });
    definition_problems(t, &defs, |id, r, def| queue_problems_for(t, id, r, def))
}

/// Timeouts are the code's, and 6 × timeout fits in the consumed queue's visibility.
fn timeout_problems(t: &Value) -> Vec<String> {
    let mut p = vec![];
    let expected = functions();
    let queues: BTreeMap<String, &Value> = of_type(t, "AWS::SQS::Queue").into_iter().collect();
    for (bin, id, r) in function_resources(t) {
        let timeout = props(r, "Timeout").and_then(|v| int_value(t, v));
        if let Some((_, want)) = expected.get(bin.as_str()) {
            if timeout != Some(i64::from(*want)) {
                p.push(format!(
                    "{id}: Timeout {timeout:?}, the code assumes {want}"
                ));
            }
        }
        let Some(timeout) = timeout else { continue };
        for (name, ev) in props(r, "Events")
            .and_then(Value::as_mapping)
            .into_iter()
            .flatten()
        {
            if get(ev, "Type").and_then(Value::as_str) != Some("SQS") {
                continue;
            }
            let q = path(ev, &["Properties", "Queue"]).and_then(target);
            let vis = q
                .as_deref()
                .and_then(|q| queues.get(q))
                .and_then(|qr| props(qr, "VisibilityTimeout"))
                .and_then(|v| int_value(t, v));
            let factor = i64::from(timeouts::VISIBILITY_FACTOR);
            match vis {
                Some(v) if v >= factor * timeout => {}
                _ => p.push(format!(
                    "{id} event {name:?}: queue {q:?} visibility {vis:?} < {factor} x timeout {timeout}"
                )),
            }
            // The batching window delays the invocation of already received messages.
            let window = path(ev, &["Properties", "MaximumBatchingWindowInSeconds"])
                .and_then(|v| int_max(t, v))
                .unwrap_or(0);
            if let Some(v) = vis {
                if window + 2 * timeout > v {
                    p.push(format!("{id} event {name:?}: batching window up to {window} s leaves no room in visibility {v}"));
                }
            }
        }
    }
    p
}

/// Every `Action`/`NotAction` string anywhere in the template (policies, trust
/// policies, key and queue policies, inside `!If` branches too).
fn actions(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Mapping(m) => {
            for (k, inner) in m {
                if matches!(k.as_str(), Some("Action" | "NotAction")) {
                    collect_strings(inner, out);
                }
                actions(inner, out);
            }
        }
        Value::Sequence(s) => s.iter().for_each(|x| actions(x, out)),
        Value::Tagged(tv) => actions(&tv.value, out),
        _ => {}
    }
}

fn collect_strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Sequence(s) => s.iter().for_each(|x| collect_strings(x, out)),
        Value::Tagged(tv) => collect_strings(&tv.value, out),
        Value::Mapping(m) => m.values().for_each(|x| collect_strings(x, out)),
        _ => {}
    }
}

fn wildcard_action_problems(t: &Value) -> Vec<String> {
    let mut all = vec![];
    actions(t, &mut all);
    let mut p: Vec<String> = all
        .iter()
        .filter(|a| a.contains('*'))
        .map(|a| format!("IAM action {a:?} has a wildcard"))
        .collect();
    if all.is_empty() {
        p.push("no IAM action found at all: the walker is broken".to_owned());
    }
    if has_key(t, "NotAction") {
        p.push("NotAction grants everything but a list: not allowed".to_owned());
    }
    p
}

fn has_key(v: &Value, key: &str) -> bool {
    match v {
        Value::Mapping(m) => m
            .iter()
            .any(|(k, inner)| k.as_str() == Some(key) || has_key(inner, key)),
        Value::Sequence(s) => s.iter().any(|x| has_key(x, key)),
        Value::Tagged(tv) => has_key(&tv.value, key),
        _ => false,
    }
}

/// The queue a stream event source reports a failing batch to.
fn on_failure_destination(event: &Value) -> Option<String> {
    path(
        event,
        &[
            "Properties",
            "DestinationConfig",
            "OnFailure",
            "Destination",
        ],
    )
    .and_then(target)
}

/// The DLQs: redrive targets, on-failure destinations and the scheduler's DLQ.
fn dead_letter_queues(t: &Value) -> BTreeSet<String> {
    let mut dlqs = BTreeSet::new();
    for (_, r) in of_type(t, "AWS::SQS::Queue") {
        if let Some(q) = props(r, "RedrivePolicy")
            .and_then(|rp| get(rp, "deadLetterTargetArn"))
            .and_then(target)
        {
            dlqs.insert(q);
        }
    }
    for (_, _, r) in function_resources(t) {
        for ev in props(r, "Events")
            .and_then(Value::as_mapping)
            .into_iter()
            .flat_map(Mapping::values)
        {
            if let Some(q) = on_failure_destination(ev) {
                dlqs.insert(q);
            }
        }
        if let Some(q) = path(
            r,
            &[
                "Properties",
                "Environment",
                "Variables",
                vars::SCHEDULER_DLQ_ARN.name,
            ],
        )
        .and_then(target)
        {
            dlqs.insert(q);
        }
    }
    dlqs
}

fn dlq_alarm_problems(t: &Value) -> Vec<String> {
    let dlqs = dead_letter_queues(t);
    let mut p = vec![];
    // request, response, retry, scheduler, audit stream, intake, publisher stream.
    if dlqs.len() != 7 {
        p.push(format!("expected 7 DLQs, found {dlqs:?}"));
    }
    let alarms = of_type(t, "AWS::CloudWatch::Alarm");
    for q in &dlqs {
        let ok = alarms.iter().any(|(_, a)| {
            let s = |k| props(a, k).and_then(Value::as_str);
            let dims = props(a, "Dimensions").and_then(Value::as_sequence);
            let on_queue = dims.is_some_and(|d| {
                d.iter().any(|dim| {
                    get(dim, "Name").and_then(Value::as_str) == Some("QueueName")
                        && get(dim, "Value").and_then(get_att)
                            == Some((q.clone(), "QueueName".to_owned()))
                })
            });
            on_queue
                && s("Namespace") == Some("AWS/SQS")
                && s("MetricName") == Some("ApproximateNumberOfMessagesVisible")
                && s("ComparisonOperator") == Some("GreaterThanThreshold")
                && props(a, "Threshold").and_then(number) == Some(0)
                && s("TreatMissingData") == Some("notBreaching")
                && props(a, "AlarmActions")
                    .and_then(Value::as_sequence)
                    .is_some_and(|v| !v.is_empty())
        });
        if !ok {
            p.push(format!("DLQ {q} has no alarm at its first message"));
        }
    }
    p
}

/// Build metadata, runtime, event sources and the alarms on the EMF metrics.
fn wiring_problems(t: &Value) -> Vec<String> {
    let mut p = vec![];
    for (bin, id, r) in function_resources(t) {
        let s = |keys: &[&str]| path(r, keys).and_then(Value::as_str);
        if s(&["Metadata", "BuildMethod"]) != Some("rust-cargolambda") {
            p.push(format!("{id}: BuildMethod is not rust-cargolambda"));
        }
        if s(&["Properties", "Runtime"]) != Some("provided.al2023") {
            p.push(format!("{id}: Runtime is not provided.al2023"));
        }
        if s(&["Properties", "Handler"]) != Some("bootstrap") {
            p.push(format!("{id}: Handler is not bootstrap"));
        }
        if s(&["Properties", "CodeUri"]) != Some(".") {
            p.push(format!("{id}: CodeUri is not the workspace root"));
        }
        let arch = props(r, "Architectures")
            .and_then(Value::as_sequence)
            .map(|a| a.iter().filter_map(ref_name).collect::<Vec<_>>());
        if arch != Some(vec!["Architecture".to_owned()]) {
            p.push(format!("{id}: Architectures is not [!Ref Architecture]"));
        }
        if s(&["Properties", "LoggingConfig", "LogFormat"]) != Some("JSON") {
            p.push(format!("{id}: LogFormat is not JSON"));
        }
        let events = props(r, "Events").and_then(Value::as_mapping);
        if events.is_none_or(Mapping::is_empty) {
            p.push(format!("{id} ({bin}): no event source"));
        }
        for (name, ev) in events.into_iter().flatten() {
            let ty = get(ev, "Type").and_then(Value::as_str).unwrap_or("");
            let ep = |k| path(ev, &["Properties", k]);
            if ty == "SQS" || ty == "DynamoDB" {
                if str_list(ep("FunctionResponseTypes")) != ["ReportBatchItemFailures"] {
                    p.push(format!("{id} {name:?}: no ReportBatchItemFailures"));
                }
                if ep("BatchSize").is_none() {
                    p.push(format!("{id} {name:?}: no BatchSize"));
                }
            }
            if ty == "SQS" {
                if ep("MaximumBatchingWindowInSeconds").is_none() {
                    p.push(format!("{id} {name:?}: no MaximumBatchingWindowInSeconds"));
                }
                if path(ev, &["Properties", "ScalingConfig", "MaximumConcurrency"]).is_none() {
                    p.push(format!(
                        "{id} {name:?}: no ScalingConfig.MaximumConcurrency"
                    ));
                }
            }
            if ty == "DynamoDB" {
                if ep("BisectBatchOnFunctionError").and_then(Value::as_bool) != Some(true) {
                    p.push(format!(
                        "{id} {name:?}: BisectBatchOnFunctionError is not on"
                    ));
                }
                if path(
                    ev,
                    &[
                        "Properties",
                        "DestinationConfig",
                        "OnFailure",
                        "Destination",
                    ],
                )
                .is_none()
                {
                    p.push(format!("{id} {name:?}: no on-failure destination"));
                }
            }
        }
    }
    p.extend(business_alarm_problems(t));
    p
}

/// A metric an alarm reads: (namespace, metric name, dimensions as name = value). A
/// `!Ref X` namespace or dimension value reads `!Ref X`.
type AlarmMetric = (String, String, Vec<(String, String)>);

fn literal_or_ref(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(other) => ref_name(other)
            .map(|r| format!("!Ref {r}"))
            .unwrap_or_else(|| format!("{other:?}")),
        None => String::new(),
    }
}

fn dimensions(v: Option<&Value>) -> Vec<(String, String)> {
    v.and_then(Value::as_sequence)
        .map(|d| {
            d.iter()
                .map(|x| {
                    (
                        literal_or_ref(get(x, "Name")),
                        literal_or_ref(get(x, "Value")),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Every metric an alarm reads: its own, or each `MetricStat` of a metric-math alarm
/// (whose one expression must be `SUM(METRICS())`: the alarm's value is their sum).
fn alarm_metrics(a: &Value) -> Result<Vec<AlarmMetric>, String> {
    if let Some(name) = props(a, "MetricName").and_then(Value::as_str) {
        return Ok(vec![(
            literal_or_ref(props(a, "Namespace")),
            name.to_owned(),
            dimensions(props(a, "Dimensions")),
        )]);
    }
    let Some(queries) = props(a, "Metrics").and_then(Value::as_sequence) else {
        return Err("neither MetricName nor Metrics".to_owned());
    };
    let mut out = vec![];
    for q in queries {
        if let Some(e) = get(q, "Expression").and_then(Value::as_str) {
            if e != "SUM(METRICS())" || get(q, "ReturnData").and_then(Value::as_bool) != Some(true)
            {
                return Err(format!(
                    "expression {e:?}: only a returned SUM(METRICS()) is read here"
                ));
            }
            continue;
        }
        let Some(m) = path(q, &["MetricStat", "Metric"]) else {
            return Err(format!("metric query {q:?} has no MetricStat"));
        };
        out.push((
            literal_or_ref(get(m, "Namespace")),
            literal_or_ref(get(m, "MetricName")),
            dimensions(get(m, "Dimensions")),
        ));
    }
    Ok(out)
}

/// The metrics the code emits that an alarm must page on: (metric, function).
fn alarmed_emitted_metrics() -> Vec<(&'static str, &'static str)> {
    let (response, retry, reconciler) = (
        response_handler::FUNCTION,
        retry_handler::FUNCTION,
        reconciler::FUNCTION,
    );
    vec![
        // audit-writer, on a transaction ended FAILED by cancellations.
        (audit_writer::TRANSACTIONS_EXHAUSTED, audit_writer::FUNCTION),
        // reconciler, per stuck retry cycle its index query returned.
        (names::RECONCILE_STUCK, reconciler),
        // reconciler, per index entry whose item would not decode.
        (names::RECONCILE_UNDECODABLE, reconciler),
        // reconciler, per record parked.
        (names::RECONCILE_PARKED, reconciler),
        // reconciler, per request unanswered past every republish.
        (names::TRANSACTIONS_UNANSWERED, reconciler),
        // response handler, per SUCCESS for an attempt answered CANCELLED or resolved.
        (names::CONFLICTING_SUCCESS, response),
        // response handler, per ERROR past the technical re-sends.
        (names::TECHNICAL_EXHAUSTED, response),
        // response handler, per REJECTED answer that ends a transaction.
        (names::TRANSACTIONS_REJECTED, response),
        // response handler, outbox mode, per ERROR that may have run.
        (names::TRANSACTIONS_AMBIGUOUS, response),
        // every function whose decisions meet a transaction past its deadline.
        (names::TRANSACTIONS_EXPIRED, response),
        (names::TRANSACTIONS_EXPIRED, retry),
        (names::TRANSACTIONS_EXPIRED, reconciler),
        // every function that creates schedules, per call refused for the account's
        // limits.
        (names::SCHEDULER_QUOTA_EXCEEDED, response),
        (names::SCHEDULER_QUOTA_EXCEEDED, retry),
        (names::SCHEDULER_QUOTA_EXCEEDED, reconciler),
        (names::SCHEDULER_THROTTLED, response),
        (names::SCHEDULER_THROTTLED, retry),
        (names::SCHEDULER_THROTTLED, reconciler),
        // the circuit breaker opened, on ERROR answers or on answer deadlines.
        (names::BREAKER_OPENED, response),
        (names::BREAKER_OPENED, reconciler),
        // the circuit breaker's table unreadable, by every function that asks or
        // feeds it.
        (names::BREAKER_ERRORS, response),
        (names::BREAKER_ERRORS, retry),
        (names::BREAKER_ERRORS, reconciler),
    ]
}

/// The business alarms read the EMF metrics the code emits: same name, namespace
/// parameter, and the `Function` dimension with the emitting function's name; a
/// metric-math alarm reads each of its metrics that way.
fn business_alarm_problems(t: &Value) -> Vec<String> {
    let mut p = vec![];
    let alarms = of_type(t, "AWS::CloudWatch::Alarm");
    for (metric, function) in alarmed_emitted_metrics() {
        let want = (
            "!Ref MetricsNamespace".to_owned(),
            metric.to_owned(),
            vec![(DIMENSION.to_owned(), function.to_owned())],
        );
        let ok = alarms.iter().any(|(_, a)| {
            alarm_metrics(a).is_ok_and(|ms| ms.contains(&want))
                && props(a, "ComparisonOperator").and_then(Value::as_str)
                    == Some("GreaterThanThreshold")
                && props(a, "Threshold").and_then(number) == Some(0)
                && props(a, "AlarmActions")
                    .and_then(Value::as_sequence)
                    .is_some_and(|v| !v.is_empty())
        });
        if !ok {
            p.push(format!(
                "no alarm on {metric} ({DIMENSION}={function}) in MetricsNamespace, > 0, with an action"
            ));
        }
    }
    for (id, a) in &alarms {
        if let Err(e) = alarm_metrics(a) {
            p.push(format!("{id}: {e}"));
        }
    }
    p
}

/// The operations dashboard: every metric of the functions it shows is one the code
/// names, under the function that emits it; every DLQ's depth and the answers'
/// CANCELLED share are on it.
fn dashboard_problems(t: &Value) -> Vec<String> {
    let mut p = vec![];
    let dashboards = of_type(t, "AWS::CloudWatch::Dashboard");
    let [(_, d)] = dashboards.as_slice() else {
        return vec![format!(
            "expected one dashboard, found {}",
            dashboards.len()
        )];
    };
    // `!Sub body` or `!Sub [body, variables]`.
    let sub = props(d, "DashboardBody")
        .and_then(intrinsic)
        .and_then(|(f, v)| (f == "Sub").then_some(v));
    let (body, variables) = match sub {
        Some(Value::Sequence(s)) if s.len() == 2 => (s[0].as_str(), s[1].as_mapping()),
        Some(v) => (v.as_str(), None),
        None => (None, None),
    };
    let Some(body) = body else {
        return vec!["DashboardBody is not a !Sub of a JSON string".to_owned()];
    };
    // A variable that names a queue only in one mode (`!If [C, !GetAtt Q.QueueName,
    // …]`) stands for Q.
    let variable_queue = |name: &str| -> Option<String> {
        let v = variables?.get(name)?;
        let (f, args) = intrinsic(v)?;
        let args = args.as_sequence().filter(|_| f == "If")?;
        get_att(args.get(1)?)
            .filter(|(_, attr)| attr == "QueueName")
            .map(|(q, _)| q)
    };
    let json: serde_json::Value = match serde_json::from_str(body) {
        Ok(v) => v,
        Err(e) => return vec![format!("DashboardBody is not JSON: {e}")],
    };
    let (response, retry, reconciler, audit) = (
        response_handler::FUNCTION,
        retry_handler::FUNCTION,
        reconciler::FUNCTION,
        audit_writer::FUNCTION,
    );
    let mut emitted: BTreeSet<(String, &str)> = [
        (names::RESPONSE_SUCCESS, response),
        (names::RESPONSE_CANCELLED, response),
        (names::SCHEDULES_CREATED, response),
        (names::SCHEDULE_CONFLICTS, response),
        (names::SCHEDULES_CREATED, reconciler),
        (names::SCHEDULE_CONFLICTS, reconciler),
        (names::REQUESTS_PUBLISHED, retry),
        (names::RETRIES_PUBLISHED, retry),
        (names::REQUESTS_REPUBLISHED, reconciler),
        (names::RETRY_EVENTS_PUBLISHED, reconciler),
        (audit_writer::TRANSACTIONS_EXHAUSTED, audit),
        (names::TRANSACTIONS_UNANSWERED, reconciler),
        (names::TRANSACTIONS_EXPIRED, response),
        (names::TRANSACTIONS_EXPIRED, retry),
        (names::TRANSACTIONS_EXPIRED, reconciler),
        (names::CONFLICTING_SUCCESS, response),
        (names::RECONCILE_PARKED, reconciler),
        (names::RECONCILE_EXAMINED, reconciler),
        (names::RECONCILE_UNDECODABLE, reconciler),
        (names::RECONCILE_ERRORS, reconciler),
        (names::SCHEDULER_THROTTLED, response),
        (names::SCHEDULER_QUOTA_EXCEEDED, response),
        (names::SCHEDULER_THROTTLED, retry),
        (names::SCHEDULER_QUOTA_EXCEEDED, retry),
        (names::SCHEDULER_THROTTLED, reconciler),
        (names::SCHEDULER_QUOTA_EXCEEDED, reconciler),
        (names::RECONCILE_STUCK, reconciler),
        (names::TECHNICAL_EXHAUSTED, response),
        (names::BREAKER_ERRORS, response),
        (names::BREAKER_ERRORS, retry),
        (names::BREAKER_ERRORS, reconciler),
        (names::TECHNICAL_FAILURES, response),
        (names::BREAKER_STATE, response),
        (names::BREAKER_STATE, retry),
        (names::BREAKER_STATE, reconciler),
        (names::BREAKER_OPENED, response),
        (names::BREAKER_OPENED, reconciler),
        (names::RETRIES_PAUSED_BY_BREAKER, retry),
    ]
    .into_iter()
    .map(|(m, f)| (m.to_owned(), f))
    .collect();
    for &status in domain::machine::Status::ALL {
        emitted.insert((audit_writer::entered(status), audit));
    }
    let mut queues_shown = BTreeSet::new();
    let mut metric_names = BTreeSet::new();
    let widgets = json["widgets"].as_array().cloned().unwrap_or_default();
    for w in &widgets {
        for m in w["properties"]["metrics"].as_array().into_iter().flatten() {
            let parts: Vec<&str> = m
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(serde_json::Value::as_str)
                .collect();
            match parts.as_slice() {
                ["${MetricsNamespace}", name, dim, function, ..] => {
                    metric_names.insert(name.to_string());
                    if *dim != DIMENSION || !emitted.contains(&(name.to_string(), *function)) {
                        p.push(format!(
                            "dashboard metric {name} ({dim}={function}) is not emitted"
                        ));
                    }
                }
                ["AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", q, ..] => {
                    let named = q.trim_start_matches("${").trim_end_matches('}');
                    queues_shown.insert(match named.strip_suffix(".QueueName") {
                        Some(queue) => queue.to_owned(),
                        None => variable_queue(named).unwrap_or_else(|| named.to_owned()),
                    });
                }
                ["AWS/SQS", ..] => {}
                [] => {} // an expression
                other => p.push(format!(
                    "dashboard metric {other:?} in an unknown namespace"
                )),
            }
        }
    }
    for q in dead_letter_queues(t) {
        if !queues_shown.contains(&q) {
            p.push(format!("the dashboard does not show the depth of DLQ {q}"));
        }
    }
    for needed in [
        names::RESPONSE_CANCELLED,
        names::RESPONSE_SUCCESS,
        names::BREAKER_ERRORS,
        names::TECHNICAL_EXHAUSTED,
        names::TRANSACTIONS_UNANSWERED,
        audit_writer::TRANSACTIONS_EXHAUSTED,
    ] {
        if !metric_names.contains(needed) {
            p.push(format!("the dashboard does not show {needed}"));
        }
    }
    p
}

/// The scheduler role: trusted by the scheduler only, for this account and group.
fn scheduler_role_problems(t: &Value) -> Vec<String> {
    let mut p = vec![];
    let Some((_, role)) = resources(t)
        .into_iter()
        .find(|(id, _)| id == "SchedulerRole")
    else {
        return vec!["no SchedulerRole".to_owned()];
    };
    let statements = path(
        role,
        &["Properties", "AssumeRolePolicyDocument", "Statement"],
    )
    .and_then(Value::as_sequence)
    .cloned()
    .unwrap_or_default();
    if statements.len() != 1 {
        p.push(format!(
            "SchedulerRole trust has {} statements, expected 1",
            statements.len()
        ));
    }
    for st in &statements {
        if str_list(path(st, &["Principal", "Service"])) != ["scheduler.amazonaws.com"] {
            p.push(
                "SchedulerRole is trusted by someone else than scheduler.amazonaws.com".to_owned(),
            );
        }
        if path(st, &["Condition", "StringEquals", "aws:SourceAccount"]).is_none() {
            p.push("SchedulerRole trust has no aws:SourceAccount condition".to_owned());
        }
        let arns = path(st, &["Condition", "ArnLike", "aws:SourceArn"])
            .or_else(|| path(st, &["Condition", "ArnEquals", "aws:SourceArn"]));
        let mentions_group = arns.is_some_and(|v| {
            let text = serde_yaml::to_string(v).unwrap_or_default();
            text.contains("ScheduleGroup")
        });
        if !mentions_group {
            p.push("SchedulerRole trust has no aws:SourceArn on the schedule group".to_owned());
        }
    }
    // Its permissions: sqs:SendMessage (and KMS), nothing else.
    let mut acts = vec![];
    actions(props(role, "Policies").unwrap_or(&Value::Null), &mut acts);
    let extra: Vec<_> = acts
        .iter()
        .filter(|a| {
            !matches!(
                a.as_str(),
                "sqs:SendMessage" | "kms:GenerateDataKey" | "kms:Decrypt"
            )
        })
        .collect();
    if !extra.is_empty() || !acts.iter().any(|a| a == "sqs:SendMessage") {
        p.push(format!(
            "SchedulerRole may do {acts:?}; only sqs:SendMessage (+ KMS) is allowed"
        ));
    }
    p
}

/// The export names a template's outputs publish, as `${AWS::StackName}-<suffix>`
/// suffixes; the import names a template uses, as `${MainStackName}-<suffix>` suffixes.
fn export_suffixes(t: &Value) -> BTreeSet<String> {
    path(t, &["Outputs"])
        .and_then(Value::as_mapping)
        .into_iter()
        .flat_map(|m| m.values())
        .filter_map(|o| path(o, &["Export", "Name"]))
        .filter_map(intrinsic)
        .filter_map(|(_, v)| {
            v.as_str()?
                .strip_prefix("${AWS::StackName}-")
                .map(str::to_owned)
        })
        .collect()
}

fn import_suffixes(v: &Value, out: &mut BTreeSet<String>) {
    if let Some(("ImportValue", inner)) = intrinsic(v).as_ref().map(|(f, x)| (f.as_str(), *x)) {
        let name = intrinsic(inner)
            .and_then(|(_, s)| s.as_str().map(str::to_owned))
            .unwrap_or_default();
        out.insert(
            name.strip_prefix("${MainStackName}-")
                .map_or(format!("<not ${{MainStackName}}-…: {name}>"), str::to_owned),
        );
        return;
    }
    match v {
        Value::Mapping(m) => m.values().for_each(|x| import_suffixes(x, out)),
        Value::Sequence(s) => s.iter().for_each(|x| import_suffixes(x, out)),
        Value::Tagged(t) => import_suffixes(&t.value, out),
        _ => {}
    }
}

/// `infra/template.yaml` (the staging harness) against its code and the main template:
/// one function, `harness`, setting exactly what `HarnessConfig` reads; its table is
/// the definition the code writes; 6 × its timeout fits the request queue's default
/// visibility; every import is an export of the main template; its role has the fixed
/// name the main stack's ServicePrincipalArns can list in advance.
fn harness_problems(main: &Value, h: &Value) -> Vec<String> {
    let mut p = vec![];
    let functions = function_resources(h);
    let [(bin, id, f)] = functions.as_slice() else {
        return vec![format!(
            "{} functions in the harness template, expected 1",
            functions.len()
        )];
    };
    if bin != harness::service::FUNCTION {
        p.push(format!(
            "{id}: binary {bin}, the code is {}",
            harness::service::FUNCTION
        ));
    }
    let set = env_names(f);
    let read: BTreeSet<String> = harness::HarnessConfig::ENV_VARS
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    if set != read {
        p.push(format!("{id} sets {set:?}, the code reads {read:?}"));
    }
    let def = testkit::provision::harness_table_definition("harness-test");
    match of_type(h, "AWS::DynamoDB::Table").as_slice() {
        [(tid, r)] if tid == def.logical_id => p.extend(table_problems_for(tid, r, &def)),
        other => p.push(format!(
            "harness tables {:?}, expected {}",
            other.iter().map(|(id, _)| id).collect::<Vec<_>>(),
            def.logical_id
        )),
    }
    let timeout = props(f, "Timeout").and_then(number).unwrap_or(0);
    let visibility = path(
        main,
        &["Parameters", "RequestQueueVisibilityTimeout", "Default"],
    )
    .and_then(number)
    .unwrap_or(0);
    if 6 * timeout > visibility {
        p.push(format!(
            "{id}: 6 x timeout {timeout} s exceeds the request queue's default visibility {visibility} s"
        ));
    }
    let exports = export_suffixes(main);
    let mut imports = BTreeSet::new();
    import_suffixes(h, &mut imports);
    if imports.is_empty() {
        p.push("the harness imports nothing from the main stack".to_owned());
    }
    for i in imports.difference(&exports) {
        p.push(format!(
            "the harness imports {i}, which the main template does not export"
        ));
    }
    let role_name = of_type(h, "AWS::IAM::Role")
        .first()
        .and_then(|(_, r)| props(r, "RoleName"))
        .and_then(intrinsic)
        .and_then(|(_, v)| v.as_str().map(str::to_owned));
    if role_name.as_deref() != Some("${MainStackName}-harness") {
        p.push(format!(
            "the harness role is named {role_name:?}, not ${{MainStackName}}-harness (ServicePrincipalArns lists it by that name)"
        ));
    }
    p
}

/// The HTTP bridge's VPC settings exist only when subnets are given: its `VpcConfig`
/// is `!If [HasHttpBridgeVpc, {SubnetIds, SecurityGroupIds}, AWS::NoValue]`, and that
/// condition needs the bridge and `HttpBridgeSubnetIds`.
fn bridge_vpc_problems(t: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let vpc = path(
        t,
        &["Resources", "HttpBridgeFunction", "Properties", "VpcConfig"],
    );
    match vpc.and_then(intrinsic) {
        Some((f, inner)) if f == "If" => {
            let s = inner.as_sequence().cloned().unwrap_or_default();
            if s.first().and_then(Value::as_str) != Some("HasHttpBridgeVpc") {
                out.push(format!("VpcConfig's condition is {:?}", s.first()));
            }
            let given = s.get(1);
            for (key, param) in [
                ("SubnetIds", "HttpBridgeSubnetIds"),
                ("SecurityGroupIds", "HttpBridgeSecurityGroupIds"),
            ] {
                if given
                    .and_then(|g| get(g, key))
                    .and_then(ref_name)
                    .as_deref()
                    != Some(param)
                {
                    out.push(format!("VpcConfig.{key} is not Ref {param}"));
                }
            }
            if s.get(2).and_then(ref_name).as_deref() != Some("AWS::NoValue") {
                out.push("VpcConfig without subnets is not AWS::NoValue".into());
            }
        }
        _ => out.push("HttpBridgeFunction's VpcConfig is not conditional".into()),
    }
    let condition = format!("{:?}", path(t, &["Conditions", "HasHttpBridgeVpc"]));
    for needed in ["HasHttpBridge", "HttpBridgeSubnetIds"] {
        if !condition.contains(needed) {
            out.push(format!(
                "HasHttpBridgeVpc does not read {needed}: {condition}"
            ));
        }
    }
    out
}

/// Asserts some problem of `problems` names each of `texts`.
fn mentions(problems: &[String], texts: &[&str]) {
    for text in texts {
        assert!(
            problems.iter().any(|m| m.contains(text)),
            "no problem names {text:?}: {problems:?}"
        );
    }
}

/// Asserts some problem of `problems` is one `is` recognises.
fn some_problem(problems: &[String], is: impl Fn(&str) -> bool) {
    assert!(problems.iter().any(|m| is(m)), "{problems:?}");
}

fn assert_none(problems: Vec<String>) {
    assert!(
        problems.is_empty(),
        "template.yaml:\n  {}",
        problems.join("\n  ")
    );
}

// ---------------------------------------------------------------------------------
// The template as it is
// ---------------------------------------------------------------------------------

/// `HttpOperatorCases` offers exactly the values the bridge accepts, defaults to the
/// bridge's own default (today's behaviour: the DLQ) and reaches its variable.
#[test]
fn the_operator_cases_parameter_is_what_the_bridge_reads() {
    use http_bridge::classify::OperatorCases;
    use vars::HTTP_OPERATOR_CASES;
    let t = template();
    let param = |key| path(&t, &["Parameters", "HttpOperatorCases", key]);
    let allowed: Vec<&str> = param("AllowedValues")
        .and_then(Value::as_sequence)
        .map(|v| v.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    assert_eq!(allowed, OperatorCases::NAMES);
    assert!(allowed.iter().all(|v| OperatorCases::parse(v).is_some()));
    assert_eq!(
        param("Default").and_then(Value::as_str),
        HTTP_OPERATOR_CASES.default
    );
    assert_eq!(
        HTTP_OPERATOR_CASES.default.and_then(OperatorCases::parse),
        Some(OperatorCases::DeadLetter)
    );
    let var = path(
        &t,
        &[
            "Resources",
            "HttpBridgeFunction",
            "Properties",
            "Environment",
            "Variables",
            HTTP_OPERATOR_CASES.name,
        ],
    );
    assert_eq!(var.and_then(ref_name).as_deref(), Some("HttpOperatorCases"));
}

#[test]
fn the_http_bridge_is_in_a_vpc_only_when_given_subnets() {
    let t = template();
    assert_none(bridge_vpc_problems(&t));
    let mut always = t.clone();
    props_mut(&mut always, "HttpBridgeFunction").insert(
        "VpcConfig".into(),
        path(
            &t,
            &["Resources", "HttpBridgeFunction", "Properties", "VpcConfig"],
        )
        .and_then(intrinsic)
        .and_then(|(_, inner)| inner.as_sequence().and_then(|s| s.get(1)).cloned())
        .unwrap(),
    );
    assert_eq!(
        bridge_vpc_problems(&always),
        vec!["HttpBridgeFunction's VpcConfig is not conditional".to_owned()]
    );
}

/// Each check on the template as it is: no problem.
macro_rules! the_template_passes {
    ($($test:ident: $problems:expr;)*) => {
        $(
            #[test]
            fn $test() {
                assert_none($problems);
            }
        )*
    };
}

the_template_passes! {
    environment_variables_are_exactly_what_the_code_reads: env_problems(&template());
    tables_are_the_code_definitions: table_problems(&template());
    queues_are_the_code_definitions: queue_problems(&template());
    timeouts_fit_the_visibility_of_the_consumed_queues: timeout_problems(&template());
    no_wildcard_iam_action: wildcard_action_problems(&template());
    every_dlq_has_an_alarm_at_its_first_message: dlq_alarm_problems(&template());
    functions_events_and_business_alarms_are_wired: wiring_problems(&template());
    the_scheduler_role_is_scoped: scheduler_role_problems(&template());
    the_harness_template_matches_its_code_and_the_main_exports:
        harness_problems(&template(), &harness_template());
    the_dashboard_shows_emitted_metrics_and_every_dlq: dashboard_problems(&template());
}

// ---------------------------------------------------------------------------------
// The checks notice a broken template
// ---------------------------------------------------------------------------------

fn resource_mut<'a>(t: &'a mut Value, id: &str) -> &'a mut Value {
    t.get_mut("Resources")
        .and_then(|r| r.get_mut(id))
        .unwrap_or_else(|| panic!("no resource {id}"))
}

/// `check` on the template as it is (no problem), then what it finds in the template
/// `edit` breaks.
fn broken(check: fn(&Value) -> Vec<String>, edit: impl FnOnce(&mut Value)) -> Vec<String> {
    assert_none(check(&template()));
    let mut t = template();
    edit(&mut t);
    check(&t)
}

fn props_mut<'a>(t: &'a mut Value, id: &str) -> &'a mut Mapping {
    resource_mut(t, id)
        .get_mut("Properties")
        .and_then(Value::as_mapping_mut)
        .unwrap_or_else(|| panic!("{id} has no Properties"))
}

fn prop_mut<'a>(t: &'a mut Value, id: &str, key: &str) -> &'a mut Value {
    props_mut(t, id)
        .get_mut(key)
        .unwrap_or_else(|| panic!("{id} has no {key}"))
}

fn env_mut<'a>(t: &'a mut Value, id: &str) -> &'a mut Mapping {
    props_mut(t, id)
        .get_mut("Environment")
        .and_then(|e| e.get_mut("Variables"))
        .and_then(Value::as_mapping_mut)
        .unwrap_or_else(|| panic!("{id} has no environment"))
}

#[test]
fn env_check_detects_a_missing_and_an_unread_variable() {
    let mut t = template();
    env_mut(&mut t, "RetryHandlerFunction").remove(vars::MAX_REQUESTS_PER_SECOND.name);
    let p = env_problems(&t);
    some_problem(&p, |m| m.contains(vars::MAX_REQUESTS_PER_SECOND.name));

    let mut t = template();
    env_mut(&mut t, "AuditWriterFunction").insert("DEBUG_MODE".into(), "1".into());
    let p = env_problems(&t);
    some_problem(&p, |m| {
        m.contains("DEBUG_MODE") && m.contains("no code reads")
    });
}

#[test]
fn table_check_detects_a_changed_index_and_ttl() {
    let mut t = template();
    let gsi = prop_mut(&mut t, "TransactionsTable", "GlobalSecondaryIndexes")
        .get_mut(0)
        .and_then(|g| g.get_mut("Projection"))
        .and_then(Value::as_mapping_mut)
        .expect("the reconcile index has a projection");
    gsi.insert("ProjectionType".into(), "ALL".into());
    mentions(&table_problems(&t), &["TransactionsTable: indexes"]);

    let mut t = template();
    props_mut(&mut t, "AuditTable").remove("TimeToLiveSpecification");
    mentions(&table_problems(&t), &["AuditTable: TTL"]);
}

#[test]
fn queue_and_timeout_checks_detect_a_short_visibility() {
    let mut t = template();
    props_mut(&mut t, "RetryQueue").insert("VisibilityTimeout".into(), 300.into());
    assert!(!queue_problems(&t).is_empty());
    mentions(&timeout_problems(&t), &["RetryHandlerFunction"]);

    let mut t = template();
    let rp = prop_mut(&mut t, "ResponseQueue", "RedrivePolicy")
        .as_mapping_mut()
        .expect("the response queue has a redrive policy");
    rp.insert("maxReceiveCount".into(), 1.into());
    mentions(&queue_problems(&t), &["maxReceiveCount"]);
}

#[test]
fn wildcard_check_detects_service_star_inside_a_condition() {
    let mut t = template();
    let text = serde_yaml::to_string(&t).expect("serializes");
    assert!(text.contains("dynamodb:UpdateItem"));
    // Replace one action deep inside the audit writer's policy.
    fn replace(v: &mut Value) -> bool {
        match v {
            Value::String(s) if s == "dynamodb:UpdateItem" => {
                *s = "dynamodb:*".to_owned();
                true
            }
            Value::Mapping(m) => m.values_mut().any(replace),
            Value::Sequence(s) => s.iter_mut().any(replace),
            Value::Tagged(tv) => replace(&mut tv.value),
            _ => false,
        }
    }
    assert!(replace(resource_mut(&mut t, "AuditWriterRole")));
    mentions(&wildcard_action_problems(&t), &["dynamodb:*"]);
}

#[test]
fn dashboard_check_detects_a_metric_nobody_emits_and_a_missing_dlq() {
    let mut t = template();
    let d = resource_mut(&mut t, "OperationsDashboard");
    let body = serde_yaml::to_string(&*d).unwrap();
    let broken = body
        .replace("\"EnteredSending\"", "\"EnteredLimbo\"")
        .replace("${AuditDLQ.QueueName}", "${AuditQueue.QueueName}")
        .replace("PublisherDLQ.QueueName", "RequestDLQ.QueueName");
    *d = serde_yaml::from_str(&broken).unwrap();
    let p = dashboard_problems(&t);
    assert_eq!(
        p,
        vec![
            "dashboard metric EnteredLimbo (Function=audit-writer) is not emitted".to_owned(),
            "the dashboard does not show the depth of DLQ AuditDLQ".to_owned(),
            "the dashboard does not show the depth of DLQ PublisherDLQ".to_owned(),
        ]
    );
}

#[test]
fn dlq_alarm_check_detects_a_missing_alarm() {
    let mut t = template();
    let res = t
        .get_mut("Resources")
        .and_then(Value::as_mapping_mut)
        .expect("resources");
    // Remove whichever alarm watches the scheduler DLQ.
    let id = res
        .iter()
        .find(|(_, r)| {
            serde_yaml::to_string(r)
                .unwrap_or_default()
                .contains("SchedulerDLQ.QueueName")
        })
        .and_then(|(k, _)| k.as_str().map(str::to_owned))
        .expect("an alarm on the scheduler DLQ");
    res.remove(id.as_str());
    let p = dlq_alarm_problems(&t);
    assert_eq!(
        p,
        vec!["DLQ SchedulerDLQ has no alarm at its first message".to_owned()]
    );
}

#[test]
fn wiring_and_role_checks_detect_regressions() {
    let mut t = template();
    let ev = prop_mut(&mut t, "ResponseHandlerFunction", "Events")
        .as_mapping_mut()
        .and_then(|e| e.values_mut().next())
        .and_then(|e| e.get_mut("Properties"))
        .and_then(Value::as_mapping_mut)
        .expect("the response handler has an SQS event");
    ev.remove("FunctionResponseTypes");
    mentions(&wiring_problems(&t), &["ReportBatchItemFailures"]);

    let mut t = template();
    let st = prop_mut(&mut t, "SchedulerRole", "AssumeRolePolicyDocument")
        .get_mut("Statement")
        .and_then(|s| s.get_mut(0))
        .and_then(Value::as_mapping_mut)
        .expect("one trust statement");
    st.remove("Condition");
    mentions(
        &scheduler_role_problems(&t),
        &["aws:SourceAccount", "aws:SourceArn"],
    );
}

#[test]
fn business_alarm_check_detects_a_metric_the_code_does_not_emit() {
    let mut t = template();
    props_mut(&mut t, "StuckTransactionsAlarm")
        .insert("MetricName".into(), "ReconcilerActions".into());
    let p = business_alarm_problems(&t);
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(p[0].contains("ReconcileStuck"), "{p:?}");

    let mut t = template();
    props_mut(&mut t, "TransactionsExhaustedAlarm").remove("Dimensions");
    mentions(&business_alarm_problems(&t), &["TransactionsExhausted"]);

    // A metric-math alarm that leaves one function out.
    let mut t = template();
    let metrics = prop_mut(&mut t, "SchedulerThrottledAlarm", "Metrics")
        .as_sequence_mut()
        .expect("Metrics");
    metrics.retain(|q| get(q, "Id").and_then(Value::as_str) != Some("retryhandler"));
    assert_eq!(
        business_alarm_problems(&t),
        vec!["no alarm on SchedulerThrottled (Function=retry-handler) in MetricsNamespace, > 0, with an action"]
    );
    // An expression that is not the sum of its metrics is refused, not guessed.
    let mut t = template();
    let metrics = prop_mut(&mut t, "BreakerErrorsAlarm", "Metrics")
        .as_sequence_mut()
        .expect("Metrics");
    metrics[0]["Expression"] = Value::from("MAX(METRICS())");
    let p = business_alarm_problems(&t);
    some_problem(&p, |m| m.starts_with("BreakerErrorsAlarm: expression"));
}

// ---------------------------------------------------------------------------------
// Least-privilege and delivery hardening (what a real account enforces)
// ---------------------------------------------------------------------------------

/// Lambda's application log-level filtering for runtimes without a built-in logger
/// (https://docs.aws.amazon.com/lambda/latest/dg/monitoring-cloudwatchlogs-log-level.html):
/// a JSON line's `level` decides, an invalid or missing one counts as INFO, and a line
/// is kept when its level is at or above the function's `ApplicationLogLevel`.
fn lambda_keeps(line: &str, application_log_level: &str) -> bool {
    const ORDER: [&str; 6] = ["TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL"];
    let rank = |l: &str| ORDER.iter().position(|x| x.eq_ignore_ascii_case(l));
    let level = serde_json::from_str::<serde_json::Value>(line)
        .ok()
        .and_then(|v| v.get("level").and_then(|l| l.as_str()).map(str::to_owned))
        .and_then(|l| rank(&l))
        .unwrap_or(2);
    rank(application_log_level).is_some_and(|setting| level >= setting)
}

/// The EMF line a function writes is kept at every log level the template allows.
fn log_level_problems(t: &Value) -> Vec<String> {
    let m = runtime::Metrics::new("DeferredRetry", "reconciler");
    m.incr(names::RECONCILE_EXAMINED);
    let line = m.to_emf(0).to_string();
    let allowed = str_list(path(
        t,
        &["Parameters", "ApplicationLogLevel", "AllowedValues"],
    ));
    if allowed.is_empty() {
        return vec!["ApplicationLogLevel has no AllowedValues".to_owned()];
    }
    allowed
        .iter()
        .filter(|level| !lambda_keeps(&line, level))
        .map(|level| format!("at ApplicationLogLevel={level} Lambda drops the EMF metric lines"))
        .collect()
}

/// Every function has an alarm on its `Errors`; every SQS-triggered one on its
/// `Throttles` (AWS/Lambda, `FunctionName` = the function, > 0, with an action).
fn function_alarm_problems(t: &Value) -> Vec<String> {
    let alarms = of_type(t, "AWS::CloudWatch::Alarm");
    let watched = |metric: &str, id: &str| {
        alarms.iter().any(|(_, a)| {
            props(a, "Namespace").and_then(Value::as_str) == Some("AWS/Lambda")
                && props(a, "MetricName").and_then(Value::as_str) == Some(metric)
                && props(a, "Dimensions")
                    .and_then(Value::as_sequence)
                    .is_some_and(|d| {
                        d.iter().any(|x| {
                            get(x, "Name").and_then(Value::as_str) == Some("FunctionName")
                                && get(x, "Value").and_then(ref_name).as_deref() == Some(id)
                        })
                    })
                && props(a, "Threshold").and_then(number) == Some(0)
                && props(a, "ComparisonOperator").and_then(Value::as_str)
                    == Some("GreaterThanThreshold")
                && props(a, "AlarmActions")
                    .and_then(Value::as_sequence)
                    .is_some_and(|v| !v.is_empty())
        })
    };
    let mut p = vec![];
    for (bin, id, r) in function_resources(t) {
        if !watched("Errors", &id) {
            p.push(format!("{id} ({bin}): no alarm on its Errors"));
        }
        let triggered_by = |kind: &str| {
            props(r, "Events")
                .and_then(Value::as_mapping)
                .is_some_and(|m| {
                    m.values()
                        .any(|e| get(e, "Type").and_then(Value::as_str) == Some(kind))
                })
        };
        for (kind, trigger) in [("SQS", "SQS"), ("DynamoDB", "stream")] {
            if triggered_by(kind) && !watched("Throttles", &id) {
                p.push(format!(
                    "{id} ({bin}): {trigger}-triggered, no alarm on its Throttles"
                ));
            }
        }
        // The stream keeps records 24 h: its age must page well before (ms).
        let behind = alarms.iter().any(|(_, a)| {
            props(a, "Namespace").and_then(Value::as_str) == Some("AWS/Lambda")
                && props(a, "MetricName").and_then(Value::as_str) == Some("IteratorAge")
                && dimensions(props(a, "Dimensions"))
                    == vec![("FunctionName".to_owned(), format!("!Ref {id}"))]
                && props(a, "Threshold")
                    .and_then(number)
                    .is_some_and(|ms| ms > 0 && ms <= 12 * 3_600_000)
                && props(a, "AlarmActions")
                    .and_then(Value::as_sequence)
                    .is_some_and(|v| !v.is_empty())
        });
        if triggered_by("DynamoDB") && !behind {
            p.push(format!(
                "{id} ({bin}): stream-triggered, no alarm on its IteratorAge within 12 h of the stream's 24 h"
            ));
        }
    }
    p.sort();
    p
}

/// Main queues: `RedriveAllowPolicy` denyAll; each DLQ: byQueue naming exactly its
/// source queue (by the source's `QueueName`); a DLQ nothing redrives into: denyAll.
fn redrive_allow_problems(t: &Value) -> Vec<String> {
    let mut p = vec![];
    let queues = of_type(t, "AWS::SQS::Queue");
    let mut sources: BTreeMap<String, String> = BTreeMap::new();
    for (id, q) in &queues {
        if let Some(dlq) =
            path(q, &["Properties", "RedrivePolicy", "deadLetterTargetArn"]).and_then(target)
        {
            sources.insert(dlq, id.clone());
        }
    }
    // The `!Sub` texts of a value: itself, or each branch of an `!If` (a name that
    // changes with the delivery mode), in order.
    fn sub_texts(v: Option<&Value>) -> Vec<String> {
        match v.and_then(intrinsic) {
            Some((f, inner)) if f == "Sub" => {
                inner.as_str().map(str::to_owned).into_iter().collect()
            }
            Some((f, inner)) if f == "If" => inner
                .as_sequence()
                .map(|b| b.iter().skip(1).flat_map(|x| sub_texts(Some(x))).collect())
                .unwrap_or_default(),
            _ => vec![],
        }
    }
    for (id, q) in &queues {
        let allow = path(q, &["Properties", "RedriveAllowPolicy"]);
        let permission = allow
            .and_then(|a| get(a, "redrivePermission"))
            .and_then(Value::as_str);
        match sources.get(id) {
            Some(source) => {
                let source_names = queues
                    .iter()
                    .find(|(s, _)| s == source)
                    .map(|(_, s)| sub_texts(path(s, &["Properties", "QueueName"])))
                    .unwrap_or_default();
                let listed = allow
                    .and_then(|a| get(a, "sourceQueueArns"))
                    .and_then(Value::as_sequence)
                    .cloned()
                    .unwrap_or_default();
                let named = listed
                    .first()
                    .map(|v| sub_texts(Some(v)))
                    .unwrap_or_default();
                let ok = permission == Some("byQueue")
                    && listed.len() == 1
                    && !named.is_empty()
                    && named.len() == source_names.len()
                    && named
                        .iter()
                        .zip(&source_names)
                        .all(|(arn, n)| arn.ends_with(&format!(":{n}")));
                if !ok {
                    p.push(format!(
                        "{id}: RedriveAllowPolicy must be byQueue naming only {source} (by its QueueName)"
                    ));
                }
            }
            None if permission != Some("denyAll") => {
                p.push(format!(
                    "{id}: RedriveAllowPolicy must be denyAll (no queue dead-letters into it)"
                ));
            }
            None => {}
        }
    }
    p
}

/// A `Deny` of requests with `aws:SecureTransport = false` in `statements`.
fn denies_plain_http(statements: Option<&Value>) -> bool {
    statements.and_then(Value::as_sequence).is_some_and(|sts| {
        sts.iter().any(|st| {
            get(st, "Effect").and_then(Value::as_str) == Some("Deny")
                && path(st, &["Condition", "Bool", "aws:SecureTransport"])
                    .is_some_and(|v| v.as_str() == Some("false") || v.as_bool() == Some(false))
        })
    })
}

/// Every queue is covered by a queue policy denying plain HTTP; the alarm topic has a
/// topic policy with the same deny and CloudWatch allowed for this account only.
fn transport_problems(t: &Value) -> Vec<String> {
    let mut p = vec![];
    let policies = of_type(t, "AWS::SQS::QueuePolicy");
    for (id, q) in of_type(t, "AWS::SQS::Queue") {
        // A policy under a condition covers only a queue under the same one.
        let covered = policies.iter().any(|(_, pol)| {
            (get(pol, "Condition").is_none() || get(pol, "Condition") == get(q, "Condition"))
                && props(pol, "Queues")
                    .and_then(Value::as_sequence)
                    .is_some_and(|qs| {
                        qs.iter()
                            .any(|q| ref_name(q).as_deref() == Some(id.as_str()))
                    })
                && denies_plain_http(path(pol, &["Properties", "PolicyDocument", "Statement"]))
        });
        if !covered {
            p.push(format!("{id}: no queue policy denies requests without TLS"));
        }
    }
    let topics = of_type(t, "AWS::SNS::TopicPolicy");
    let ok = topics.iter().any(|(_, pol)| {
        let sts = path(pol, &["Properties", "PolicyDocument", "Statement"]);
        let cloudwatch = sts.and_then(Value::as_sequence).is_some_and(|sts| {
            sts.iter().any(|st| {
                str_list(path(st, &["Principal", "Service"])) == ["cloudwatch.amazonaws.com"]
                    && path(st, &["Condition", "StringEquals", "aws:SourceAccount"]).is_some()
            })
        });
        props(pol, "Topics")
            .and_then(Value::as_sequence)
            .is_some_and(|ts| {
                ts.iter()
                    .any(|x| ref_name(x).as_deref() == Some("AlarmTopic"))
            })
            && denies_plain_http(sts)
            && cloudwatch
    });
    if !ok {
        p.push("AlarmTopic: no topic policy with a TLS deny and CloudWatch allowed with aws:SourceAccount".to_owned());
    }
    p
}

/// The key policy: the account-wide statement administers only; every statement
/// letting principals of the account use the key is scoped by `kms:ViaService`;
/// CloudWatch's is scoped by `aws:SourceAccount` and `aws:SourceArn`.
fn key_policy_problems(t: &Value) -> Vec<String> {
    const USE: [&str; 7] = [
        "kms:Decrypt",
        "kms:Encrypt",
        "kms:GenerateDataKey",
        "kms:GenerateDataKeyWithoutPlaintext",
        "kms:ReEncryptFrom",
        "kms:ReEncryptTo",
        "kms:CreateGrant",
    ];
    let mut p = vec![];
    let Some((_, key)) = of_type(t, "AWS::KMS::Key").into_iter().next() else {
        return vec!["no KMS key".to_owned()];
    };
    let sts = path(key, &["Properties", "KeyPolicy", "Statement"])
        .and_then(Value::as_sequence)
        .cloned()
        .unwrap_or_default();
    for st in sts.iter().map(|s| match intrinsic(s) {
        Some((f, inner)) if f == "If" => inner
            .as_sequence()
            .and_then(|b| b.get(1))
            .cloned()
            .unwrap_or(Value::Null),
        _ => s.clone(),
    }) {
        let sid = get(&st, "Sid")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_owned();
        let mut acts = vec![];
        actions(&st, &mut acts);
        let uses: Vec<&String> = acts.iter().filter(|a| USE.contains(&a.as_str())).collect();
        let service = str_list(path(&st, &["Principal", "Service"]));
        if service.iter().any(|s| s == "cloudwatch.amazonaws.com")
            && (path(&st, &["Condition", "StringEquals", "aws:SourceAccount"]).is_none()
                || path(&st, &["Condition", "ArnLike", "aws:SourceArn"]).is_none())
        {
            p.push(format!(
                "key policy {sid}: CloudWatch without aws:SourceAccount and aws:SourceArn"
            ));
        }
        // Neither SQS nor DynamoDB asks for kms:Encrypt on a caller's behalf.
        if path(&st, &["Principal", "AWS"]).is_some() && acts.iter().any(|a| a == "kms:Encrypt") {
            p.push(format!(
                "key policy {sid}: lets principals kms:Encrypt, which no service of the stack uses for them"
            ));
        }
        if path(&st, &["Principal", "AWS"]).is_some()
            && !uses.is_empty()
            && path(&st, &["Condition", "StringEquals", "kms:ViaService"]).is_none()
        {
            p.push(format!(
                "key policy {sid}: lets principals use the key ({uses:?}) without kms:ViaService"
            ));
        }
    }
    p
}

/// `samconfig.toml`, in every environment (`[<env>.…]` sections: `default`, `staging`,
/// `prod`, each read on its own by `--config-env`): the architecture where both `sam
/// build` and `sam deploy` read it (the environment's global section), and the beta
/// features rust-cargolambda needs on older CLIs.
fn samconfig_problems(text: &str) -> Vec<String> {
    // The lines of a section: from its header line to the next header.
    let section = |name: &str| {
        let header = format!("[{name}]");
        let mut lines = text.lines().skip_while(|l| l.trim() != header);
        lines.next()?;
        Some(
            lines
                .take_while(|l| !l.trim_start().starts_with('['))
                .collect::<Vec<_>>()
                .join("\n"),
        )
    };
    let envs: BTreeSet<&str> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix('['))
        .filter_map(|l| l.strip_suffix(".global.parameters]"))
        .collect();
    let mut p = vec![];
    if !envs.contains("default") {
        p.push("no [default.global.parameters]".to_owned());
    }
    for env in envs {
        let global = section(&format!("{env}.global.parameters")).unwrap_or_default();
        let line = |key: &str| {
            global
                .lines()
                .map(|l| l.split('#').next().unwrap_or_default().trim())
                .find_map(|l| {
                    l.strip_prefix(key)
                        .map(|v| v.trim_start().trim_start_matches('=').trim().to_owned())
                })
        };
        if !line("parameter_overrides").is_some_and(|v| v.contains("Architecture=")) {
            p.push(format!(
                "[{env}.global.parameters] sets no Architecture in parameter_overrides"
            ));
        }
        if line("beta_features").as_deref() != Some("true") {
            p.push(format!(
                "[{env}.global.parameters] has no beta_features = true"
            ));
        }
        for command in ["build", "deploy"] {
            let name = format!("{env}.{command}.parameters");
            let overrides = section(&name).is_some_and(|own| {
                own.lines()
                    .any(|l| l.trim_start().starts_with("parameter_overrides"))
            });
            if overrides {
                p.push(format!(
                    "[{name}] overrides parameters on its own: build and deploy could disagree"
                ));
            }
        }
    }
    p
}

// Parameter defaults
// ---------------------------------------------------------------------------------

/// Parameters whose default is not the code's (`domain::defaults::TEMPLATE_PARAMETERS`).
fn default_problems(t: &Value) -> Vec<String> {
    use domain::defaults::{ParameterDefault, TEMPLATE_PARAMETERS};
    let mut p = Vec::new();
    for (name, code) in TEMPLATE_PARAMETERS {
        let default = path(t, &["Parameters", name, "Default"]);
        let same = match (code, default) {
            (ParameterDefault::Number(n), Some(v)) => {
                v.as_f64().or_else(|| v.as_str()?.parse().ok()) == Some(n)
            }
            (ParameterDefault::Text(s), Some(v)) => v.as_str() == Some(s),
            (_, None) => false,
        };
        if !same {
            p.push(format!(
                "parameter {name}: default {default:?}, the code's {code:?}"
            ));
        }
    }
    p
}

/// `Rules`: a batch size above 10 with no batching window is refused for both SQS
/// event sources.
fn rules_problems(t: &Value) -> Vec<String> {
    let rules =
        serde_yaml::to_string(path(t, &["Rules"]).unwrap_or(&Value::Null)).unwrap_or_default();
    [
        ("ResponseBatchSize", "ResponseBatchingWindowSeconds"),
        ("RetryBatchSize", "RetryBatchingWindowSeconds"),
    ]
    .iter()
    .filter(|(size, window)| {
        let ok = path(t, &["Rules"])
            .and_then(Value::as_mapping)
            .is_some_and(|m| {
                m.values().any(|r| {
                    let cond =
                        serde_yaml::to_string(get(r, "RuleCondition").unwrap_or(&Value::Null))
                            .unwrap_or_default();
                    let asserts =
                        serde_yaml::to_string(get(r, "Assertions").unwrap_or(&Value::Null))
                            .unwrap_or_default();
                    cond.contains(size) && cond.contains("'10'") && asserts.contains(window)
                })
            });
        !ok || rules.is_empty()
    })
    .map(|(size, window)| format!("no rule refusing {size} > 10 without {window}"))
    .collect()
}

fn samconfig_text() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../samconfig.toml"))
        .unwrap_or_default()
}

fn harness_samconfig_text() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../infra/samconfig.toml"
    ))
    .unwrap_or_default()
}

#[test]
fn metric_lines_survive_every_allowed_log_level() {
    assert_none(log_level_problems(&template()));
    // The filter itself, on Lambda's documented cases.
    assert!(lambda_keeps(r#"{"level":"debug","msg":"x"}"#, "DEBUG"));
    assert!(!lambda_keeps(r#"{"level":"debug","msg":"x"}"#, "INFO"));
    assert!(lambda_keeps(r#"{"msg":"no level"}"#, "INFO"));
    assert!(!lambda_keeps(r#"{"msg":"no level"}"#, "WARN"));
    assert!(!lambda_keeps(r#"{"level":"bogus"}"#, "ERROR"));
}

#[test]
fn log_level_check_detects_a_level_above_info() {
    let mut t = template();
    let allowed = t
        .get_mut("Parameters")
        .and_then(|p| p.get_mut("ApplicationLogLevel"))
        .and_then(|p| p.get_mut("AllowedValues"))
        .and_then(Value::as_sequence_mut)
        .expect("AllowedValues");
    allowed.push("WARN".into());
    assert_eq!(
        log_level_problems(&t),
        vec!["at ApplicationLogLevel=WARN Lambda drops the EMF metric lines"]
    );
}

#[test]
fn every_function_has_error_and_throttle_alarms() {
    let p = broken(function_alarm_problems, |t| {
        props_mut(t, "ReconcilerErrorsAlarm").insert("MetricName".into(), "Invocations".into());
        props_mut(t, "RetryHandlerThrottlesAlarm").insert("Threshold".into(), 5.into());
        props_mut(t, "AuditWriterIteratorAgeAlarm").insert("Threshold".into(), 86_400_000.into());
        props_mut(t, "AuditWriterThrottlesAlarm").insert("MetricName".into(), "Duration".into());
    });
    assert_eq!(
        p,
        vec![
            "AuditWriterFunction (audit-writer): stream-triggered, no alarm on its IteratorAge within 12 h of the stream's 24 h",
            "AuditWriterFunction (audit-writer): stream-triggered, no alarm on its Throttles",
            "ReconcilerFunction (reconciler): no alarm on its Errors",
            "RetryHandlerFunction (retry-handler): SQS-triggered, no alarm on its Throttles"
        ]
    );
}

#[test]
fn queues_allow_redrive_only_from_their_source() {
    let p = broken(redrive_allow_problems, |t| {
        props_mut(t, "RetryQueue").remove("RedriveAllowPolicy");
        props_mut(t, "ResponseDLQ").insert(
            "RedriveAllowPolicy".into(),
            serde_yaml::from_str("{redrivePermission: allowAll}").expect("yaml"),
        );
    });
    assert_eq!(p.len(), 2, "{p:?}");
    assert!(
        p.iter().any(|m| m.starts_with("RetryQueue:"))
            && p.iter().any(|m| m.starts_with("ResponseDLQ:")),
        "{p:?}"
    );
}

#[test]
fn queues_and_the_alarm_topic_refuse_plain_http() {
    let p = broken(transport_problems, |t| {
        let resources = t
            .get_mut("Resources")
            .and_then(Value::as_mapping_mut)
            .expect("resources");
        resources.remove("DeadLetterQueuesPolicy");
        resources.remove("AlarmTopicPolicy");
    });
    assert_eq!(p.len(), 7, "six DLQs and the topic: {p:?}");
}

#[test]
fn the_key_policy_scopes_every_use() {
    assert_none(key_policy_problems(&template()));
    let text = std::fs::read_to_string(TEMPLATE_PATH).expect("template");
    let broken = text.replacen(
        "              - kms:DeleteAlias\n",
        "              - kms:DeleteAlias\n              - kms:Decrypt\n",
        1,
    );
    let t: Value = serde_yaml::from_str(&broken).expect("yaml");
    let p = key_policy_problems(&t);
    some_problem(&p, |m| {
        m.contains("AccountAdministersTheKey") && m.contains("kms:Decrypt")
    });
    let broken = text.replacen(
        "              - kms:Decrypt\n              - kms:GenerateDataKey\n              - kms:DescribeKey\n",
        "              - kms:Decrypt\n              - kms:Encrypt\n              - kms:GenerateDataKey\n              - kms:DescribeKey\n",
        1,
    );
    assert_ne!(broken, text, "the statement this test changes has changed");
    let p = key_policy_problems(&serde_yaml::from_str(&broken).expect("yaml"));
    some_problem(&p, |m| {
        m.contains("AllowSqsAndDynamoDbOnBehalfOfThisAccount") && m.contains("kms:Encrypt")
    });
    let broken = text.replace("                aws:SourceAccount: !Ref AWS::AccountId\n              ArnLike:\n                aws:SourceArn: !Sub \"arn:${AWS::Partition}:cloudwatch", "                aws:SourceAccount: !Ref AWS::AccountId\n              ArnNotLike:\n                aws:SourceArn: !Sub \"arn:${AWS::Partition}:cloudwatch");
    mentions(
        &key_policy_problems(&serde_yaml::from_str(&broken).expect("yaml")),
        &["CloudWatch"],
    );
}

#[test]
fn samconfig_builds_and_deploys_one_architecture() {
    assert_none(samconfig_problems(&samconfig_text()));
    assert_none(samconfig_problems(&harness_samconfig_text()));
    let broken = samconfig_text().replace("parameter_overrides = \"Architecture=arm64\"", "");
    assert_eq!(samconfig_problems(&broken).len(), 1);
    let broken = samconfig_text()
        .replace("beta_features = true", "")
        .replace(
            "[default.deploy.parameters]\n",
            "[default.deploy.parameters]\nparameter_overrides = \"Architecture=x86_64\"\n",
        );
    assert_eq!(
        samconfig_problems(&broken).len(),
        4,
        "beta_features missing in three environments, one override: {:?}",
        samconfig_problems(&broken)
    );
    let broken = samconfig_text().replace(
        "[staging.build.parameters]\n",
        "[staging.build.parameters]\nparameter_overrides = \"Architecture=x86_64\"\n",
    );
    assert_eq!(
        samconfig_problems(&broken),
        vec!["[staging.build.parameters] overrides parameters on its own: build and deploy could disagree"]
    );
}

#[test]
fn rules_refuse_large_batches_without_a_window() {
    let p = broken(rules_problems, |t| {
        t.as_mapping_mut().expect("template").remove("Rules");
    });
    assert_eq!(p.len(), 2);
}

#[test]
fn harness_check_detects_a_missing_export_a_variable_and_a_renamed_role() {
    let main = template();
    let mut broken_main = main.clone();
    if let Some(o) = broken_main
        .get_mut("Outputs")
        .and_then(|o| o.get_mut("RequestDLQUrl"))
        .and_then(Value::as_mapping_mut)
    {
        o.remove("Export");
    }
    assert_eq!(
        harness_problems(&broken_main, &harness_template()),
        vec!["the harness imports RequestDLQUrl, which the main template does not export"]
    );
    let mut h = harness_template();
    env_mut(&mut h, "HarnessFunction").remove("HARNESS_SEED");
    props_mut(&mut h, "HarnessRole").insert("RoleName".into(), "fixed".into());
    let p = harness_problems(&main, &h);
    assert_eq!(p.len(), 2, "{p:?}");
    assert!(p[0].starts_with("HarnessFunction sets"), "{p:?}");
    assert!(p[1].contains("not ${MainStackName}-harness"), "{p:?}");
}

/// Every output `retryctl verify` reads is declared: the main stack's in
/// `template.yaml`, the harness's in `infra/template.yaml`.
#[test]
fn the_outputs_verify_reads_are_declared() {
    let declared = |t: &Value| keys_of(path(t, &["Outputs"]));
    let (main, h) = (declared(&template()), declared(&harness_template()));
    let missing: Vec<&str> = retryctl::verify::outputs::MAIN_OUTPUTS
        .iter()
        .filter(|k| !main.contains(**k))
        .chain(
            retryctl::verify::outputs::HARNESS_OUTPUTS
                .iter()
                .filter(|k| !h.contains(**k)),
        )
        .copied()
        .collect();
    assert!(
        missing.is_empty(),
        "outputs verify reads but no template declares: {missing:?}"
    );
}

/// The placeholders `retryctl verify` looks for in deployed parameters are the ones
/// the template's AllowedPatterns refuse: every documentation account in the
/// principal lists' pattern, every documentation domain in AlarmEmail's.
#[test]
fn verify_looks_for_the_placeholders_the_template_refuses() {
    let t = template();
    let pattern = |name: &str| {
        path(&t, &["Parameters", name, "AllowedPattern"])
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("{name} has no AllowedPattern"))
            .to_owned()
    };
    let accounts = pattern("ServicePrincipalArns");
    for a in retryctl::verify::placeholders::ACCOUNTS {
        assert!(accounts.contains(a), "{a} not in {accounts}");
    }
    let email = pattern("AlarmEmail");
    for d in retryctl::verify::placeholders::DOMAINS {
        let (name, tld) = d.split_once('.').unwrap_or_default();
        assert!(
            email.contains(&format!("{name}\\.")) && email.contains(tld),
            "{d} not in {email}"
        );
    }
}

/// Every output and parameter `retryctl --stack` reads is declared in
/// `template.yaml`.
#[test]
fn the_outputs_and_parameters_stack_reads_are_declared() {
    let t = template();
    let (outputs, parameters) = (
        keys_of(path(&t, &["Outputs"])),
        keys_of(path(&t, &["Parameters"])),
    );
    let missing: Vec<String> = retryctl::stack::FILLED
        .iter()
        .filter_map(|(flag, source)| match source {
            retryctl::stack::Source::Output(k) if !outputs.contains(*k) => {
                Some(format!("{flag}: output {k}"))
            }
            retryctl::stack::Source::Parameter(k) if !parameters.contains(*k) => {
                Some(format!("{flag}: parameter {k}"))
            }
            _ => None,
        })
        .collect();
    assert!(
        missing.is_empty(),
        "settings --stack reads but template.yaml does not declare: {missing:?}"
    );
}

#[test]
fn parameter_defaults_are_the_code_defaults() {
    let p = broken(default_problems, |t| {
        t["Parameters"]["MaxRequestsPerSecond"]["Default"] = Value::from(10);
    });
    assert!(
        p.len() == 1 && p[0].contains("MaxRequestsPerSecond"),
        "{p:?}"
    );
}

// ---------------------------------------------------------------------------------
// Placeholders cannot deploy
// ---------------------------------------------------------------------------------

/// The parameters a documentation placeholder could be left in, and the list ones
/// among them (CloudFormation checks a list's AllowedPattern on each value).
const GUARDED: [(&str, bool); 4] = [
    ("AlarmEmail", false),
    ("OperatorPrincipalArns", true),
    ("ExternalServicePrincipalArns", true),
    ("ServicePrincipalArns", true),
];

/// Each guarded parameter has an AllowedPattern; the three principal lists share one.
fn placeholder_pattern_problems(t: &Value) -> Vec<String> {
    let mut p = vec![];
    let mut list_patterns = BTreeSet::new();
    for (name, list) in GUARDED {
        let pattern = path(t, &["Parameters", name, "AllowedPattern"]).and_then(Value::as_str);
        let Some(pattern) = pattern else {
            p.push(format!("parameter {name} has no AllowedPattern"));
            continue;
        };
        if list {
            list_patterns.insert(pattern.to_owned());
        }
        if path(t, &["Parameters", name, "ConstraintDescription"]).is_none() {
            p.push(format!("parameter {name} has no ConstraintDescription"));
        }
    }
    if list_patterns.len() > 1 {
        p.push(format!(
            "the principal lists differ in their AllowedPattern: {list_patterns:?}"
        ));
    }
    p
}

/// `scripts/check-samconfig.py` (what `scripts/check-template.sh` runs) on a
/// samconfig text against `template.yaml`: whether it passed, and what it printed.
fn samconfig_check(samconfig: &str) -> (bool, String) {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let venv = format!("{root}/.venv/bin/python3");
    let python = if std::path::Path::new(&venv).exists() {
        venv
    } else {
        "python3".to_owned()
    };
    let file = std::env::temp_dir().join(format!(
        "samconfig-check-{}-{}.toml",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default()
    ));
    std::fs::write(&file, samconfig).unwrap_or_else(|e| panic!("writing {}: {e}", file.display()));
    let out = std::process::Command::new(&python)
        .arg(format!("{root}/scripts/check-samconfig.py"))
        .arg(&file)
        .arg(TEMPLATE_PATH)
        .output()
        .unwrap_or_else(|e| {
            panic!("{python} scripts/check-samconfig.py: {e} (. scripts/tools.sh)")
        });
    let _ = std::fs::remove_file(&file);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !text.contains("ModuleNotFoundError"),
        "the check needs SAM CLI's parser (. scripts/tools.sh): {text}"
    );
    (out.status.success(), text)
}

#[test]
fn placeholders_are_refused_by_the_template() {
    assert_none(placeholder_pattern_problems(&template()));
    let operators_pattern = path(
        &template(),
        &["Parameters", "OperatorPrincipalArns", "AllowedPattern"],
    )
    .and_then(Value::as_str)
    .unwrap_or_default()
    .to_owned();
    let mut t = template();
    t["Parameters"]["ServicePrincipalArns"]["AllowedPattern"] = Value::from("^.*$");
    t["Parameters"]["AlarmEmail"]
        .as_mapping_mut()
        .expect("AlarmEmail")
        .remove("AllowedPattern");
    assert_eq!(
        placeholder_pattern_problems(&t),
        vec![
            "parameter AlarmEmail has no AllowedPattern".to_owned(),
            format!(
                "the principal lists differ in their AllowedPattern: {:?}",
                BTreeSet::from(["^.*$".to_owned(), operators_pattern])
            ),
        ]
    );
}

/// The offline check fails on production's placeholders as shipped before they were
/// marked a template (`[prod]` with `oncall@example.com` and account 111122223333),
/// passes once they are replaced, and passes on the shipped file, whose production
/// values are the `prod-template` environment.
#[test]
fn the_samconfig_check_fails_on_placeholders_and_passes_on_real_values() {
    let shipped = samconfig_text();
    assert!(
        shipped.contains("[prod-template.global.parameters]")
            && shipped.contains("AlarmEmail=oncall@example.com")
            && shipped
                .contains("ServicePrincipalArns=arn:aws:iam::111122223333:role/external-service"),
        "the shipped production template has changed"
    );
    let (ok, text) = samconfig_check(&shipped);
    assert!(ok, "{text}");
    assert!(
        text.contains("[prod-template]") && text.contains("placeholder"),
        "{text}"
    );

    // As shipped before: an environment named prod, not a template.
    let prod = shipped.replace("[prod-template.", "[prod.");
    let (ok, text) = samconfig_check(&prod);
    assert!(!ok, "{text}");
    assert!(
        text.contains("[prod]: AlarmEmail=oncall@example.com"),
        "{text}"
    );
    assert!(
        text.contains(
            "[prod]: ServicePrincipalArns=arn:aws:iam::111122223333:role/external-service"
        ),
        "{text}"
    );
    // A placeholder among real values of a list is found too (each value is checked).
    let mixed = prod.replace(
        "ServicePrincipalArns=arn:aws:iam::111122223333:role/external-service",
        "ServicePrincipalArns=arn:aws:iam::210987654321:role/payments,arn:aws:iam::123456789012:role/example",
    );
    let (ok, text) = samconfig_check(&mixed);
    assert!(!ok, "{text}");
    assert!(
        text.contains("arn:aws:iam::123456789012:role/example"),
        "{text}"
    );
    assert!(!text.contains("role/payments:"), "{text}");

    // The placeholders replaced: it passes.
    let real = prod
        .replace(
            "AlarmEmail=oncall@example.com",
            "AlarmEmail=oncall@payments.acme.io",
        )
        .replace(
            "ServicePrincipalArns=arn:aws:iam::111122223333:role/external-service",
            "ServicePrincipalArns=arn:aws:iam::210987654321:role/payments",
        );
    let (ok, text) = samconfig_check(&real);
    assert!(ok, "{text}");
    assert!(!text.contains("placeholder"), "{text}");
}

// ---------------------------------------------------------------------------------
// One page per failure, each with its runbook
// ---------------------------------------------------------------------------------

const DEPLOY_DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/deploy.md");

/// The anchors of a Markdown page as GitHub makes them: each heading lower-cased,
/// stripped of everything but letters, digits, `-`, `_` and spaces, spaces made `-`
/// (a repeated heading gets `-1`, `-2`…); and every `<a id="…">` / `<a name="…">`.
fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let trimmed = line.trim_start_matches('#');
        if trimmed.len() < line.len() && trimmed.starts_with(' ') {
            let slug: String = trimmed
                .trim()
                .to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
                .map(|c| if c == ' ' { '-' } else { c })
                .collect();
            let n = seen.entry(slug.clone()).or_insert(0);
            out.insert(if *n == 0 {
                slug.clone()
            } else {
                format!("{slug}-{n}")
            });
            *n += 1;
        }
        for attr in ["<a id=\"", "<a name=\""] {
            for part in line.split(attr).skip(1) {
                if let Some(id) = part.split('"').next() {
                    out.insert(id.to_owned());
                }
            }
        }
    }
    out
}

/// Every alarm's description names its runbook section, `docs/deploy.md#<anchor>`,
/// and that section exists.
fn runbook_problems(t: &Value, markdown: &str) -> Vec<String> {
    let sections = anchors(markdown);
    let mut p = vec![];
    for (id, a) in of_type(t, "AWS::CloudWatch::Alarm") {
        let text = props(a, "AlarmDescription")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let anchor: Option<String> = text.split("docs/deploy.md#").nth(1).map(|rest| {
            rest.chars()
                .take_while(|c| c.is_alphanumeric() || matches!(c, '-' | '_'))
                .collect()
        });
        match anchor {
            None => p.push(format!(
                "{id}: its description names no runbook (docs/deploy.md#…)"
            )),
            Some(a) if !sections.contains(&a) => p.push(format!(
                "{id}: its runbook docs/deploy.md#{a} is not a section of docs/deploy.md"
            )),
            Some(_) => {}
        }
    }
    p
}

#[test]
fn every_alarm_names_its_runbook_and_the_section_exists() {
    let doc = std::fs::read_to_string(DEPLOY_DOC).expect("docs/deploy.md");
    assert_none(runbook_problems(&template(), &doc));
    assert!(
        anchors("## Alarms: what they mean\n### `RequestDLQAlarm`\n### Same\n### Same\n")
            .is_superset(&BTreeSet::from([
                "alarms-what-they-mean".to_owned(),
                "requestdlqalarm".to_owned(),
                "same".to_owned(),
                "same-1".to_owned(),
            ]))
    );
    // A description without its runbook, and a runbook whose section is gone.
    let mut t = template();
    props_mut(&mut t, "RequestDLQAlarm").insert("AlarmDescription".into(), "A DLQ.".into());
    let without = doc.replace("### `RetryDLQAlarm`", "### The retry DLQ");
    assert_ne!(without, doc, "the section this test removes has changed");
    assert_eq!(
        runbook_problems(&t, &without),
        vec![
            "RequestDLQAlarm: its description names no runbook (docs/deploy.md#…)",
            "RetryDLQAlarm: its runbook docs/deploy.md#retrydlqalarm is not a section of docs/deploy.md"
        ]
    );
}

/// The alarms on the functions' own metrics (namespace `MetricsNamespace`) that a set
/// of emitted counts raises, each with its value: the sum of the metrics it reads, over
/// its threshold.
fn raised(t: &Value, emitted: &BTreeMap<(String, String), u64>) -> Vec<(String, u64)> {
    let mut out = vec![];
    for (id, a) in of_type(t, "AWS::CloudWatch::Alarm") {
        let Ok(metrics) = alarm_metrics(a) else {
            continue;
        };
        let value: u64 = metrics
            .iter()
            .filter(|(ns, _, _)| ns == "!Ref MetricsNamespace")
            .map(|(_, name, dims)| match dims.as_slice() {
                [(d, function)] if d == DIMENSION => emitted
                    .get(&(name.clone(), function.clone()))
                    .copied()
                    .unwrap_or(0),
                _ => 0,
            })
            .sum();
        let threshold = props(a, "Threshold").and_then(number).unwrap_or(i64::MAX);
        if i64::try_from(value).unwrap_or(i64::MAX) > threshold {
            out.push((id, value));
        }
    }
    out
}

/// The counts each function emitted, as (metric, function) → count.
fn emitted(metrics: &[&runtime::Metrics]) -> BTreeMap<(String, String), u64> {
    let mut out = BTreeMap::new();
    for m in metrics {
        for (name, n) in m.snapshot() {
            *out.entry((name, m.function().to_owned())).or_insert(0) += n;
        }
    }
    out
}

/// The in-memory stack a transaction runs through: the handlers' and the reconciler's
/// real cores on memory ports, each function counting into its own metrics, and the
/// audit writer counting every entry of the audit trail.
struct Stage {
    store: testkit::memory::MemoryStore,
    scheduler: testkit::memory::MemoryScheduler,
    requests: testkit::memory::MemoryQueue<domain::Request>,
    retries: testkit::memory::MemoryQueue<domain::RetryEvent>,
    settings: runtime::settings::Settings,
    response: runtime::Metrics,
    reconciler: runtime::Metrics,
    audit: runtime::Metrics,
}

/// 2026-10-03T12:00:00Z
const T0: domain::Timestamp = domain::Timestamp::from_millis(1_791_028_800_000);
const TX: &str = "TX-ALARM-1";

impl Stage {
    fn new(settings: runtime::settings::Settings) -> Self {
        Self {
            store: testkit::memory::MemoryStore::new(),
            scheduler: testkit::memory::MemoryScheduler::new(),
            requests: testkit::memory::MemoryQueue::new(),
            retries: testkit::memory::MemoryQueue::new(),
            settings,
            response: runtime::Metrics::new("DeferredRetry", response_handler::FUNCTION),
            reconciler: runtime::Metrics::new("DeferredRetry", reconciler::FUNCTION),
            audit: audit_writer::metrics("DeferredRetry"),
        }
    }

    fn id() -> domain::TransactionId {
        domain::TransactionId::parse(TX).unwrap_or_else(|e| panic!("{TX}: {e}"))
    }

    fn record(&self) -> domain::TransactionRecord {
        self.store
            .record(&Self::id())
            .unwrap_or_else(|| panic!("no record of {TX}"))
    }

    async fn start(&self, max_attempts: u32) {
        let ports = domain::exec::StartPorts {
            store: &self.store,
            requests: &self.requests,
        };
        runtime::ops::start_transaction(
            &ports,
            Self::id(),
            domain::Payload::from_json(r#"{"order":1}"#).unwrap_or_else(|e| panic!("payload: {e}")),
            domain::MaxAttempts::new(max_attempts)
                .unwrap_or_else(|e| panic!("max_attempts {max_attempts}: {e}")),
            self.settings.answer_timeout,
            &self.settings.context(T0),
        )
        .await
        .unwrap_or_else(|e| panic!("starting {TX}: {e:?}"));
    }

    async fn respond(&self, attempt: u32, outcome: domain::Outcome, at: domain::Timestamp) {
        let response = domain::Response {
            transaction_id: Self::id(),
            attempt: domain::Attempt::new(attempt)
                .unwrap_or_else(|e| panic!("attempt {attempt}: {e}")),
            outcome,
            reason: Some("NOT_AVAILABLE".into()),
            retry_after_seconds: None,
            round: None,
            execution: None,
        };
        let mut rng = domain::policy::FixedRandom(0.5);
        response_handler::handle(
            &domain::exec::ResponsePorts {
                store: &self.store,
                scheduler: &self.scheduler,
                retries: &self.retries,
                notes: &self.store,
            },
            &response,
            &self.settings.context(at),
            &mut rng,
            &mut |_| true,
            &self.response,
        )
        .await;
    }

    async fn reconcile(&self, at: domain::Timestamp) {
        reconciler::run_once(
            &domain::exec::ReconcilePorts {
                store: &self.store,
                scheduler: &self.scheduler,
                retries: &self.retries,
                requests: &self.requests,
                notes: &self.store,
            },
            &self.settings,
            at,
            None::<&runtime::breaker::BreakerGate<testkit::memory::MemoryBreaker>>,
            &reconciler::Limits::default(),
            &runtime::settings::Seeds::fixed(7),
            &self.reconciler,
        )
        .await;
    }

    /// The audit writer's counts over the whole trail, then every function's counts.
    fn emitted(&self) -> BTreeMap<(String, String), u64> {
        for entry in self.store.audit(&Self::id()) {
            audit_writer::count_transition(&entry, &self.audit);
        }
        emitted(&[&self.response, &self.reconciler, &self.audit])
    }
}

/// A request the service never answers: the reconciler republishes it at each answer
/// deadline, then ends the transaction FAILED/UNANSWERED.
async fn unanswered() -> Stage {
    let stage = Stage::new(runtime::settings::Settings::default());
    stage.start(3).await;
    for _ in 0..=domain::defaults::ANSWER_REPUBLISH_MAX {
        let due = stage
            .record()
            .answer_due_at
            .unwrap_or_else(|| panic!("{TX} has no answer deadline"));
        stage.reconcile(due.plus_millis(1_000)).await;
    }
    let rec = stage.record();
    assert_eq!(rec.status, domain::Status::Failed);
    assert_eq!(
        rec.last_reason.as_deref(),
        Some(domain::decide::UNANSWERED_REASON)
    );
    stage
}

/// A transaction ending UNANSWERED raises exactly one alarm, on one datapoint:
/// `TransactionsUnansweredAlarm` — not the exhausted one (the audit writer sees it
/// enter FAILED), not the stuck one (the reconciler examined it at every deadline).
#[tokio::test]
async fn a_transaction_ending_unanswered_raises_exactly_one_alarm_datapoint() {
    let stage = unanswered().await;
    let counts = stage.emitted();
    // The path did count: republishes, examinations, the entry into FAILED.
    assert_eq!(
        counts.get(&(
            names::REQUESTS_REPUBLISHED.to_owned(),
            "reconciler".to_owned()
        )),
        Some(&u64::from(domain::defaults::ANSWER_REPUBLISH_MAX))
    );
    assert!(counts.contains_key(&(
        names::RECONCILE_EXAMINED.to_owned(),
        "reconciler".to_owned()
    )));
    assert_eq!(
        counts.get(&("EnteredFailed".to_owned(), "audit-writer".to_owned())),
        Some(&1)
    );
    assert_eq!(
        raised(&template(), &counts),
        vec![("TransactionsUnansweredAlarm".to_owned(), 1)]
    );
    // Had the stuck alarm read every record the reconciler examines (as it once did),
    // the same transaction would page twice.
    let mut t = template();
    props_mut(&mut t, "StuckTransactionsAlarm")
        .insert("MetricName".into(), names::RECONCILE_EXAMINED.into());
    assert_eq!(raised(&t, &counts).len(), 2, "{:?}", raised(&t, &counts));
}

/// The other two ways into FAILED page once each, on their own alarm.
#[tokio::test]
async fn each_ending_in_failed_raises_only_its_own_alarm() {
    // Every attempt answered CANCELLED (a budget of 1).
    let stage = Stage::new(runtime::settings::Settings::default());
    stage.start(1).await;
    stage
        .respond(1, domain::Outcome::Cancelled, T0.plus_millis(1_000))
        .await;
    failed_raising(&stage, "TransactionsExhaustedAlarm");

    // ERROR with no technical re-send left.
    let stage = Stage::new(runtime::settings::Settings {
        technical_resend_max: 0,
        ..runtime::settings::Settings::default()
    });
    stage.start(3).await;
    stage
        .respond(1, domain::Outcome::Error, T0.plus_millis(1_000))
        .await;
    assert_eq!(
        stage.record().last_reason.as_deref(),
        Some(domain::decide::TECHNICAL_EXHAUSTED_REASON)
    );
    failed_raising(&stage, "TechnicalExhaustedAlarm");

    // Outbox mode: an ERROR that does not say the call did not run, once the
    // publisher published the SENDING record.
    let stage = Stage::new(runtime::settings::Settings {
        delivery: domain::decide::Delivery::Outbox,
        ..runtime::settings::Settings::default()
    });
    stage.start(3).await;
    let clock = testkit::memory::ManualClock::at(T0.plus_millis(1_000));
    let publisher = publisher::Publisher {
        store: &stage.store,
        requests: &stage.requests,
        notes: &stage.store,
        clock: &clock,
        settings: stage.settings.clone(),
        concurrency: 1,
        seeds: runtime::settings::Seeds::fixed(7),
        pacer: None,
        namespace: "DeferredRetry".into(),
    };
    let sending = stage.record();
    let event = testkit::events::stream(&[(None, &sending)], 1)
        .unwrap_or_else(|e| panic!("stream event: {e}"));
    let m = runtime::Metrics::new("DeferredRetry", publisher::FUNCTION);
    publisher.handle_event(&event, &m).await;
    assert_eq!(stage.record().status, domain::Status::InProgress);
    stage
        .respond(1, domain::Outcome::Error, T0.plus_millis(2_000))
        .await;
    failed_raising(&stage, "TransactionsAmbiguousAlarm");
}

/// The transaction ended FAILED, and only `alarm` went off, once.
fn failed_raising(stage: &Stage, alarm: &str) {
    assert_eq!(stage.record().status, domain::Status::Failed);
    assert_eq!(
        raised(&template(), &stage.emitted()),
        vec![(alarm.to_owned(), 1)]
    );
}

// ---------------------------------------------------------------------------------
// Safe upgrades: the `live` alias, CodeDeploy's shift and its rollback alarms
// ---------------------------------------------------------------------------------

/// The alias every function is published behind (`docs/deploy.md`).
const LIVE_ALIAS: &str = "live";

/// The logical ids a `DeploymentPreference.Alarms` list names: `!Ref X`, or
/// `!If [cond, !Ref X, !Ref AWS::NoValue]` for an alarm that exists under a condition.
fn listed_alarms(v: Option<&Value>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for a in v.and_then(Value::as_sequence).into_iter().flatten() {
        match intrinsic(a) {
            Some((name, Value::Sequence(branches))) if name == "If" => {
                out.extend(branches.iter().skip(1).filter_map(ref_name));
            }
            _ => out.extend(ref_name(a)),
        }
    }
    out.remove("AWS::NoValue");
    out
}

/// The alarm on a function's `Errors`, and the alarm at the first message of the DLQ
/// behind each of its event sources (an SQS queue's redrive target, a stream's
/// on-failure destination): what must roll a bad release back.
fn rollback_alarms_expected(t: &Value, id: &str, function: &Value) -> BTreeSet<String> {
    let alarms = of_type(t, "AWS::CloudWatch::Alarm");
    let mut out = BTreeSet::new();
    for (aid, a) in &alarms {
        if props(a, "Namespace").and_then(Value::as_str) == Some("AWS/Lambda")
            && props(a, "MetricName").and_then(Value::as_str) == Some("Errors")
            && dimensions(props(a, "Dimensions"))
                == vec![("FunctionName".to_owned(), format!("!Ref {id}"))]
        {
            out.insert(aid.clone());
        }
    }
    for ev in props(function, "Events")
        .and_then(Value::as_mapping)
        .into_iter()
        .flat_map(Mapping::values)
    {
        let dlq = path(ev, &["Properties", "Queue"])
            .and_then(target)
            .and_then(|q| {
                path(t, &["Resources", &q, "Properties", "RedrivePolicy"])
                    .and_then(|rp| get(rp, "deadLetterTargetArn"))
                    .and_then(target)
            })
            .or_else(|| on_failure_destination(ev));
        let Some(dlq) = dlq else { continue };
        for (aid, a) in &alarms {
            if props(a, "Namespace").and_then(Value::as_str) == Some("AWS/SQS")
                && props(a, "Dimensions")
                    .and_then(Value::as_sequence)
                    .is_some_and(|d| {
                        d.iter().any(|x| {
                            get(x, "Value").and_then(get_att)
                                == Some((dlq.clone(), "QueueName".to_owned()))
                        })
                    })
            {
                out.insert(aid.clone());
            }
        }
    }
    out
}

/// Every function published behind `live` with a `DeploymentPreference` of the
/// `DeploymentType` parameter, CodeDeploy's role, and its rollback alarms (its errors,
/// its DLQs); the parameter defaults to a canary and allows `AllAtOnce`.
fn upgrade_problems(t: &Value) -> Vec<String> {
    let mut p = vec![];
    let param = path(t, &["Parameters", "DeploymentType"]);
    let default = param
        .and_then(|v| get(v, "Default"))
        .and_then(Value::as_str);
    if !default.is_some_and(|d| d.starts_with("Canary")) {
        p.push(format!(
            "parameter DeploymentType: default {default:?}, expected a canary"
        ));
    }
    let allowed = str_list(param.and_then(|v| get(v, "AllowedValues")));
    if !allowed.iter().any(|v| v == "AllAtOnce") {
        p.push(format!(
            "parameter DeploymentType: AllowedValues {allowed:?} lack AllAtOnce"
        ));
    }
    for (bin, id, r) in function_resources(t) {
        if props(r, "AutoPublishAlias").and_then(Value::as_str) != Some(LIVE_ALIAS) {
            p.push(format!(
                "{id} ({bin}): AutoPublishAlias is not {LIVE_ALIAS}"
            ));
        }
        let pref = props(r, "DeploymentPreference");
        let ty = pref.and_then(|d| get(d, "Type")).and_then(ref_name);
        if ty.as_deref() != Some("DeploymentType") {
            p.push(format!(
                "{id} ({bin}): DeploymentPreference.Type is {ty:?}, not !Ref DeploymentType"
            ));
        }
        let role = pref.and_then(|d| get(d, "Role")).and_then(get_att);
        if role != Some(("CodeDeployRole".to_owned(), "Arn".to_owned())) {
            p.push(format!(
                "{id} ({bin}): DeploymentPreference.Role is {role:?}, not CodeDeployRole"
            ));
        }
        let listed = listed_alarms(pref.and_then(|d| get(d, "Alarms")));
        let expected = rollback_alarms_expected(t, &id, r);
        if expected.is_empty() || listed != expected {
            p.push(format!(
                "{id} ({bin}): rollback alarms {listed:?}, expected {expected:?}"
            ));
        }
    }
    p
}

/// The SAM translator (the one `sam validate` runs, from `.venv`) on `template`: the
/// CloudFormation template SAM deploys, with the parameters' defaults.
fn transformed(template: &Value) -> serde_json::Value {
    // SAM's own YAML loader reads the tags (!Ref, !GetAtt, ...); a date the YAML
    // writer left unquoted (a policy's Version) goes back to its text.
    const TRANSFORM: &str = r#"
import json, sys
from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse
class NoManagedPolicies:
    def load(self):
        return {}
doc = json.loads(json.dumps(yaml_parse(sys.stdin.read()), default=str))
for r in doc["Resources"].values():
    if r.get("Type") == "AWS::Serverless::Function":
        r["Properties"]["CodeUri"] = "s3://bucket/code.zip"
print(json.dumps(transform(doc, {}, NoManagedPolicies())))
"#;
    use std::io::Write;
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let python = format!("{root}/.venv/bin/python3");
    let yaml = serde_yaml::to_string(template).unwrap_or_else(|e| panic!("template: {e}"));
    let out = std::process::Command::new(&python)
        .args(["-c", TRANSFORM])
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            if let Some(mut stdin) = c.stdin.take() {
                stdin.write_all(yaml.as_bytes())?;
            }
            c.wait_with_output()
        })
        .unwrap_or_else(|e| panic!("{python}: {e} (. scripts/tools.sh)"));
    assert!(
        out.status.success(),
        "the SAM translator failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("the translator's output: {e}"))
}

/// In the transformed template: every event source mapping, schedule rule target and
/// invoke permission points at a function's `live` alias, never at the function
/// itself; every alias shifts through a CodeDeploy deployment group that rolls back on
/// its alarms, under CodeDeployRole.
fn transformed_upgrade_problems(cfn: &serde_json::Value, functions: usize) -> Vec<String> {
    use serde_json::Value as J;
    let mut p = vec![];
    let empty = serde_json::Map::new();
    let resources = cfn["Resources"].as_object().unwrap_or(&empty);
    let ty = |id: &str| resources.get(id).and_then(|r| r["Type"].as_str());
    let is_live_alias = |v: &J| {
        v["Ref"].as_str().is_some_and(|a| {
            ty(a) == Some("AWS::Lambda::Alias") && resources[a]["Properties"]["Name"] == LIVE_ALIAS
        })
    };
    let aliases: Vec<(&String, &J)> = resources
        .iter()
        .filter(|(_, r)| r["Type"] == "AWS::Lambda::Alias")
        .collect();
    if aliases.len() != functions {
        p.push(format!(
            "{} aliases for {functions} functions",
            aliases.len()
        ));
    }
    for (id, r) in resources {
        let props = &r["Properties"];
        match r["Type"].as_str().unwrap_or_default() {
            "AWS::Lambda::EventSourceMapping" | "AWS::Lambda::Permission"
                if !is_live_alias(&props["FunctionName"]) =>
            {
                p.push(format!(
                    "{id}: FunctionName {} is not a {LIVE_ALIAS} alias",
                    props["FunctionName"]
                ));
            }
            "AWS::Events::Rule" => {
                for target in props["Targets"].as_array().into_iter().flatten() {
                    if !is_live_alias(&target["Arn"]) {
                        p.push(format!(
                            "{id}: target {} is not a {LIVE_ALIAS} alias",
                            target["Arn"]
                        ));
                    }
                }
            }
            "AWS::Lambda::Alias" => {
                let group = r["UpdatePolicy"]["CodeDeployLambdaAliasUpdate"]["DeploymentGroupName"]
                    ["Ref"]
                    .as_str()
                    .unwrap_or_default();
                let g = resources.get(group).map(|g| &g["Properties"]);
                let rolls_back = g.is_some_and(|g| {
                    g["AutoRollbackConfiguration"]["Enabled"] == J::Bool(true)
                        && g["AutoRollbackConfiguration"]["Events"]
                            .as_array()
                            .is_some_and(|e| e.contains(&J::from("DEPLOYMENT_STOP_ON_ALARM")))
                        && g["AlarmConfiguration"]["Enabled"] == J::Bool(true)
                        && g["AlarmConfiguration"]["Alarms"]
                            .as_array()
                            .is_some_and(|a| !a.is_empty())
                        && g["ServiceRoleArn"]["Fn::GetAtt"][0] == "CodeDeployRole"
                });
                if !rolls_back {
                    p.push(format!(
                        "{id}: no CodeDeploy group rolling back on alarms under CodeDeployRole ({group:?})"
                    ));
                }
            }
            _ => {}
        }
    }
    p.sort();
    p
}

#[test]
fn every_function_is_published_behind_live_and_rolled_back_by_its_alarms() {
    let t = template();
    assert_none(upgrade_problems(&t));
    // The publisher is one of them (created in outbox mode only).
    assert_eq!(function_resources(&t).len(), 7);

    // A function without its alias, one without its DLQ alarm, a default that is not
    // a canary: each is named.
    let mut broken = template();
    props_mut(&mut broken, "StarterFunction").remove("AutoPublishAlias");
    let alarms = props_mut(&mut broken, "RetryHandlerFunction")
        .get_mut("DeploymentPreference")
        .and_then(|d| d.get_mut("Alarms"))
        .and_then(Value::as_sequence_mut)
        .unwrap();
    alarms.retain(|a| ref_name(a).as_deref() != Some("RetryDLQAlarm"));
    broken["Parameters"]["DeploymentType"]["Default"] = Value::from("AllAtOnce");
    let p = upgrade_problems(&broken);
    assert_eq!(p.len(), 3, "{p:?}");
    assert!(p[0].contains("DeploymentType"), "{p:?}");
    some_problem(&p, |x| {
        x.starts_with("StarterFunction") && x.contains("AutoPublishAlias")
    });
    some_problem(&p, |x| {
        x.starts_with("RetryHandlerFunction") && x.contains("RetryDLQAlarm")
    });
}

#[test]
fn event_sources_point_at_the_live_alias_once_transformed() {
    let t = template();
    let functions = function_resources(&t).len();
    assert_none(transformed_upgrade_problems(&transformed(&t), functions));

    // Without AutoPublishAlias SAM wires the event sources to the function itself:
    // the check sees it.
    let mut broken = template();
    for id in ["ReconcilerFunction", "RetryHandlerFunction"] {
        props_mut(&mut broken, id).remove("AutoPublishAlias");
        props_mut(&mut broken, id).remove("DeploymentPreference");
    }
    mentions(
        &transformed_upgrade_problems(&transformed(&broken), functions),
        &[
            "5 aliases for 7 functions",
            "RetryHandlerFunctionRetryEvents: FunctionName",
            "ReconcilerFunctionTick: target",
            "ReconcilerFunctionTickPermission: FunctionName",
        ],
    );
}
