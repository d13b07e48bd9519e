//! `template.yaml` against the code.
//!
//! - every function sets exactly the environment variables its config struct reads
//!   (`aws::config::*Config::ENV_VARS`), no more, no fewer;
//! - tables (keys, attributes, the reconcile index, stream view, TTL, billing) and
//!   queues (redrive, maxReceiveCount, visibility, retention) are the definitions
//!   `aws::provision` creates locally;
//! - function timeouts are `aws::config::timeouts`, and 6 × timeout fits in the
//!   visibility timeout of the queue each function consumes;
//! - no IAM action anywhere contains `*`;
//! - every DLQ has an alarm at its first message, and the business alarms read the
//!   metrics the code emits (name and `Function` dimension);
//! - build metadata, event sources and the scheduler role's trust policy are as the
//!   design requires.
//!
//! Each check returns the list of problems it found; the `*_detects_*` tests break a
//! copy of the template and assert the check notices, so no check passes vacuously.

use aws::config::{
    timeouts, AuditWriterConfig, ReconcilerConfig, ResponseHandlerConfig, RetryHandlerConfig,
    StackNames,
};
use aws::provision::{queue_definitions, table_definitions, QueueDef, TableDef};
use runtime::metrics::{names, DIMENSION};
use serde_yaml::{Mapping, Value};
use std::collections::{BTreeMap, BTreeSet};

/// SQS keeps messages 4 days unless told otherwise.
const SQS_DEFAULT_RETENTION_SECONDS: i64 = 345_600;

/// The functions of the stack: binary name → (environment variables read, timeout).
fn functions() -> BTreeMap<&'static str, (&'static [&'static str], u32)> {
    BTreeMap::from([
        (
            "response-handler",
            (
                ResponseHandlerConfig::ENV_VARS,
                timeouts::RESPONSE_HANDLER_SECONDS,
            ),
        ),
        (
            "retry-handler",
            (
                RetryHandlerConfig::ENV_VARS,
                timeouts::RETRY_HANDLER_SECONDS,
            ),
        ),
        (
            "reconciler",
            (ReconcilerConfig::ENV_VARS, timeouts::RECONCILER_SECONDS),
        ),
        (
            "audit-writer",
            (AuditWriterConfig::ENV_VARS, timeouts::AUDIT_WRITER_SECONDS),
        ),
    ])
}

// ---------------------------------------------------------------------------------
// Reading the template (CloudFormation short tags become `Value::Tagged`)
// ---------------------------------------------------------------------------------

fn template() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../template.yaml");
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("parsing {path}: {e}"))
}

fn get<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.as_mapping().and_then(|m| m.get(key))
}

fn path<'a>(v: &'a Value, keys: &[&str]) -> Option<&'a Value> {
    keys.iter().try_fold(v, |cur, k| get(cur, k))
}

fn resources(t: &Value) -> Vec<(String, &Value)> {
    path(t, &["Resources"])
        .and_then(Value::as_mapping)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.as_str()?.to_owned(), v)))
                .collect()
        })
        .unwrap_or_default()
}

fn of_type<'a>(t: &'a Value, ty: &str) -> Vec<(String, &'a Value)> {
    resources(t)
        .into_iter()
        .filter(|(_, r)| get(r, "Type").and_then(Value::as_str) == Some(ty))
        .collect()
}

fn props<'a>(r: &'a Value, key: &str) -> Option<&'a Value> {
    path(r, &["Properties", key])
}

/// `!Name value` or `{Fn::Name: value}` / `{Ref: value}` → (`Name`, value).
fn intrinsic(v: &Value) -> Option<(String, &Value)> {
    match v {
        Value::Tagged(t) => Some((
            t.tag.to_string().trim_start_matches('!').to_owned(),
            &t.value,
        )),
        Value::Mapping(m) if m.len() == 1 => {
            let (k, inner) = m.iter().next()?;
            let k = k.as_str()?;
            if k == "Ref" || k.starts_with("Fn::") {
                Some((k.trim_start_matches("Fn::").to_owned(), inner))
            } else {
                None
            }
        }
        _ => None,
    }
}

/// `!Ref X` → X.
fn ref_name(v: &Value) -> Option<String> {
    match intrinsic(v)? {
        (name, inner) if name == "Ref" => inner.as_str().map(str::to_owned),
        _ => None,
    }
}

/// `!GetAtt X.Attr` (or `[X, Attr]`) → (X, Attr).
fn get_att(v: &Value) -> Option<(String, String)> {
    let (name, inner) = intrinsic(v)?;
    if name != "GetAtt" {
        return None;
    }
    match inner {
        Value::String(s) => {
            let (res, attr) = s.split_once('.')?;
            Some((res.to_owned(), attr.to_owned()))
        }
        Value::Sequence(seq) if seq.len() == 2 => {
            Some((seq[0].as_str()?.to_owned(), seq[1].as_str()?.to_owned()))
        }
        _ => None,
    }
}

/// The logical id a value points at through `!Ref` or `!GetAtt`.
fn target(v: &Value) -> Option<String> {
    ref_name(v).or_else(|| get_att(v).map(|(r, _)| r))
}

fn number(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

/// A literal integer, or the default of the parameter it references.
fn int_value(t: &Value, v: &Value) -> Option<i64> {
    number(v).or_else(|| {
        let p = ref_name(v)?;
        number(path(t, &["Parameters", &p, "Default"])?)
    })
}

/// The largest value a literal or a referenced parameter can take.
fn int_max(t: &Value, v: &Value) -> Option<i64> {
    number(v).or_else(|| {
        let p = ref_name(v)?;
        let param = path(t, &["Parameters", &p])?;
        get(param, "MaxValue")
            .and_then(number)
            .or_else(|| get(param, "Default").and_then(number))
    })
}

fn str_list(v: Option<&Value>) -> Vec<String> {
    match v {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Sequence(s)) => s
            .iter()
            .filter_map(|x| x.as_str().map(str::to_owned))
            .collect(),
        _ => vec![],
    }
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
        let set: BTreeSet<String> = path(r, &["Properties", "Environment", "Variables"])
            .and_then(Value::as_mapping)
            .map(|m| {
                m.keys()
                    .filter_map(|k| k.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
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

fn key_schema(v: Option<&Value>) -> Vec<(String, String)> {
    v.and_then(Value::as_sequence)
        .map(|s| {
            s.iter()
                .map(|k| {
                    let f = |n| get(k, n).and_then(Value::as_str).unwrap_or("").to_owned();
                    (f("AttributeName"), f("KeyType"))
                })
                .collect()
        })
        .unwrap_or_default()
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
    let attrs: BTreeSet<(String, String)> = props(r, "AttributeDefinitions")
        .and_then(Value::as_sequence)
        .map(|s| {
            s.iter()
                .map(|a| {
                    let f = |n| get(a, n).and_then(Value::as_str).unwrap_or("").to_owned();
                    (f("AttributeName"), f("AttributeType"))
                })
                .collect()
        })
        .unwrap_or_default();
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

/// Tables are the definitions the adapters provision (and query).
fn table_problems(t: &Value) -> Vec<String> {
    let defs = table_definitions(&StackNames::new("template-test"));
    let tables = of_type(t, "AWS::DynamoDB::Table");
    let mut p = vec![];
    let ids: BTreeSet<&str> = tables.iter().map(|(id, _)| id.as_str()).collect();
    let want: BTreeSet<&str> = defs.iter().map(|d| d.logical_id).collect();
    if ids != want {
        p.push(format!("tables {ids:?}, the code provisions {want:?}"));
    }
    for def in &defs {
        if let Some((id, r)) = tables.iter().find(|(id, _)| id == def.logical_id) {
            p.extend(table_problems_for(id, r, def));
        }
    }
    p
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
    let defs = queue_definitions(&StackNames::new("template-test"));
    let queues = of_type(t, "AWS::SQS::Queue");
    let mut p = vec![];
    let ids: BTreeSet<&str> = queues.iter().map(|(id, _)| id.as_str()).collect();
    let want: BTreeSet<&str> = defs.iter().map(|d| d.logical_id).collect();
    if ids != want {
        p.push(format!("queues {ids:?}, the code provisions {want:?}"));
    }
    for def in &defs {
        if let Some((id, r)) = queues.iter().find(|(id, _)| id == def.logical_id) {
            p.extend(queue_problems_for(t, id, r, def));
        }
    }
    p
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
            if let Some(q) = path(
                ev,
                &[
                    "Properties",
                    "DestinationConfig",
                    "OnFailure",
                    "Destination",
                ],
            )
            .and_then(target)
            {
                dlqs.insert(q);
            }
        }
        if let Some(q) = path(
            r,
            &[
                "Properties",
                "Environment",
                "Variables",
                "SCHEDULER_DLQ_ARN",
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
    // request, response, retry, scheduler, audit stream.
    if dlqs.len() != 5 {
        p.push(format!("expected 5 DLQs, found {dlqs:?}"));
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

/// The business alarms read the EMF metrics the code emits: same name, namespace
/// parameter, and the `Function` dimension with the emitting function's name.
fn business_alarm_problems(t: &Value) -> Vec<String> {
    let mut p = vec![];
    let alarms = of_type(t, "AWS::CloudWatch::Alarm");
    let emitted = [
        // audit-writer, on IN_PROGRESS -> FAILED.
        (audit_writer::TRANSACTIONS_EXHAUSTED, audit_writer::FUNCTION),
        // reconciler, per stuck transaction its index query returned.
        (names::RECONCILE_EXAMINED, runtime::reconcile::FUNCTION),
    ];
    for (metric, function) in emitted {
        let want_dims = vec![(DIMENSION.to_owned(), function.to_owned())];
        let ok = alarms.iter().any(|(_, a)| {
            let dims: Vec<(String, String)> = props(a, "Dimensions")
                .and_then(Value::as_sequence)
                .map(|d| {
                    d.iter()
                        .map(|x| {
                            let f = |n| get(x, n).and_then(Value::as_str).unwrap_or("").to_owned();
                            (f("Name"), f("Value"))
                        })
                        .collect()
                })
                .unwrap_or_default();
            props(a, "MetricName").and_then(Value::as_str) == Some(metric)
                && props(a, "Namespace").and_then(ref_name).as_deref() == Some("MetricsNamespace")
                && dims == want_dims
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

#[test]
fn environment_variables_are_exactly_what_the_code_reads() {
    assert_none(env_problems(&template()));
}

#[test]
fn tables_are_the_code_definitions() {
    assert_none(table_problems(&template()));
}

#[test]
fn queues_are_the_code_definitions() {
    assert_none(queue_problems(&template()));
}

#[test]
fn timeouts_fit_the_visibility_of_the_consumed_queues() {
    assert_none(timeout_problems(&template()));
}

#[test]
fn no_wildcard_iam_action() {
    assert_none(wildcard_action_problems(&template()));
}

#[test]
fn every_dlq_has_an_alarm_at_its_first_message() {
    assert_none(dlq_alarm_problems(&template()));
}

#[test]
fn functions_events_and_business_alarms_are_wired() {
    assert_none(wiring_problems(&template()));
}

#[test]
fn the_scheduler_role_is_scoped() {
    assert_none(scheduler_role_problems(&template()));
}

// ---------------------------------------------------------------------------------
// The checks notice a broken template
// ---------------------------------------------------------------------------------

fn resource_mut<'a>(t: &'a mut Value, id: &str) -> &'a mut Value {
    t.get_mut("Resources")
        .and_then(|r| r.get_mut(id))
        .unwrap_or_else(|| panic!("no resource {id}"))
}

fn props_mut<'a>(t: &'a mut Value, id: &str) -> &'a mut Mapping {
    resource_mut(t, id)
        .get_mut("Properties")
        .and_then(Value::as_mapping_mut)
        .unwrap_or_else(|| panic!("{id} has no Properties"))
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
    env_mut(&mut t, "RetryHandlerFunction").remove("MAX_REQUESTS_PER_SECOND");
    let p = env_problems(&t);
    assert!(
        p.iter().any(|m| m.contains("MAX_REQUESTS_PER_SECOND")),
        "{p:?}"
    );

    let mut t = template();
    env_mut(&mut t, "AuditWriterFunction").insert("DEBUG_MODE".into(), "1".into());
    let p = env_problems(&t);
    assert!(
        p.iter()
            .any(|m| m.contains("DEBUG_MODE") && m.contains("no code reads")),
        "{p:?}"
    );
}

#[test]
fn table_check_detects_a_changed_index_and_ttl() {
    let mut t = template();
    let gsi = props_mut(&mut t, "TransactionsTable")
        .get_mut("GlobalSecondaryIndexes")
        .and_then(|g| g.get_mut(0))
        .and_then(|g| g.get_mut("Projection"))
        .and_then(Value::as_mapping_mut)
        .expect("the reconcile index has a projection");
    gsi.insert("ProjectionType".into(), "ALL".into());
    let p = table_problems(&t);
    assert!(
        p.iter().any(|m| m.contains("TransactionsTable: indexes")),
        "{p:?}"
    );

    let mut t = template();
    props_mut(&mut t, "AuditTable").remove("TimeToLiveSpecification");
    let p = table_problems(&t);
    assert!(p.iter().any(|m| m.contains("AuditTable: TTL")), "{p:?}");
}

#[test]
fn queue_and_timeout_checks_detect_a_short_visibility() {
    let mut t = template();
    props_mut(&mut t, "RetryQueue").insert("VisibilityTimeout".into(), 300.into());
    assert!(!queue_problems(&t).is_empty());
    let p = timeout_problems(&t);
    assert!(
        p.iter().any(|m| m.contains("RetryHandlerFunction")),
        "{p:?}"
    );

    let mut t = template();
    let rp = props_mut(&mut t, "ResponseQueue")
        .get_mut("RedrivePolicy")
        .and_then(Value::as_mapping_mut)
        .expect("the response queue has a redrive policy");
    rp.insert("maxReceiveCount".into(), 1.into());
    let p = queue_problems(&t);
    assert!(p.iter().any(|m| m.contains("maxReceiveCount")), "{p:?}");
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
    let p = wildcard_action_problems(&t);
    assert!(p.iter().any(|m| m.contains("dynamodb:*")), "{p:?}");
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
    let ev = props_mut(&mut t, "ResponseHandlerFunction")
        .get_mut("Events")
        .and_then(Value::as_mapping_mut)
        .and_then(|e| e.values_mut().next())
        .and_then(|e| e.get_mut("Properties"))
        .and_then(Value::as_mapping_mut)
        .expect("the response handler has an SQS event");
    ev.remove("FunctionResponseTypes");
    let p = wiring_problems(&t);
    assert!(
        p.iter().any(|m| m.contains("ReportBatchItemFailures")),
        "{p:?}"
    );

    let mut t = template();
    let st = props_mut(&mut t, "SchedulerRole")
        .get_mut("AssumeRolePolicyDocument")
        .and_then(|d| d.get_mut("Statement"))
        .and_then(|s| s.get_mut(0))
        .and_then(Value::as_mapping_mut)
        .expect("one trust statement");
    st.remove("Condition");
    let p = scheduler_role_problems(&t);
    assert!(p.iter().any(|m| m.contains("aws:SourceAccount")), "{p:?}");
    assert!(p.iter().any(|m| m.contains("aws:SourceArn")), "{p:?}");
}

#[test]
fn business_alarm_check_detects_a_metric_the_code_does_not_emit() {
    let mut t = template();
    props_mut(&mut t, "StuckTransactionsAlarm")
        .insert("MetricName".into(), "ReconcilerActions".into());
    let p = business_alarm_problems(&t);
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(p[0].contains("ReconcileExamined"), "{p:?}");

    let mut t = template();
    props_mut(&mut t, "TransactionsExhaustedAlarm").remove("Dimensions");
    let p = business_alarm_problems(&t);
    assert!(
        p.iter().any(|m| m.contains("TransactionsExhausted")),
        "{p:?}"
    );
}

// ---------------------------------------------------------------------------------
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

#[test]
fn parameter_defaults_are_the_code_defaults() {
    assert_none(default_problems(&template()));
    let mut t = template();
    t["Parameters"]["MaxRequestsPerSecond"]["Default"] = Value::from(10);
    let p = default_problems(&t);
    assert!(
        p.len() == 1 && p[0].contains("MaxRequestsPerSecond"),
        "{p:?}"
    );
}
