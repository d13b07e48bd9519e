//! The resource checks: every resource the code relies on exists with the settings
//! it relies on. The expected settings are the definitions `testkit::provision` creates
//! locally and `tests/template.rs` compares with `template.yaml` (and the harness's
//! table definition), so no setting is written down twice.

use super::{Checks, Env};
use aws_sdk_sqs::types::QueueAttributeName;
use serde_json::Value;
use std::collections::HashMap;
use testkit::provision::{queue_definitions, table_definitions, QueueDef, TableDef};

const PHASE: &str = "resources";

/// (logical id, output key of its URL, output key of its ARN).
const QUEUES: &[(&str, &str, &str)] = &[
    ("RequestQueue", "RequestQueueUrl", "RequestQueueArn"),
    ("ResponseQueue", "ResponseQueueUrl", "ResponseQueueArn"),
    ("RetryQueue", "RetryQueueUrl", "RetryQueueArn"),
    ("RequestDLQ", "RequestDLQUrl", "RequestDLQArn"),
    ("ResponseDLQ", "ResponseDLQUrl", "ResponseDLQArn"),
    ("RetryDLQ", "RetryDLQUrl", "RetryDLQArn"),
    ("SchedulerDLQ", "SchedulerDLQUrl", "SchedulerDLQArn"),
    ("AuditDLQ", "AuditDLQUrl", "AuditDLQArn"),
];

/// The dead-letter queues (logical id, URL output).
pub const DLQS: &[(&str, &str)] = &[
    ("RequestDLQ", "RequestDLQUrl"),
    ("ResponseDLQ", "ResponseDLQUrl"),
    ("RetryDLQ", "RetryDLQUrl"),
    ("SchedulerDLQ", "SchedulerDLQUrl"),
    ("AuditDLQ", "AuditDLQUrl"),
];

/// The last segment of an ARN or URL: the queue's name.
fn short(s: &str) -> &str {
    s.rsplit(['/', ':']).next().unwrap_or(s)
}

pub async fn check(env: &Env<'_>, out: &mut Checks) {
    queues(env, out).await;
    tables(env, out).await;
    schedule_group(env, out).await;
    alarm_destination(env, out).await;
    trust_policy(env, out);
    harness_access(env, out).await;
}

async fn attributes(
    env: &Env<'_>,
    url: &str,
) -> Result<HashMap<QueueAttributeName, String>, String> {
    queue_attributes(&env.sqs, url).await
}

/// Every attribute of the queue at `url`.
pub async fn queue_attributes(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
) -> Result<HashMap<QueueAttributeName, String>, String> {
    sqs.get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .map(|o| o.attributes().cloned().unwrap_or_default())
        .map_err(aws::errors::sdk_error("GetQueueAttributes"))
}

async fn queues(env: &Env<'_>, out: &mut Checks) {
    let defs = queue_definitions(&aws::config::StackNames::new("verify"));
    for (id, url_key, arn_key) in QUEUES {
        let (Some(url), Some(def)) = (
            env.outputs.get(url_key),
            defs.iter().find(|d| d.logical_id == *id),
        ) else {
            out.fail(PHASE, *id, format!("no output {url_key}"));
            continue;
        };
        let subject = format!("{id} {}", short(url));
        match attributes(env, url).await {
            Err(e) => out.fail(PHASE, subject, format!("cannot be read: {e}")),
            Ok(attrs) => {
                let problems = queue_problems(env, def, &attrs, arn_key);
                let detail = queue_summary(def, &attrs);
                if problems.is_empty() {
                    out.pass(PHASE, subject, detail);
                } else {
                    out.fail(PHASE, subject, problems.join("; "));
                }
            }
        }
    }
}

fn queue_summary(def: &QueueDef, attrs: &HashMap<QueueAttributeName, String>) -> String {
    let get = |k: QueueAttributeName| attrs.get(&k).map(String::as_str).unwrap_or("?");
    match &def.redrive {
        Some(r) => format!(
            "redrive to {} after {} receives, visibility {} s",
            r.dlq_logical_id,
            r.max_receive_count,
            get(QueueAttributeName::VisibilityTimeout)
        ),
        None => format!(
            "retention {} s",
            get(QueueAttributeName::MessageRetentionPeriod)
        ),
    }
}

fn queue_problems(
    env: &Env<'_>,
    def: &QueueDef,
    attrs: &HashMap<QueueAttributeName, String>,
    arn_key: &str,
) -> Vec<String> {
    let mut p = vec![];
    if let Some(arn) = env.outputs.get(arn_key) {
        if attrs.get(&QueueAttributeName::QueueArn).map(String::as_str) != Some(arn) {
            p.push(format!(
                "its ARN is {:?}, the output {arn_key} says {arn}",
                attrs.get(&QueueAttributeName::QueueArn)
            ));
        }
    }
    if let Some(want) = def.visibility_timeout_seconds {
        let got = attrs.get(&QueueAttributeName::VisibilityTimeout);
        if got.map(String::as_str) != Some(want.to_string().as_str()) {
            p.push(format!(
                "visibility timeout {} s, the code relies on {want} s (6 x its consumer's timeout: a slow batch would be delivered twice)",
                got.map_or("?", String::as_str)
            ));
        }
    }
    if def.redrive.is_none() {
        if let Some(want) = def.message_retention_seconds {
            let got = attrs.get(&QueueAttributeName::MessageRetentionPeriod);
            if got.map(String::as_str) != Some(want.to_string().as_str()) {
                p.push(format!(
                    "retention {} s, expected {want} s (a DLQ keeps messages 14 days for a redrive)",
                    got.map_or("?", String::as_str)
                ));
            }
        }
    }
    let Some(r) = &def.redrive else {
        return p;
    };
    let Some(raw) = attrs
        .get(&QueueAttributeName::RedrivePolicy)
        .filter(|s| !s.trim().is_empty())
    else {
        p.push(format!(
            "no redrive policy: a message that keeps failing is never moved to {} (the code relies on maxReceiveCount {})",
            r.dlq_logical_id, r.max_receive_count
        ));
        return p;
    };
    let policy: Value = serde_json::from_str(raw).unwrap_or(Value::Null);
    let target = policy.get("deadLetterTargetArn").and_then(Value::as_str);
    let count = policy.get("maxReceiveCount").and_then(|v| {
        v.as_u64()
            .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
    });
    let dlq_arn = QUEUES
        .iter()
        .find(|(id, _, _)| *id == r.dlq_logical_id)
        .and_then(|(_, _, arn)| env.outputs.get(arn));
    if target.is_none() || target != dlq_arn {
        p.push(format!(
            "redrive policy targets {target:?}, not {} ({})",
            r.dlq_logical_id,
            dlq_arn.unwrap_or("?")
        ));
    }
    if count != Some(u64::from(r.max_receive_count)) {
        p.push(format!(
            "maxReceiveCount {count:?}, the code relies on {}",
            r.max_receive_count
        ));
    }
    p
}

async fn tables(env: &Env<'_>, out: &mut Checks) {
    let mut defs: Vec<(TableDef, &str)> = table_definitions(&aws::config::StackNames::new("v"))
        .into_iter()
        .map(|d| {
            let key = match d.logical_id {
                "TransactionsTable" => "TransactionsTableName",
                "PayloadsTable" => "PayloadsTableName",
                "BreakerTable" => "BreakerTableName",
                _ => "AuditTableName",
            };
            (d, key)
        })
        .collect();
    if env.outputs.has_harness() {
        defs.push((
            testkit::provision::harness_table_definition("harness"),
            "HarnessTableName",
        ));
    }
    for (mut def, key) in defs {
        let Some(name) = env.outputs.get(key) else {
            out.fail(PHASE, def.logical_id, format!("no output {key}"));
            continue;
        };
        def.name = name.to_owned();
        let subject = format!("{} {name}", def.logical_id);
        match table_problems(env, &def).await {
            Ok((problems, summary)) if problems.is_empty() => out.pass(PHASE, subject, summary),
            Ok((problems, _)) => out.fail(PHASE, subject, problems.join("; ")),
            Err(e) => out.fail(PHASE, subject, e),
        }
    }
}

/// (problems, summary) of one table against its definition.
async fn table_problems(env: &Env<'_>, def: &TableDef) -> Result<(Vec<String>, String), String> {
    let d = env
        .ddb
        .describe_table()
        .table_name(&def.name)
        .send()
        .await
        .map_err(aws::errors::sdk_error("cannot be described"))?;
    let t = d.table().ok_or("DescribeTable returned no table")?;
    let keys = |k: &[aws_sdk_dynamodb::types::KeySchemaElement]| -> Vec<String> {
        k.iter()
            .map(|e| format!("{} {}", e.attribute_name(), e.key_type().as_str()))
            .collect()
    };
    let want_keys = |hash: &str, range: Option<&str>| -> Vec<String> {
        std::iter::once(format!("{hash} HASH"))
            .chain(range.map(|r| format!("{r} RANGE")))
            .collect()
    };
    let mut p = vec![];
    let mut summary = vec![];
    let got = keys(t.key_schema());
    let want = want_keys(def.hash_key, def.range_key);
    if got != want {
        p.push(format!("key {got:?}, the code uses {want:?}"));
    }
    summary.push(format!("key {}", want.join(", ")));
    for ix in &def.indexes {
        let found = t
            .global_secondary_indexes()
            .iter()
            .find(|g| g.index_name() == Some(ix.name));
        match found {
            None => p.push(format!(
                "no index {} ({})",
                ix.name,
                if ix.name == aws::config::FAILED_INDEX {
                    "`retryctl list --status FAILED` queries it: without it, only `--scan` lists FAILED transactions"
                } else {
                    "the reconciler queries it: stuck transactions would never be found"
                }
            )),
            Some(g) => {
                let got = keys(g.key_schema());
                let projection = g
                    .projection()
                    .and_then(|pr| pr.projection_type())
                    .map(|pt| pt.as_str().to_owned());
                let want = want_keys(ix.hash_key, ix.range_key);
                if got != want || projection.as_deref() != Some(ix.projection) {
                    p.push(format!(
                        "index {} is {got:?} {projection:?}, the code queries {want:?} {}",
                        ix.name, ix.projection
                    ));
                }
                summary.push(format!("index {} ({})", ix.name, ix.projection));
            }
        }
    }
    if let Some(view) = def.stream_view {
        let spec = t.stream_specification();
        let enabled = spec.is_some_and(|s| s.stream_enabled());
        let got = spec
            .and_then(|s| s.stream_view_type())
            .map(|v| v.as_str().to_owned());
        if !enabled || got.as_deref() != Some(view) {
            p.push(format!(
                "stream {} {got:?}, the audit writer needs {view}",
                if enabled { "on" } else { "off" }
            ));
        }
        summary.push(format!("stream {view}"));
    }
    if let Some(attr) = def.ttl_attribute {
        let ttl = env
            .ddb
            .describe_time_to_live()
            .table_name(&def.name)
            .send()
            .await
            .map_err(aws::errors::sdk_error("DescribeTimeToLive"))?;
        let d = ttl.time_to_live_description();
        let status = d
            .and_then(|d| d.time_to_live_status())
            .map(|s| s.as_str().to_owned())
            .unwrap_or_default();
        let got = d.and_then(|d| d.attribute_name());
        if !matches!(status.as_str(), "ENABLED" | "ENABLING") || got != Some(attr) {
            p.push(format!(
                "TTL {status} on {got:?}, the code writes {attr} (rows would be kept forever)"
            ));
        }
        summary.push(format!("TTL on {attr}"));
    }
    Ok((p, summary.join(", ")))
}

/// Every alarm of the template publishes to the alarm topic only (a template test
/// checks it): without a confirmed subscription, no alarm pages anybody.
async fn alarm_destination(env: &Env<'_>, out: &mut Checks) {
    let Some(topic) = env.outputs.get("AlarmTopicArn") else {
        out.skip(
            PHASE,
            "AlarmTopic",
            "not checked: no output AlarmTopicArn in the files given".to_owned(),
        );
        return;
    };
    let subject = format!("AlarmTopic {topic}");
    match env
        .sns
        .list_subscriptions_by_topic()
        .topic_arn(topic)
        .send()
        .await
    {
        Ok(o) => {
            let (confirmed, pending): (Vec<_>, Vec<_>) = o
                .subscriptions()
                .iter()
                .partition(|s| s.subscription_arn().is_some_and(|a| a.starts_with("arn:")));
            let names = |list: &[&aws_sdk_sns::types::Subscription]| {
                list.iter()
                    .map(|s| {
                        format!(
                            "{} {}",
                            s.protocol().unwrap_or("-"),
                            s.endpoint().unwrap_or("-")
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            if confirmed.is_empty() {
                out.fail(
                    PHASE,
                    subject,
                    format!(
                        "no confirmed subscription{}: every alarm publishes only here, so none pages anybody; set AlarmEmail (and confirm its e-mail) or subscribe another destination",
                        if pending.is_empty() {
                            String::new()
                        } else {
                            format!(" ({} pending confirmation: {})", pending.len(), names(&pending))
                        }
                    ),
                );
            } else {
                out.pass(PHASE, subject, format!("subscribed: {}", names(&confirmed)));
            }
        }
        Err(e) => out.fail(
            PHASE,
            subject,
            aws::errors::sdk_error("cannot be read (every alarm publishes to it)")(e),
        ),
    }
}

async fn schedule_group(env: &Env<'_>, out: &mut Checks) {
    let Some(name) = env.outputs.get("ScheduleGroupName") else {
        out.fail(PHASE, "ScheduleGroup", "no output ScheduleGroupName");
        return;
    };
    let subject = format!("ScheduleGroup {name}");
    match env.scheduler.get_schedule_group().name(name).send().await {
        Ok(g) => {
            let state = g.state().map(|s| s.as_str().to_owned());
            if matches!(state.as_deref(), None | Some("ACTIVE")) {
                out.pass(
                    PHASE,
                    subject,
                    state.as_deref().unwrap_or("exists").to_owned(),
                );
            } else {
                out.fail(
                    PHASE,
                    subject,
                    format!("state {state:?}: schedules cannot be created in it"),
                );
            }
        }
        Err(e) => out.fail(
            PHASE,
            subject,
            aws::errors::sdk_error(
                "cannot be read (the handlers create every retry schedule in it)",
            )(e),
        ),
    }
}

/// The scheduler role's trust policy, from `aws iam get-role` output: it trusts
/// `scheduler.amazonaws.com` to assume it, for this account and this schedule group
/// when it names any.
fn trust_policy(env: &Env<'_>, out: &mut Checks) {
    let role = env.outputs.get("SchedulerRoleArn").unwrap_or("?");
    let subject = format!("SchedulerRole {}", short(role));
    let Some(doc) = &env.settings.scheduler_role else {
        out.skip(
            PHASE,
            subject,
            "trust policy not checked: no --scheduler-role (`aws iam get-role` output; infra/verify-deploy.sh passes it in AWS). The local stack has no IAM role: moto enforces no IAM, and its scheduler emulator delivers without assuming one".to_owned(),
        );
        return;
    };
    let group = env.outputs.get("ScheduleGroupName").unwrap_or("");
    let account = role.split(':').nth(4).unwrap_or("");
    match trust_problems(doc, account, group) {
        Ok(()) => out.pass(
            PHASE,
            subject,
            "trusts scheduler.amazonaws.com (sts:AssumeRole) for this account and schedule group"
                .to_owned(),
        ),
        Err(e) => out.fail(PHASE, subject, e),
    }
}

fn strings(v: Option<&Value>) -> Vec<String> {
    match v {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|x| x.as_str().map(str::to_owned))
            .collect(),
        _ => vec![],
    }
}

/// Whether a `get-role` document lets EventBridge Scheduler assume the role for the
/// group (`aws:SourceArn`, when present, must name it) and the account
/// (`aws:SourceAccount`, when present).
pub fn trust_problems(get_role: &Value, account: &str, group: &str) -> Result<(), String> {
    let doc = get_role
        .pointer("/Role/AssumeRolePolicyDocument")
        .ok_or("no Role.AssumeRolePolicyDocument (expected `aws iam get-role` output)")?;
    // The CLI decodes the document; the API returns it URL-encoded JSON text.
    let doc: Value = match doc {
        Value::String(s) => {
            serde_json::from_str(s).map_err(|e| format!("the trust policy is not JSON: {e}"))?
        }
        other => other.clone(),
    };
    let statements = match doc.get("Statement") {
        Some(Value::Array(a)) => a.clone(),
        Some(one) => vec![one.clone()],
        None => vec![],
    };
    let allows = statements.iter().find(|s| {
        s.get("Effect").and_then(Value::as_str) == Some("Allow")
            && strings(s.pointer("/Principal/Service"))
                .contains(&"scheduler.amazonaws.com".to_owned())
            && strings(s.get("Action")).contains(&"sts:AssumeRole".to_owned())
    });
    let Some(st) = allows else {
        return Err("no statement allows scheduler.amazonaws.com to sts:AssumeRole: every schedule's delivery fails and lands in the scheduler DLQ".to_owned());
    };
    let cond = st.get("Condition").cloned().unwrap_or(Value::Null);
    let source_accounts: Vec<String> = ["StringEquals", "StringLike"]
        .iter()
        .flat_map(|op| strings(cond.pointer(&format!("/{op}/aws:SourceAccount"))))
        .collect();
    if !source_accounts.is_empty() && !source_accounts.iter().any(|a| a == account) {
        return Err(format!(
            "aws:SourceAccount {source_accounts:?} does not include the account {account}"
        ));
    }
    let arns: Vec<String> = ["ArnLike", "ArnEquals", "StringLike", "StringEquals"]
        .iter()
        .flat_map(|op| strings(cond.pointer(&format!("/{op}/aws:SourceArn"))))
        .collect();
    if !arns.is_empty()
        && !arns.iter().any(|a| {
            a.contains(&format!("schedule-group/{group}"))
                || a.contains(&format!("schedule/{group}/"))
        })
    {
        return Err(format!(
            "aws:SourceArn {arns:?} names no ARN of the schedule group {group}: the scheduler cannot assume the role for its schedules"
        ));
    }
    Ok(())
}

/// With ServicePrincipalArns set, the request and response queues deny reading and
/// answering to every principal not listed: the harness role must be listed.
async fn harness_access(env: &Env<'_>, out: &mut Checks) {
    let Some(role) = env.outputs.get("HarnessRoleArn") else {
        return;
    };
    let main = env.outputs.stack_of("RequestQueueArn").unwrap_or("?");
    if let Some(named) = env.outputs.get("MainStackName") {
        if named != main {
            out.fail(
                PHASE,
                format!(
                    "harness stack {}",
                    env.outputs.stack_of("MainStackName").unwrap_or("?")
                ),
                format!("serves the main stack {named}, but the outputs given are {main}'s"),
            );
            return;
        }
    }
    for (id, url_key, action) in [
        ("RequestQueue", "RequestQueueUrl", "sqs:ReceiveMessage"),
        ("ResponseQueue", "ResponseQueueUrl", "sqs:SendMessage"),
    ] {
        let Some(url) = env.outputs.get(url_key) else {
            continue;
        };
        let subject = format!("{id} {} policy", short(url));
        let policy = match attributes(env, url).await {
            Ok(a) => a.get(&QueueAttributeName::Policy).cloned(),
            Err(e) => {
                out.fail(PHASE, subject, e);
                continue;
            }
        };
        match denied_to(policy.as_deref(), action, role) {
            Some(listed) => out.fail(
                PHASE,
                subject,
                format!(
                    "denies {action} to the harness role {role}: ServicePrincipalArns lists {listed:?}; add the harness role to it and deploy the main stack again"
                ),
            ),
            None => out.pass(
                PHASE,
                subject,
                if policy.is_some_and(|p| p.contains("aws:PrincipalArn")) {
                    format!("lets the harness role {action} (ServicePrincipalArns lists it)")
                } else {
                    format!("no principal restriction on {action} (ServicePrincipalArns empty: any principal of the account with IAM rights may)")
                },
            ),
        }
    }
}

/// `Some(listed principals)` when a `Deny` of `action` with an `ArnNotEquals
/// aws:PrincipalArn` condition does not list `role`.
fn denied_to(policy: Option<&str>, action: &str, role: &str) -> Option<Vec<String>> {
    let doc: Value = serde_json::from_str(policy?).ok()?;
    let statements = match doc.get("Statement") {
        Some(Value::Array(a)) => a.clone(),
        Some(one) => vec![one.clone()],
        None => vec![],
    };
    statements.iter().find_map(|s| {
        let deny = s.get("Effect").and_then(Value::as_str) == Some("Deny");
        let covers = strings(s.get("Action")).iter().any(|a| a == action);
        let listed = strings(s.pointer("/Condition/ArnNotEquals/aws:PrincipalArn"));
        (deny && covers && !listed.is_empty() && !listed.iter().any(|l| l == role))
            .then_some(listed)
    })
}

/// Messages held by a queue (visible, in flight, delayed).
pub async fn depth(env: &Env<'_>, url: &str) -> Result<u64, String> {
    queue_depth(&env.sqs, url).await
}

/// Messages held by the queue at `url` (visible, in flight, delayed).
pub async fn queue_depth(sqs: &aws_sdk_sqs::Client, url: &str) -> Result<u64, String> {
    let attrs = queue_attributes(sqs, url).await?;
    Ok([
        QueueAttributeName::ApproximateNumberOfMessages,
        QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
        QueueAttributeName::ApproximateNumberOfMessagesDelayed,
    ]
    .iter()
    .filter_map(|k| attrs.get(k).and_then(|v| v.parse::<u64>().ok()))
    .sum())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    fn role(doc: Value) -> Value {
        json!({"Role": {"AssumeRolePolicyDocument": doc}})
    }

    #[test]
    fn the_trust_policy_must_let_the_scheduler_assume_the_role_for_the_group() {
        let good = json!({"Statement": [{"Effect": "Allow", "Principal": {"Service": "scheduler.amazonaws.com"},
            "Action": "sts:AssumeRole", "Condition": {"StringEquals": {"aws:SourceAccount": "111"},
            "ArnLike": {"aws:SourceArn": ["arn:aws:scheduler:us-east-1:111:schedule-group/g", "arn:aws:scheduler:us-east-1:111:schedule/g/*"]}}}]});
        assert_eq!(trust_problems(&role(good.clone()), "111", "g"), Ok(()));
        assert!(trust_problems(&role(good.clone()), "222", "g")
            .unwrap_err()
            .contains("aws:SourceAccount"));
        assert!(trust_problems(&role(good), "111", "other")
            .unwrap_err()
            .contains("schedule group other"));
        let lambda = json!({"Statement": {"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}});
        assert!(trust_problems(&role(lambda), "111", "g")
            .unwrap_err()
            .contains("scheduler.amazonaws.com"));
        let encoded = json!({"Role": {"AssumeRolePolicyDocument":
            "{\"Statement\":[{\"Effect\":\"Allow\",\"Principal\":{\"Service\":\"scheduler.amazonaws.com\"},\"Action\":\"sts:AssumeRole\"}]}"}});
        assert_eq!(trust_problems(&encoded, "111", "g"), Ok(()));
        assert!(trust_problems(&json!({}), "111", "g").is_err());
    }

    #[test]
    fn a_restriction_that_does_not_list_the_harness_denies_it() {
        let policy = json!({"Statement": [
            {"Effect": "Deny", "Principal": "*", "Action": "sqs:SendMessage",
             "Condition": {"ArnNotEquals": {"aws:PrincipalArn": ["arn:aws:iam::1:role/svc"]}}}]})
        .to_string();
        assert_eq!(
            denied_to(Some(&policy), "sqs:SendMessage", "arn:aws:iam::1:role/h"),
            Some(vec!["arn:aws:iam::1:role/svc".to_owned()])
        );
        assert_eq!(
            denied_to(Some(&policy), "sqs:SendMessage", "arn:aws:iam::1:role/svc"),
            None
        );
        assert_eq!(
            denied_to(Some(&policy), "sqs:ReceiveMessage", "arn:aws:iam::1:role/h"),
            None
        );
        assert_eq!(denied_to(None, "sqs:SendMessage", "x"), None);
    }
}
