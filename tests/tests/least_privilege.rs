//! Least privilege, proven: every AWS call each function makes is allowed by its role in
//! `template.yaml`, and every grant is used by some call (or carries a reason). moto
//! enforces no IAM, so the functions' real code (each built by its `wiring`) runs against
//! its own moto server through the recording proxy (`testkit::proxy`), each function
//! signing with its own access key id; what AWS itself does with a role (event source
//! mappings, Scheduler's delivery, Lambda's log writes) is done the same way under that
//! role's key. Each recorded call becomes the authorization requests AWS would make
//! (`deferred_retry_tests::iam`), evaluated against the role; then the reverse. The
//! scenario, the operator roles and the harness are described on
//! `every_call_is_allowed_and_every_grant_is_used`; the roles themselves:
//! `docs/deploy.md#least-privilege-as-deployed`. Run alone:
//! `cargo test -p deferred-retry-tests --test least_privilege`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use aws::config::vars;
use aws::config::{
    ReconcilerConfig, ResponseHandlerConfig, RetryHandlerConfig, StackNames, StarterConfig,
};
use aws_sdk_sqs::types::Message;
use deferred_retry_tests::cfn::{self, HARNESS_TEMPLATE_PATH, TEMPLATE_PATH};
use deferred_retry_tests::iam::{Decision, Physical, Principal, Request, Stack};
use domain::exec::StartPorts;
use domain::machine::Counter;
use domain::machine::ReconcileKey;
use domain::ports::{BreakerReads, Clock, Records, ScheduleCreator, SystemClock};
use domain::{
    Attempt, MaxAttempts, Payload, ScheduleName, Status, Timestamp, TransactionId,
    TransactionRecord,
};
use runtime::settings::Settings;
use runtime::{Metrics, SqsBatchResponse, SqsEvent};
use serde_yaml::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::Duration;
use testkit::moto::{MotoServer, LOCAL_ACCOUNT, LOCAL_REGION};
use testkit::provision::{provision, Provisioned};
use testkit::proxy::{sdk_config_as, Call, Proxy};

const FUNCTIONS: [&str; 6] = [
    "response-handler",
    "retry-handler",
    "reconciler",
    "audit-writer",
    "starter",
    "harness",
];
/// Access keys of the principals that are not functions.
const SCHEDULER_ROLE: &str = "scheduler-role";
/// `retryctl` under the stack's operator roles (read-only, acting).
const OPERATOR_READ: &str = "operator-read";
const OPERATOR_ACT: &str = "operator-act";
const OPERATOR: &str = "operator";
const EXTERNAL: &str = "external-service";
/// The test's own set-up (provisioning, set-up, inspection): not evaluated.
const SETUP: &str = "setup";
/// The main stack's name in the test; the harness stack's.
const MAIN: &str = "lp";
const HARNESS_STACK: &str = "lp-harness-stack";

fn id(s: &str) -> TransactionId {
    TransactionId::parse(s).unwrap()
}

fn template_text() -> String {
    std::fs::read_to_string(TEMPLATE_PATH).unwrap()
}

fn harness_template_text() -> String {
    std::fs::read_to_string(HARNESS_TEMPLATE_PATH).unwrap()
}

/// The harness role: named `<MainStackName>-harness` by its template.
fn harness_role_arn() -> String {
    outside_arn(&format!("{MAIN}-harness"))
}

/// The ARN a principal outside the template gets in the test.
fn outside_arn(name: &str) -> String {
    format!("arn:aws:iam::{LOCAL_ACCOUNT}:role/{name}")
}

/// Physical names for every resource of a template, derived from the stack name.
fn derived(template: &Value, stack: &str) -> Physical {
    let mut ph = Physical::new(LOCAL_ACCOUNT, LOCAL_REGION, stack);
    let arn = |service: &str, rest: &str| {
        format!("arn:aws:{service}:{LOCAL_REGION}:{LOCAL_ACCOUNT}:{rest}")
    };
    for (lid, r) in cfn::resources(template) {
        let ty = cfn::get(r, "Type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let name = format!("{stack}-{lid}");
        match ty {
            "AWS::IAM::Role" => {
                let a = ph.role_arn(&lid);
                ph.set_ref(&lid, &name).set_att(&lid, "Arn", a);
            }
            "AWS::Logs::LogGroup" => {
                let group = format!("/aws/lambda/{stack}/{lid}");
                ph.set_ref(&lid, &group).set_att(
                    &lid,
                    "Arn",
                    arn("logs", &format!("log-group:{group}:*")),
                );
            }
            "AWS::KMS::Key" => {
                ph.set_ref(&lid, &name)
                    .set_att(&lid, "Arn", arn("kms", &format!("key/{name}")));
            }
            "AWS::SNS::Topic" => {
                ph.set_ref(&lid, arn("sns", &name))
                    .set_att(&lid, "TopicName", &name);
            }
            "AWS::CloudWatch::Alarm" => {
                ph.set_ref(&lid, &name).set_att(
                    &lid,
                    "Arn",
                    arn("cloudwatch", &format!("alarm:{name}")),
                );
            }
            "AWS::Serverless::Function" => {
                ph.set_ref(&lid, &name).set_att(
                    &lid,
                    "Arn",
                    arn("lambda", &format!("function:{name}")),
                );
            }
            _ => {
                ph.set_ref(&lid, &name);
            }
        }
    }
    ph
}

/// Physical names for every resource of the main template: the provisioned ones where
/// the local stack has them, a name derived from the stack name otherwise.
fn physical(template: &Value, p: &Provisioned) -> Physical {
    let mut ph = derived(template, &p.names.prefix);
    let arn = |service: &str, rest: &str| {
        format!("arn:aws:{service}:{LOCAL_REGION}:{LOCAL_ACCOUNT}:{rest}")
    };
    let n = &p.names;
    for (lid, table) in [
        ("TransactionsTable", &n.transactions_table),
        ("PayloadsTable", &n.payloads_table),
        ("AuditTable", &n.audit_table),
        ("BreakerTable", &n.breaker_table),
    ] {
        ph.set_ref(lid, table)
            .set_att(lid, "Arn", arn("dynamodb", &format!("table/{table}")));
    }
    ph.set_att("TransactionsTable", "StreamArn", &p.transactions_stream_arn);
    for (lid, q) in [
        ("RequestQueue", &p.request),
        ("RequestDLQ", &p.request_dlq),
        ("ResponseQueue", &p.response),
        ("ResponseDLQ", &p.response_dlq),
        ("RetryQueue", &p.retry),
        ("RetryDLQ", &p.retry_dlq),
        ("SchedulerDLQ", &p.scheduler_dlq),
        ("AuditDLQ", &p.audit_dlq),
        ("IntakeQueue", &p.intake),
        ("IntakeDLQ", &p.intake_dlq),
    ] {
        ph.set_ref(lid, &q.url)
            .set_att(lid, "Arn", &q.arn)
            .set_att(lid, "QueueName", &q.name);
    }
    // Outbox mode's publisher DLQ (no local queue: named after the stack).
    let publisher_dlq = format!("{}-publisher-dlq", n.prefix);
    ph.set_ref(
        "PublisherDLQ",
        format!("https://sqs.{LOCAL_REGION}.amazonaws.com/{LOCAL_ACCOUNT}/{publisher_dlq}"),
    )
    .set_att("PublisherDLQ", "Arn", arn("sqs", &publisher_dlq))
    .set_att("PublisherDLQ", "QueueName", &publisher_dlq);
    ph.set_ref("ScheduleGroup", &n.schedule_group).set_att(
        "ScheduleGroup",
        "Arn",
        &p.schedule_group_arn,
    );
    ph.parameters
        .insert("OperatorPrincipalArns".into(), outside_arn(OPERATOR));
    if cfn::path(template, &["Parameters", "ServicePrincipalArns"]).is_some() {
        // The external service and the staging harness, by its fixed role name.
        ph.parameters.insert(
            "ServicePrincipalArns".into(),
            format!("{},{}", outside_arn(EXTERNAL), harness_role_arn()),
        );
    }
    ph
}

/// Physical names of the harness stack: its table, its named role, the main stack's
/// exports to import.
fn harness_physical(template: &Value, main: &Stack, table: &str) -> Physical {
    let mut ph = derived(template, HARNESS_STACK);
    ph.parameters.insert("MainStackName".into(), MAIN.into());
    ph.set_att("HarnessRole", "Arn", harness_role_arn());
    ph.set_ref("HarnessTable", table).set_att(
        "HarnessTable",
        "Arn",
        format!("arn:aws:dynamodb:{LOCAL_REGION}:{LOCAL_ACCOUNT}:table/{table}"),
    );
    ph.imports = main.exports.clone();
    ph
}

/// The main stack and the harness stack, joined.
fn both_stacks(main_template: &Value, p: &Provisioned, harness_table: &str) -> Stack {
    let ph = physical(main_template, p);
    both_stacks_with(main_template, ph, harness_table)
}

/// The same, deployed with one `samconfig.toml` environment's parameters: its values
/// replace the test's, and no operator principal of the test's own is listed (the
/// environment's `OperatorPrincipalArns`, usually none). Where the environment lists
/// the external service's principals (`ServicePrincipalArns`, placeholders in a
/// template environment), the external service and the harness of this test stand
/// for them, so the queues' Deny statements are evaluated with a list of that shape.
fn env_stack(
    main_template: &Value,
    p: &Provisioned,
    harness_table: &str,
    params: &BTreeMap<String, String>,
) -> Stack {
    let mut ph = physical(main_template, p);
    let service = ph.parameters.remove("ServicePrincipalArns");
    ph.parameters.remove("OperatorPrincipalArns");
    for (k, v) in params {
        let v = match (k.as_str(), &service) {
            ("ServicePrincipalArns", Some(ours)) if !v.is_empty() => ours.clone(),
            _ => v.clone(),
        };
        ph.parameters.insert(k.clone(), v);
    }
    both_stacks_with(main_template, ph, harness_table)
}

fn both_stacks_with(main_template: &Value, ph: Physical, harness_table: &str) -> Stack {
    let mut stack = Stack::from_template(main_template, &template_text(), ph).unwrap();
    let h = cfn::harness_template();
    let harness = Stack::from_template(
        &h,
        &harness_template_text(),
        harness_physical(&h, &stack, harness_table),
    )
    .unwrap();
    stack.merge(harness);
    stack
}

/// Who signed with each access key.
fn principal_of(stack: &Stack, caller: &str) -> Option<(String, Principal)> {
    if let Some(role) = stack.function_roles.get(caller) {
        return Some((caller.to_owned(), Principal::Arn(role.clone())));
    }
    match caller {
        SCHEDULER_ROLE => Some((caller.to_owned(), stack.role("SchedulerRole"))),
        OPERATOR_READ => Some((caller.to_owned(), stack.role("OperatorReadRole"))),
        OPERATOR_ACT => Some((caller.to_owned(), stack.role("OperatorActRole"))),
        OPERATOR | EXTERNAL => Some((caller.to_owned(), Principal::Arn(outside_arn(caller)))),
        _ => None,
    }
}

/// The result of checking a set of requests against the template.
#[derive(Debug, Default)]
struct Verdict {
    /// (who, action, resource) checked, distinct.
    checked: BTreeSet<(String, String, String)>,
    problems: Vec<String>,
}

/// The problems of `check` that `keep` selects.
fn problems_where(
    stack: &Stack,
    requests: &[(String, Request)],
    keep: impl Fn(&str) -> bool,
) -> Vec<String> {
    check(stack, requests)
        .problems
        .into_iter()
        .filter(|p| keep(p))
        .collect()
}

/// `text` without `grant`, which must be in it.
fn without(text: &str, grant: &str) -> String {
    assert!(
        text.contains(grant),
        "the grant this test removes has changed: {grant}"
    );
    text.replace(grant, "")
}

/// Every request of every principal is allowed (principals outside the template:
/// not denied by a resource policy); every grant is used or has a reason.
fn check(stack: &Stack, requests: &[(String, Request)]) -> Verdict {
    let mut v = Verdict::default();
    for (who, r) in requests {
        v.checked
            .insert((who.clone(), r.action.clone(), r.resource.clone()));
        let outside = matches!(who.as_str(), OPERATOR | EXTERNAL);
        match stack.evaluate(r).unwrap() {
            Decision::Allowed(_) => {}
            Decision::NotAllowed if outside => {}
            Decision::NotAllowed => v.problems.push(format!(
                "{who}: {} on {} is not allowed by {}",
                r.action,
                r.resource,
                stack
                    .role_ids
                    .get(&r.principal.to_string())
                    .map(String::as_str)
                    .unwrap_or("any policy")
            )),
            Decision::Denied(by) => v.problems.push(format!(
                "{who}: {} on {} is denied by {by}",
                r.action, r.resource
            )),
        }
    }
    let mut principals: BTreeSet<Principal> = stack
        .function_roles
        .values()
        .map(|r| Principal::Arn(r.clone()))
        .collect();
    principals.insert(stack.role("SchedulerRole"));
    principals.insert(stack.role("OperatorReadRole"));
    principals.insert(stack.role("OperatorActRole"));
    principals.extend(
        stack
            .resource_policy_principals()
            .into_iter()
            .map(Principal::Arn),
    );
    for p in principals {
        for (grant, st) in stack.grants(&p) {
            let used = requests
                .iter()
                .any(|(_, r)| Stack::covers(&grant, st, r).unwrap());
            if used || stack.reason(&st.holder, &grant.action).is_some() {
                continue;
            }
            v.problems.push(format!(
                "unused grant: {} may {} on {} ({}) but no call needs it; remove it or write `# iam:unused {} <reason>` in {}",
                p, grant.action, grant.resource, grant.statement, grant.action, st.holder
            ));
        }
    }
    let mut seen = BTreeSet::new();
    v.problems.retain(|p| seen.insert(p.clone()));
    v
}

/// The requests of the recorded calls, plus Lambda's log writes and the scheduler
/// assuming its role for each delivery.
fn requests_of(stack: &Stack, calls: &[Call], schedule_group_arn: &str) -> Vec<(String, Request)> {
    let mut out = Vec::new();
    let mut delivered = false;
    for c in calls {
        let Some((who, p)) = principal_of(stack, &c.caller) else {
            continue;
        };
        delivered |= who == SCHEDULER_ROLE;
        for r in stack.requests_for(&p, c) {
            out.push((who.clone(), r));
        }
    }
    for f in FUNCTIONS {
        out.extend(stack.log_requests(f).into_iter().map(|r| (f.to_owned(), r)));
    }
    out.extend(
        stack
            .alarm_requests()
            .into_iter()
            .map(|r| ("cloudwatch.amazonaws.com".to_owned(), r)),
    );
    if delivered {
        let scheduler = Principal::Service("scheduler.amazonaws.com".into());
        let role = stack.physical.role_arn("SchedulerRole");
        let mut r = stack.request(&scheduler, "sts:AssumeRole", &role);
        r.context
            .insert("aws:SourceAccount".into(), vec![LOCAL_ACCOUNT.into()]);
        r.context
            .insert("aws:SourceArn".into(), vec![schedule_group_arn.to_owned()]);
        out.push(("scheduler.amazonaws.com".to_owned(), r));
    }
    out
}

// ---------------------------------------------------------------------------------
// What AWS does around the functions, under their roles
// ---------------------------------------------------------------------------------

/// [`event_source`] of `queue` for `handler`, whose `handle_event` counts into
/// `metrics`.
macro_rules! round {
    ($sqs:expr, $queue:expr, $handler:expr, $metrics:expr) => {
        event_source(&$sqs, &$queue.url, &$queue.arn, |e| async move {
            $handler.handle_event(e, $metrics).await.unwrap()
        })
    };
}

/// The intake queue's event source mapping, once, under the starter's role: how many
/// messages it handed the starter, and the starter's metrics.
async fn intake(
    sdk: &aws_config::SdkConfig,
    starter: &starter::wiring::AwsStarter,
    p: &Provisioned,
) -> (usize, Metrics) {
    let metrics = Metrics::new("DeferredRetry", "starter");
    let m = &metrics;
    let n = round!(aws::clients::sqs(sdk), p.intake, starter, m).await;
    (n, metrics)
}

/// Lambda's SQS event source mapping, once: reads the queue's attributes, receives
/// until the queue is empty, invokes the function with each batch, deletes what it
/// did not report as failed.
async fn event_source<F, Fut>(sqs: &aws_sdk_sqs::Client, url: &str, arn: &str, invoke: F) -> usize
where
    F: Fn(SqsEvent) -> Fut,
    Fut: Future<Output = SqsBatchResponse>,
{
    sqs.get_queue_attributes()
        .queue_url(url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::VisibilityTimeout)
        .send()
        .await
        .unwrap();
    let mut records = 0;
    loop {
        let got = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .wait_time_seconds(0)
            .send()
            .await
            .unwrap();
        let messages = got.messages().to_vec();
        if messages.is_empty() {
            return records;
        }
        records += messages.len();
        let event = sandbox::local::esm::event_for(&messages, arn, LOCAL_REGION).unwrap();
        let response = invoke(event).await;
        let failed: BTreeSet<String> = response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.clone())
            .collect();
        let handled: Vec<&Message> = messages
            .iter()
            .filter(|m| m.message_id().is_some_and(|i| !failed.contains(i)))
            .collect();
        let entries = sandbox::local::esm::delete_entries(&handled);
        if !entries.is_empty() {
            sqs.delete_message_batch()
                .queue_url(url)
                .set_entries(Some(entries))
                .send()
                .await
                .unwrap();
        }
        assert!(failed.is_empty(), "batch item failures: {failed:?}");
    }
}

/// EventBridge Scheduler firing one schedule: the service reads it, then delivers
/// its input to the target with the schedule's role.
async fn fire(
    harness: &aws_sdk_scheduler::Client,
    as_role: &aws_sdk_sqs::Client,
    p: &Provisioned,
    name: &str,
) {
    let s = harness
        .get_schedule()
        .group_name(&p.names.schedule_group)
        .name(name)
        .send()
        .await
        .unwrap();
    let target = s.target().unwrap();
    assert_eq!(target.arn(), p.retry.arn);
    as_role
        .send_message()
        .queue_url(&p.retry.url)
        .message_body(target.input().unwrap())
        .send()
        .await
        .unwrap();
}

/// `r` waiting in SCHEDULING for attempt 2 at `fire_at`, its index entry (8 shards)
/// due from `index_at`: a record a crash left before its schedule was created.
fn scheduling(
    mut r: TransactionRecord,
    fire_at: Timestamp,
    index_at: Timestamp,
) -> TransactionRecord {
    let next = Attempt::new(2).unwrap();
    r.status = Status::Scheduling;
    r.next_attempt = Some(next);
    r.next_fire_at = Some(fire_at);
    r.schedule_name = Some(ScheduleName::for_retry(&r.transaction_id, next));
    r.reconcile = ReconcileKey::derive(
        Status::Scheduling,
        &r.transaction_id,
        8,
        r.updated_at,
        Some(index_at),
    );
    r
}

/// Writes `r` as it is, past the store's conditions.
async fn put_raw(sdk: &aws_config::SdkConfig, table: &str, r: &TransactionRecord) {
    aws::clients::dynamodb(sdk)
        .put_item()
        .table_name(table)
        .set_item(Some(aws::item::record_to_item(r)))
        .send()
        .await
        .unwrap();
}

async fn send(sqs: &aws_sdk_sqs::Client, url: &str, body: &str) {
    sqs.send_message()
        .queue_url(url)
        .message_body(body)
        .send()
        .await
        .unwrap();
}

/// A function's environment in the test: the template's variables for this stack,
/// a 1 s reconcile threshold, 50 requests per second, then `overrides`.
fn env_with(p: &Provisioned, f: &str, overrides: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut m: BTreeMap<String, String> = p
        .env_for(f)
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    let common = [
        (vars::RECONCILE_THRESHOLD_SECONDS.name, "1"),
        (vars::MAX_REQUESTS_PER_SECOND.name, "50"),
    ];
    for (k, v) in common.iter().chain(overrides) {
        m.insert((*k).into(), (*v).into());
    }
    m
}

fn env_lookup(map: &BTreeMap<String, String>) -> impl Fn(&str) -> Option<String> + '_ {
    move |k| map.get(k).cloned()
}

/// moto behind the recording proxy.
struct Recording {
    moto: MotoServer,
    proxy: Proxy,
}

impl Recording {
    /// Starts moto and the proxy, and provisions the main stack as the setup identity:
    /// the recording, the setup identity's SDK configuration, the stack.
    async fn start() -> (Self, aws_config::SdkConfig, Provisioned) {
        let moto = MotoServer::launch(MotoServer::PROGRAM)
            .await
            .expect("moto_server (. scripts/tools.sh)");
        let proxy = Proxy::start(&moto.endpoint_url()).await.unwrap();
        let setup_sdk = sdk_config_as(&proxy.endpoint, SETUP).await;
        let p = provision(&setup_sdk, &StackNames::new(MAIN)).await.unwrap();
        (Self { moto, proxy }, setup_sdk, p)
    }

    /// The calls recorded, once moto is stopped.
    async fn stop(self) -> Vec<Call> {
        let calls = self.proxy.calls();
        drop(self.proxy);
        self.moto.stop().await;
        calls
    }
}

/// Runs the scenario; returns the recorded calls and the provisioned stack.
async fn scenario() -> (Vec<Call>, Provisioned, Stack) {
    let (recording, setup_sdk, p) = Recording::start().await;
    let endpoint = recording.proxy.endpoint.clone();
    let names = StackNames::new(MAIN);
    let harness_table = format!("{MAIN}-harness-table");
    testkit::provision::create_table(
        &aws::clients::dynamodb(&setup_sdk),
        &testkit::provision::harness_table_definition(&harness_table),
    )
    .await
    .unwrap();
    let template = cfn::template();
    let stack = both_stacks(&template, &p, &harness_table);

    // Each function's environment: the template's variables for this stack, short
    // backoff and threshold, and the scheduler role's ARN as the template names it.
    let env_of = |f: &str| -> BTreeMap<String, String> {
        let mut m = env_with(
            &p,
            f,
            &[
                (vars::BACKOFF_BASE_SECONDS.name, "1"),
                (vars::BACKOFF_CAP_SECONDS.name, "1"),
                (vars::BACKOFF_JITTER.name, "0"),
                // One deadline opens the circuit breaker for 3 s; its item is read
                // again after 1 s.
                (vars::BREAKER_DEADLINE_BURST.name, "1"),
                (vars::BREAKER_COOLDOWN_SECONDS.name, "3"),
                (vars::BREAKER_REFRESH_SECONDS.name, "1"),
            ],
        );
        if m.contains_key(vars::SCHEDULER_ROLE_ARN.name) {
            m.insert(
                vars::SCHEDULER_ROLE_ARN.name.into(),
                stack.physical.role_arn("SchedulerRole"),
            );
        }
        m
    };
    let sdk_of = |key: &'static str| sdk_config_as(&endpoint, key);
    let response_sdk = sdk_of("response-handler").await;
    let retry_sdk = sdk_of("retry-handler").await;
    let reconciler_sdk = sdk_of("reconciler").await;
    let audit_sdk = sdk_of("audit-writer").await;
    let starter_sdk = sdk_of("starter").await;
    let harness_sdk = sdk_of("harness").await;
    let response = response_handler::wiring::response_handler(
        &response_sdk,
        &ResponseHandlerConfig::from_lookup(&env_lookup(&env_of("response-handler"))).unwrap(),
    );
    let retry = retry_handler::wiring::retry_handler(
        &retry_sdk,
        &RetryHandlerConfig::from_lookup(&env_lookup(&env_of("retry-handler"))).unwrap(),
    )
    .unwrap();
    let reconciler = reconciler::wiring::reconciler(
        &reconciler_sdk,
        &ReconcilerConfig::from_lookup(&env_lookup(&env_of("reconciler"))).unwrap(),
    );
    // The staging harness as its template configures it, answering at once.
    let harness_env = BTreeMap::from([
        ("HARNESS_TABLE".to_owned(), harness_table.clone()),
        ("RESPONSE_QUEUE_URL".to_owned(), p.response.url.clone()),
        ("REQUEST_DLQ_URL".to_owned(), p.request_dlq.url.clone()),
    ]);
    let harness = harness::Harness::new(
        &harness_sdk,
        harness::HarnessConfig::from_lookup(&env_lookup(&harness_env)).unwrap(),
    );
    let harness_sqs = aws::clients::sqs(&harness_sdk);
    let setup_sqs = aws::clients::sqs(&setup_sdk);
    let setup_scheduler = aws::clients::scheduler(&setup_sdk);
    let response_sqs = aws::clients::sqs(&response_sdk);
    let retry_sqs = aws::clients::sqs(&retry_sdk);
    let scheduler_sqs = aws::clients::sqs(&sdk_of(SCHEDULER_ROLE).await);
    // An operator's retry events (replay) go out under the stack's acting role.
    let operator_sqs = aws::clients::sqs(&sdk_of(OPERATOR_ACT).await);
    let external_sqs = aws::clients::sqs(&sdk_of(EXTERNAL).await);
    let store = aws::dynamo::DynamoStore::new(
        aws::clients::dynamodb(&setup_sdk),
        &names.transactions_table,
    )
    .with_payloads_table(&names.payloads_table);

    // Transactions start through the library (the starting service's own role).
    let requests = aws::sqs::SqsRequestPublisher::new(setup_sqs.clone(), &p.request.url);
    let ports = StartPorts {
        store: &store,
        requests: &requests,
    };
    // Each payload carries the harness's script: its answer to attempt 1.
    let payload = |tx: &str, answer: &str| {
        Payload::from_json(&format!(
            r#"{{"order":"{tx}","harness":{{"answers":["{answer}"]}}}}"#
        ))
        .unwrap()
    };
    for (tx, max, answer) in [
        ("TX-A", 3, "CANCELLED"),
        ("TX-B", 3, "SUCCESS"),
        ("TX-C", 1, "CANCELLED"),
        // Ends FAILED like TX-C: the runbooks' `replay <id>` reopens it.
        ("TX-R", 1, "CANCELLED"),
        ("TX-D", 3, "CANCELLED"),
        ("TX-E", 3, "CANCELLED"),
    ] {
        let ctx = Settings::default().context(SystemClock.now());
        runtime::ops::start_transaction(
            &ports,
            id(tx),
            payload(tx, answer),
            MaxAttempts::new(max).unwrap(),
            ctx.rules.answer_timeout,
            &ctx,
        )
        .await
        .unwrap();
    }
    // TX-D's schedule already exists (a crashed earlier run created it): 409.
    let spec = domain::decide::ScheduleSpec {
        name: ScheduleName::for_retry(&id("TX-D"), Attempt::new(2).unwrap()),
        fire_at: SystemClock.now().plus_millis(3_600_000),
        event: domain::RetryEvent {
            transaction_id: id("TX-D"),
            origin: domain::Origin::RetryScheduler,
            attempt: Attempt::new(2).unwrap(),
            round: None,
        },
    };
    let settings = ResponseHandlerConfig::from_lookup(&env_lookup(&env_of("response-handler")))
        .unwrap()
        .scheduler;
    ScheduleCreator::create(
        &aws::scheduler::EventBridgeScheduler::new(setup_scheduler.clone(), settings),
        &spec,
    )
    .await
    .unwrap();

    // The harness reads the requests (and one it cannot read: to the request DLQ)
    // and answers by each payload's script; the external service answers for an
    // unknown transaction and malformed.
    send(
        &setup_sqs,
        &p.request.url,
        r#"{"transaction_id":"TX-Z","attempt":"one"}"#,
    )
    .await;
    let harness_metrics = Metrics::new("DeferredRetryHarness", "harness");
    let (harness, harness_metrics) = (&harness, &harness_metrics);
    let harness_round = || round!(harness_sqs, p.request, harness, harness_metrics);
    assert_eq!(harness_round().await, 7);
    let answer = |tx: &str, n: u32, outcome: &str| {
        format!(
            r#"{{"transaction_id":"{tx}","attempt":{n},"outcome":"{outcome}","reason":"NOT_AVAILABLE"}}"#
        )
    };
    for body in [
        answer("TX-UNKNOWN", 1, "SUCCESS"),
        r#"{"transaction_id":"TX-A","attempt":"two"}"#.to_owned(),
    ] {
        send(&external_sqs, &p.response.url, &body).await;
    }
    let metrics = Metrics::new("DeferredRetry", "response-handler");
    let (response, metrics) = (&response, &metrics);
    let response_round = || round!(response_sqs, p.response, response, metrics);
    // An answer from `sqs` on the response queue, then the response handler's round.
    let answered = async |sqs: &aws_sdk_sqs::Client, tx: &str, n: u32, outcome: &str| {
        send(sqs, &p.response.url, &answer(tx, n, outcome)).await;
        response_round().await
    };
    let n = response_round().await;
    assert_eq!(n, 8);
    assert_eq!(
        metrics.count(runtime::metrics::names::SCHEDULE_CONFLICTS),
        1,
        "{metrics:?}"
    );
    assert_eq!(store_status(&store, "TX-A").await, Status::Scheduled);
    assert_eq!(store_status(&store, "TX-B").await, Status::Succeeded);
    assert_eq!(store_status(&store, "TX-C").await, Status::Failed);
    assert_eq!(store_status(&store, "TX-R").await, Status::Failed);
    // TX-B's request delivered again: the harness counts it and replays SUCCESS.
    send(
        &setup_sqs,
        &p.request.url,
        &domain::Request::new(
            id("TX-B"),
            Attempt::new(1).unwrap(),
            payload("TX-B", "SUCCESS"),
        )
        .to_json(),
    )
    .await;
    assert_eq!(harness_round().await, 1);
    // A late answer (attempt 1 again, TX-B done): a failed condition, dropped.
    answered(&external_sqs, "TX-B", 1, "CANCELLED").await;
    // A SUCCESS for TX-C's attempt 1, answered CANCELLED before (FAILED): a
    // conflicting success, which the response handler notes in the audit table.
    answered(&external_sqs, "TX-C", 1, "SUCCESS").await;
    let noted = aws::clients::dynamodb(&setup_sdk)
        .query()
        .table_name(&p.names.audit_table)
        .key_condition_expression("#id = :id")
        .expression_attribute_names("#id", "transaction_id")
        .expression_attribute_values(
            ":id",
            aws_sdk_dynamodb::types::AttributeValue::S("TX-C".into()),
        )
        .send()
        .await
        .unwrap();
    let notices: Vec<_> = noted
        .items()
        .iter()
        .flat_map(|i| aws::audit::entries_from_item(i).unwrap())
        .filter(|e| !e.is_transition())
        .collect();
    assert_eq!(
        notices.len(),
        1,
        "the conflicting SUCCESS is in TX-C's audit trail"
    );

    // TX-P: A crashed hours ago after persisting SCHEDULING, and its answer sat in the
    // response DLQ; redriven now, past the stored instant, it cannot be scheduled in
    // the past: the response handler puts the retry event on the retry queue.
    let now = SystemClock.now();
    let started = TransactionRecord::started(
        id("TX-P"),
        MaxAttempts::new(3).unwrap(),
        now.plus_millis(-7_200_000),
    );
    domain::ports::Creates::create(&store, &started, &payload("TX-P", "SUCCESS"))
        .await
        .unwrap();
    let fire_p = now.plus_millis(-3_600_000).ceil_to_second();
    let waiting = scheduling(started, fire_p, fire_p);
    put_raw(&setup_sdk, &names.transactions_table, &waiting).await;
    answered(&operator_sqs, "TX-P", 1, "CANCELLED").await;
    assert_eq!(store_status(&store, "TX-P").await, Status::Scheduled);

    // The scheduler fires TX-A's schedule; a failed delivery goes to its DLQ.
    let name_a = ScheduleName::for_retry(&id("TX-A"), Attempt::new(2).unwrap());
    fire(&setup_scheduler, &scheduler_sqs, &p, name_a.as_str()).await;
    send(
        &scheduler_sqs,
        &p.scheduler_dlq.url,
        r#"{"transaction_id":"TX-X","origin":"RETRY_SCHEDULER","attempt":2}"#,
    )
    .await;
    // An operator's replay of a retry event (a duplicate) and a malformed event.
    send(
        &operator_sqs,
        &p.retry.url,
        r#"{"transaction_id":"TX-A","origin":"OPERATOR","attempt":2}"#,
    )
    .await;
    send(
        &operator_sqs,
        &p.retry.url,
        r#"{"transaction_id":"TX-A","origin":"RETRY_SCHEDULER","attempt":"x"}"#,
    )
    .await;
    let retry_metrics = Metrics::new("DeferredRetry", "retry-handler");
    let (retry, retry_metrics) = (&retry, &retry_metrics);
    let retry_round = || round!(retry_sqs, p.retry, retry, retry_metrics);
    retry_round().await;
    assert_eq!(store_status(&store, "TX-A").await, Status::InProgress);

    // TX-G starts after the service has read its requests and is never answered
    // (started with a one-second answer deadline): the reconciler reads its payload and
    // publishes its request again.
    let ctx = Settings::default()
        .context(SystemClock.now())
        .with_answer_deadline(std::time::Duration::from_secs(1), 3);
    runtime::ops::start_transaction(
        &ports,
        id("TX-G"),
        payload("TX-G", "SUCCESS"),
        MaxAttempts::new(3).unwrap(),
        ctx.rules.answer_timeout,
        &ctx,
    )
    .await
    .unwrap();

    // The reconciler: TX-E SCHEDULED past its fire time (requeued), and TX-F read in
    // SCHEDULING with a fire time still ahead although its index entry is late (it
    // changed between the index query and the read): its schedule is created.
    let now = SystemClock.now();
    let f = TransactionRecord::started(
        id("TX-F"),
        MaxAttempts::new(3).unwrap(),
        now.plus_millis(-600_000),
    );
    let f = scheduling(f, now.plus_millis(3_600_000), now.plus_millis(-300_000));
    put_raw(&setup_sdk, &names.transactions_table, &f).await;
    let fire_e = store
        .get(&id("TX-E"))
        .await
        .unwrap()
        .unwrap()
        .next_fire_at
        .unwrap();
    wait_until(fire_e.plus_millis(2_500)).await;
    let rec_metrics = Metrics::new("DeferredRetry", "reconciler");
    let report = reconciler.run(&rec_metrics).await;
    assert_eq!(report.errors, 0, "{report:?}");
    assert_eq!(report.query_errors, 0, "{report:?}");
    assert!(report.examined >= 2, "{report:?}");
    assert_eq!(store_status(&store, "TX-F").await, Status::Scheduled);
    let g = store.get(&id("TX-G")).await.unwrap().unwrap();
    assert_eq!(
        (g.status, g.counts[Counter::Republishes]),
        (Status::InProgress, 1),
        "{g:?}"
    );
    // TX-G's deadline fired: one is a burst here, so the reconciler opened the
    // circuit breaker (window read, change written with its log entry).
    let breaker = aws::breaker::DynamoBreaker::new(
        aws::clients::dynamodb(&setup_sdk),
        &names.breaker_table,
        aws::breaker::SERVICE,
        domain::breaker::BreakerSettings::default(),
        1,
    );
    let opened = BreakerReads::load(&breaker, SystemClock.now(), false)
        .await
        .unwrap()
        .breaker;
    assert_eq!(opened.state.name(), "OPEN", "{opened:?}");
    // While it is open, TX-E's requeued retry event is held: put back on the retry
    // queue, delayed (SendMessage under the retry handler's role), the record
    // untouched.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    retry_round().await;
    let e = store.get(&id("TX-E")).await.unwrap().unwrap();
    assert_eq!(
        (
            e.status,
            e.counts[Counter::ProbeErrors],
            e.counts[Counter::Requeues],
            e.last_actor
        ),
        (Status::Scheduled, 0, 1, domain::machine::Actor::Reconciler),
        "{e:?}"
    );
    // After the cool-down the next retry event is the half-open round's probe
    // (counted on the breaker) and goes out.
    if let domain::breaker::BreakerState::Open { until, .. } = opened.state {
        wait_until(until.plus_millis(1_100)).await;
    }
    send(
        &operator_sqs,
        &p.retry.url,
        r#"{"transaction_id":"TX-E","origin":"OPERATOR","attempt":2}"#,
    )
    .await;
    retry_round().await;
    assert_eq!(store_status(&store, "TX-E").await, Status::InProgress);
    // The probe is answered: the response handler closes the breaker.
    answered(&external_sqs, "TX-E", 2, "SUCCESS").await;
    assert_eq!(store_status(&store, "TX-E").await, Status::Succeeded);
    let closed = BreakerReads::load(&breaker, SystemClock.now(), false)
        .await
        .unwrap()
        .breaker;
    assert_eq!(closed.state.name(), "CLOSED", "{closed:?}");

    // The audit writer's stream event source (given the stream's ARN, as the
    // template's `Stream: !GetAtt TransactionsTable.StreamArn`), the function, its
    // on-failure record.
    let streams = aws::clients::dynamodbstreams(&audit_sdk);
    let writer =
        aws::audit::AuditWriter::new(aws::clients::dynamodb(&audit_sdk), &names.audit_table, 365)
            .with_payloads(&names.payloads_table, domain::retention::Retention::DEFAULT);
    let mut position = testkit::drain::StreamPosition::default();
    let report =
        testkit::drain::drain_into(&writer, &streams, &p.transactions_stream_arn, &mut position)
            .await
            .unwrap();
    assert!(report.items > 0, "{report:?}");
    send(
        &aws::clients::sqs(&audit_sdk),
        &p.audit_dlq.url,
        r#"{"requestContext":{"condition":"RetryAttemptsExhausted"},"DDBStreamBatchInfo":{"startSequenceNumber":"1","endSequenceNumber":"2"}}"#,
    )
    .await;

    // A service starts transactions through the intake queue (with its own IAM
    // policy); the intake's event source mapping hands them to the starter: one
    // starts, its repeat is acknowledged, a message without a payload goes to the
    // intake DLQ.
    let starter = starter::wiring::starter(
        &starter_sdk,
        &StarterConfig::from_lookup(&env_lookup(&env_of("starter"))).unwrap(),
    )
    .unwrap();
    let start = domain::intake::StartMessage {
        transaction_id: id("TX-I"),
        payload: payload("TX-I", "SUCCESS"),
        max_attempts: None,
        correlation_id: domain::CorrelationId::new("lp-intake").ok(),
    }
    .to_json();
    for body in [
        start.as_str(),
        start.as_str(),
        r#"{"schema_version":1,"transaction_id":"TX-J"}"#,
    ] {
        send(&setup_sqs, &p.intake.url, body).await;
    }
    let (n, starter_metrics) = intake(&starter_sdk, &starter, &p).await;
    assert_eq!(n, 3);
    assert_eq!(store_status(&store, "TX-I").await, Status::InProgress);
    assert_eq!(
        starter_metrics.count(runtime::metrics::names::DEAD_LETTERED),
        1,
        "{starter_metrics:?}"
    );

    operators(&endpoint, &p, &setup_sdk, &store).await;

    // The operators' replay opened TX-C again: the audit writer keeps the rows written
    // before it as long as the replay's own (a Query of TX-C's rows, an UpdateItem each).
    let report =
        testkit::drain::drain_into(&writer, &streams, &p.transactions_stream_arn, &mut position)
            .await
            .unwrap();
    assert!(report.items > 0, "the replay's entries: {report:?}");

    let calls = recording.stop().await;
    (calls, p, stack)
}

/// Every operator command of `retryctl` (`runtime::run::execute`, as the binary runs
/// it), under the operator role its docs name, against the stack registered in
/// CloudFormation (`--stack lp`): the read-only commands, then the ones that act, with
/// a message waiting in every DLQ and a transaction in each state they act on.
async fn operators(
    endpoint: &str,
    p: &Provisioned,
    setup_sdk: &aws_config::SdkConfig,
    store: &aws::dynamo::DynamoStore<aws::dynamo::PayloadsTable>,
) {
    let mut entry = sandbox::outputs::local(p, domain::defaults::RECONCILE_SHARDS, 3600);
    // The alarm topic (as the template names it here), with a destination: verify
    // reads its subscriptions.
    let outputs = entry["Outputs"].as_array_mut().unwrap();
    let topic = testkit::moto::alarm_topic(setup_sdk, &format!("{MAIN}-AlarmTopic"), outputs)
        .await
        .unwrap()
        .expect("CreateTopic returns the topic's ARN");
    testkit::moto::page_queue(setup_sdk, &topic, &p.request_dlq.arn)
        .await
        .unwrap();
    let params = vec![
        (
            "ReconcileShards",
            domain::defaults::RECONCILE_SHARDS.to_string(),
        ),
        ("AnswerTimeoutSeconds", "3600".to_owned()),
        ("ReconcileThresholdSeconds", "1".to_owned()),
        (
            "ReconcileRequeueMax",
            domain::defaults::RECONCILE_REQUEUE_MAX.to_string(),
        ),
        (
            "TransactionDeadlineSeconds",
            domain::defaults::TRANSACTION_DEADLINE.as_secs().to_string(),
        ),
        (
            "RetentionDays",
            domain::defaults::RETENTION_DAYS.to_string(),
        ),
    ];
    sandbox::outputs::register_stack(setup_sdk, endpoint, &entry, &params)
        .await
        .unwrap();
    // One message in every DLQ, so that each redrive sends one back; the audit DLQ's
    // names a real range of the stream.
    fill_dead_letter_queues(setup_sdk, p).await;
    let scheduled = {
        let mut found = None;
        for tx in ["TX-P", "TX-F", "TX-A", "TX-D"] {
            if store_status(store, tx).await == Status::Scheduled {
                found = Some(tx);
                break;
            }
        }
        found.expect("a SCHEDULED transaction to resolve")
    };
    assert_eq!(store_status(store, "TX-C").await, Status::Failed);
    let read: &[&[&str]] = &[
        &["stats"],
        &["list", "--status", "FAILED"],
        &["list", "--status", "SCHEDULED"],
        &["show", "TX-C", "--payload"],
        &["stuck"],
        &["dlq", "peek", "request"],
        &["dlq", "peek", "response"],
        &["dlq", "peek", "retry"],
        &["dlq", "peek", "scheduler"],
        &["dlq", "peek", "audit"],
        &["redrive", "retry", "--dry-run"],
        &["breaker", "status"],
    ];
    let act: &[&[&str]] = &[
        &["submit", "TX-OP", "--payload", "{}"],
        &["replay", "TX-C", "--reason", "service back"],
        &["resolve", scheduled, "--reason", "settled by hand"],
        // TX-E ended SUCCEEDED and its trail was written above.
        &["erase", "TX-E", "--reason", "customer request"],
        &["breaker", "open", "--for", "60", "--reason", "maintenance"],
        &["breaker", "close", "--reason", "maintenance over"],
        &["redrive", "request"],
        &["redrive", "response"],
        &["redrive", "retry"],
        &["redrive", "scheduler"],
        &["redrive", "audit"],
    ];
    // `retryctl verify --resources-only`: its checks of every resource, read-only.
    let mut outputs = retryctl::verify::outputs::StackOutputs::default();
    outputs
        .add("lp", &serde_json::json!({ "Stacks": [entry] }).to_string())
        .unwrap();
    let settings = retryctl::verify::Settings {
        resources_only: true,
        timeout: Duration::from_secs(1),
        audit_wait: Duration::from_secs(1),
        poll: Duration::from_millis(100),
        scheduler_role: None,
        progress: false,
    };
    let report = retryctl::verify::run(
        &sdk_config_as(endpoint, OPERATOR_READ).await,
        &outputs,
        &settings,
    )
    .await
    .unwrap();
    assert!(report.ok, "{}", retryctl::verify::render(&report));
    assert!(
        report
            .checks
            .iter()
            .any(|c| c.subject.starts_with("AlarmTopic arn:")
                && c.status == retryctl::verify::CheckStatus::Pass),
        "{}",
        retryctl::verify::render(&report)
    );
    for (key, commands) in [(OPERATOR_READ, read), (OPERATOR_ACT, act)] {
        let sdk = sdk_config_as(endpoint, key).await;
        for args in commands {
            let line: Vec<&str> = ["retryctl", "--stack", MAIN]
                .into_iter()
                .chain(args.iter().copied())
                .collect();
            operator_command(&sdk, &line).await;
        }
    }
    // The runbooks, step by step, each under the role it names, with a message in
    // every DLQ again: a step that fails or calls what its role does not grant fails
    // this test.
    fill_dead_letter_queues(setup_sdk, p).await;
    let steps = runbook_commands("TX-R");
    let redrives = steps
        .iter()
        .filter(|(_, w)| w.first().is_some_and(|c| c == "redrive"))
        .count();
    assert!(
        steps.len() >= 10 && redrives == 5,
        "the runbooks' retryctl steps: {steps:?}"
    );
    for (key, words) in &steps {
        let sdk = sdk_config_as(endpoint, key).await;
        let line: Vec<&str> = ["retryctl", "--stack", MAIN]
            .into_iter()
            .chain(words.iter().map(String::as_str))
            .collect();
        operator_command(&sdk, &line).await;
    }
}

/// One message in every DLQ, so that each redrive sends one back (the audit DLQ's
/// names a real range of the stream).
async fn fill_dead_letter_queues(setup_sdk: &aws_config::SdkConfig, p: &Provisioned) {
    let setup_sqs = aws::clients::sqs(setup_sdk);
    for (q, body) in [
        (
            &p.request_dlq,
            r#"{"transaction_id":"TX-C","attempt":1}"#.to_owned(),
        ),
        (
            &p.response_dlq,
            r#"{"transaction_id":"TX-UNKNOWN","attempt":1,"outcome":"SUCCESS"}"#.to_owned(),
        ),
        (
            &p.retry_dlq,
            r#"{"transaction_id":"TX-Z","origin":"RETRY_SCHEDULER","attempt":2}"#.to_owned(),
        ),
        (
            &p.scheduler_dlq,
            r#"{"transaction_id":"TX-Z","origin":"RETRY_SCHEDULER","attempt":2}"#.to_owned(),
        ),
        (
            &p.audit_dlq,
            testkit::drain::failure_record(
                &aws::clients::dynamodbstreams(setup_sdk),
                &p.transactions_stream_arn,
                None,
            )
            .await
            .unwrap()
            .0,
        ),
    ] {
        send(&setup_sqs, &q.url, &body).await;
    }
}

/// Every `retryctl` command the runbooks of docs/deploy.md ("Alarms: what they mean
/// and what to do") prescribe, once each, as (the operator role it names, its words
/// after `retryctl` and the role flag). `<id>` stands for `id`, `--for S` for a minute.
fn runbook_commands(id: &str) -> Vec<(&'static str, Vec<String>)> {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/deploy.md")).unwrap();
    let start = doc
        .find("## Alarms: what they mean and what to do")
        .unwrap();
    let end = start + doc[start..].find("\n## ").unwrap();
    let mut out: Vec<(&'static str, Vec<String>)> = Vec::new();
    for piece in doc[start..end].split('`').skip(1).step_by(2) {
        let Some(rest) = piece.strip_prefix("retryctl ") else {
            continue;
        };
        let words: Vec<String> = rest
            .split_whitespace()
            .map(|w| w.trim_matches('"').replace("<id>", id))
            .collect();
        let (role, words) = match words.as_slice() {
            [flag, role, rest @ ..] if flag == "--role-arn" => (role.as_str(), rest.to_vec()),
            _ => panic!("runbook step `retryctl {rest}` names no operator role (--role-arn)"),
        };
        let key = match role {
            "$READ" => OPERATOR_READ,
            "$ACT" => OPERATOR_ACT,
            other => panic!("runbook step `retryctl {rest}`: unknown role {other}"),
        };
        let words: Vec<String> = words
            .into_iter()
            .map(|w| if w == "S" { "60".to_owned() } else { w })
            .collect();
        if !out.iter().any(|(k, w)| *k == key && *w == words) {
            out.push((key, words));
        }
    }
    out
}

/// Runs one `retryctl` command line with `sdk`'s credentials; it must succeed.
async fn operator_command(sdk: &aws_config::SdkConfig, line: &[&str]) {
    let cli = retryctl::cli::Cli::from_line(line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
    let target = retryctl::commands::Target::with_sdk(sdk.clone(), &cli.target)
        .await
        .unwrap_or_else(|e| panic!("{line:?}: {e}"));
    if let Err(e) = retryctl::run::execute(&cli, &target).await {
        panic!("{line:?}: {}", e.error);
    }
}

async fn store_status<P: Send + Sync>(store: &aws::dynamo::DynamoStore<P>, tx: &str) -> Status {
    store.get(&id(tx)).await.unwrap().unwrap().status
}

async fn wait_until(t: Timestamp) {
    while SystemClock.now() <= t {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every call on the wire — SDK retries and error answers included — is attributed to a
/// function. What AWS itself does with a function's role is done here under that role's
/// key: the SQS event source mapping (`GetQueueAttributes`, `ReceiveMessage`,
/// `DeleteMessageBatch`), the stream event source mapping, which is given the stream's
/// ARN (`DescribeStream`, `GetShardIterator`, `GetRecords`; `ListStreams` is granted for
/// the check Lambda makes when it creates the mapping, and never called), and its
/// on-failure destination (`SendMessage` to the audit DLQ), EventBridge Scheduler's
/// delivery with the scheduler role (`SendMessage` to the retry queue and, on failure, to
/// the scheduler DLQ), Lambda's log writes.
///
/// The scenario drives every path that can call AWS: starts, CANCELLED (schedule
/// created), SUCCESS, exhausted, a schedule that already exists (409), a late response, a
/// conflicting SUCCESS (noted in the audit table), unknown and malformed responses
/// (response DLQ), a retry event (payload read, publish), a duplicate (failed condition)
/// and a malformed one (retry DLQ), the reconciler requeueing a SCHEDULED retry past its
/// fire time and re-creating the schedule of a SCHEDULING record read after its index
/// entry, the reconciler publishing again a request unanswered past its deadline, the
/// circuit breaker's whole round (opened by that deadline, a retry paused under its own
/// schedule, a probe after the cool-down, closed by the probe's answer), the audit of the
/// stream, and its DLQ. Then every operator command of `retryctl`, run as the binary runs
/// it (`--stack`), under the stack's read-only role (list, show, stats, stuck, dlq peek,
/// breaker status) or acting role (submit, replay, resolve, redrive of every DLQ, breaker
/// open and close): their calls are checked against those roles both ways, as the
/// functions' are. CloudWatch publishing each alarm to the (encrypted) alarm topic is
/// evaluated too.
///
/// The staging harness (`infra/template.yaml`) is the external service here: its real
/// code answers the scripted requests under its own role, read from its own template and
/// joined to the main stack's (`Stack::merge`: its role meets the main stack's queue
/// policies, with the harness listed in ServicePrincipalArns, and key policy), through
/// its event source mapping, a repeated request and one it cannot read.
///
/// The reverse check: every grant of every function role, of the scheduler role, of the
/// two operator roles and of each queue-policy principal must cover some request. Both
/// run once per `samconfig.toml` environment (default, staging, prod-template), the
/// template resolved with that environment's parameters: its Deny statements are
/// evaluated with its values (where it lists the external service's principals, this
/// test's external service and harness stand for them), and no operator principal of the
/// test's own is added (on-call acts through the operator roles).
#[tokio::test(flavor = "multi_thread")]
async fn every_call_is_allowed_and_every_grant_is_used() {
    let (calls, p, _) = scenario().await;
    let ours: Vec<&Call> = calls.iter().filter(|c| c.caller != SETUP).collect();
    for f in FUNCTIONS.iter().chain(&[OPERATOR_READ, OPERATOR_ACT]) {
        assert!(
            ours.iter().any(|c| c.caller == *f),
            "no call recorded for {f}"
        );
    }
    let owned: Vec<Call> = ours.into_iter().cloned().collect();
    println!(
        "least privilege: {} recorded calls, {} distinct (function or operator role, service, operation)",
        owned.len(),
        owned
            .iter()
            .map(|c| (&c.caller, &c.service, &c.operation))
            .collect::<BTreeSet<_>>()
            .len()
    );
    // The calls against the stack as each samconfig.toml environment deploys it (no
    // operator principal of the test's own: on-call acts through the operator roles).
    let template = cfn::template();
    let envs = cfn::samconfig_environments(&std::fs::read_to_string(cfn::SAMCONFIG_PATH).unwrap());
    assert!(envs.len() >= 3, "{envs:?}");
    let mut problems = Vec::new();
    for (env, params) in &envs {
        let stack = env_stack(&template, &p, &format!("{MAIN}-harness-table"), params);
        let requests = requests_of(&stack, &owned, &p.schedule_group_arn);
        let verdict = check(&stack, &requests);
        println!(
            "least privilege [{env}]: {} distinct requests checked",
            verdict.checked.len()
        );
        problems.extend(verdict.problems.into_iter().map(|x| format!("[{env}] {x}")));
    }
    assert!(
        problems.is_empty(),
        "an environment's parameters deny or leave unused what the code uses:\n  {}",
        problems.join("\n  ")
    );
}

// ---------------------------------------------------------------------------------
// The evaluator on its own (no moto): it fails when it must
// ---------------------------------------------------------------------------------

fn queue(name: &str) -> testkit::provision::QueueRef {
    testkit::provision::QueueRef {
        name: format!("lp-{name}"),
        url: format!("http://127.0.0.1:1/{LOCAL_ACCOUNT}/lp-{name}"),
        arn: format!("arn:aws:sqs:{LOCAL_REGION}:{LOCAL_ACCOUNT}:lp-{name}"),
    }
}

/// A stack's physical names without a server.
/// The offline stack with these parameters as well.
fn offline_with(text: &str, parameters: &[(&'static str, String)]) -> Stack {
    let template: Value = serde_yaml::from_str(text).unwrap();
    let mut ph = offline(text).physical;
    for (k, v) in parameters {
        ph.parameters.insert((*k).to_owned(), v.clone());
    }
    Stack::from_template(&template, text, ph).unwrap()
}

const SECRET_ARN: &str = "arn:aws:secretsmanager:us-east-1:210987654321:secret:psp-AbCdEf";
const PARAMETER_ARN: &str = "arn:aws:ssm:us-east-1:210987654321:parameter/psp/key";

/// The parameters that put the HTTP bridge in the stack, its auth from a secret or a
/// parameter.
fn bridge_parameters(secret: &str, parameter: &str) -> Vec<(&'static str, String)> {
    vec![
        (
            "HttpEndpoint",
            "https://api.psp.example/pay/{transaction_id}".into(),
        ),
        ("HttpAuthSecretArn", secret.to_owned()),
        ("HttpAuthParameterArn", parameter.to_owned()),
    ]
}

/// The parameters that put every function in the stack: the HTTP bridge (its auth
/// from a secret) and outbox mode's publisher.
fn every_function() -> Vec<(&'static str, String)> {
    let mut p = bridge_parameters(SECRET_ARN, "");
    p.push(("RequestDelivery", "outbox".into()));
    p
}

fn offline(text: &str) -> Stack {
    let names = StackNames::new("lp");
    let p = Provisioned {
        endpoint: String::new(),
        transactions_table_arn: format!("arn:aws:dynamodb:{LOCAL_REGION}:{LOCAL_ACCOUNT}:table/lp-transactions"),
        transactions_stream_arn: format!(
            "arn:aws:dynamodb:{LOCAL_REGION}:{LOCAL_ACCOUNT}:table/lp-transactions/stream/2026-12-03T00:00:00.000"
        ),
        request: queue("request"),
        request_dlq: queue("request-dlq"),
        response: queue("response"),
        response_dlq: queue("response-dlq"),
        retry: queue("retry"),
        retry_dlq: queue("retry-dlq"),
        scheduler_dlq: queue("scheduler-dlq"),
        audit_dlq: queue("audit-dlq"),
        intake: queue("intake"),
        intake_dlq: queue("intake-dlq"),
        schedule_group_arn: format!("arn:aws:scheduler:{LOCAL_REGION}:{LOCAL_ACCOUNT}:schedule-group/lp-retries"),
        scheduler_role_arn: String::new(),
        names,
    };
    let template: Value = serde_yaml::from_str(text).unwrap();
    Stack::from_template(&template, text, physical(&template, &p)).unwrap()
}

/// The main stack (with `ServicePrincipalArns` as given) joined to the harness stack
/// of `harness_text`, without a server.
fn offline_with_harness(service_principals: &str, harness_text: &str) -> Stack {
    let text = template_text();
    let main_template: Value = serde_yaml::from_str(&text).unwrap();
    let mut ph = offline(&text).physical;
    ph.parameters
        .insert("ServicePrincipalArns".into(), service_principals.to_owned());
    let mut stack = Stack::from_template(&main_template, &text, ph).unwrap();
    let h: Value = serde_yaml::from_str(harness_text).unwrap();
    let harness = Stack::from_template(
        &h,
        harness_text,
        harness_physical(&h, &stack, "lp-harness-table"),
    )
    .unwrap();
    stack.merge(harness);
    stack
}

fn call(caller: &str, service: &str, operation: &str, resource: &str) -> Call {
    Call {
        epoch_ms: 0,
        since_start: Duration::ZERO,
        caller: caller.to_owned(),
        service: service.to_owned(),
        operation: operation.to_owned(),
        resources: vec![resource.to_owned()],
        parts: vec![],
        passed_role: None,
        message_bodies: vec![],
        status: 200,
    }
}

/// One grant removed from an operator role: the `retryctl` call that needs it fails,
/// naming the role, the action and the resource; a call of the other role's commands
/// is not allowed by the read-only role.
#[test]
fn an_operator_role_without_one_grant_fails_the_command_that_needs_it() {
    let text = template_text();
    let grant = "              - Sid: ReadTheAuditTrail\n                Effect: Allow\n                Action: dynamodb:Query\n                Resource: !GetAtt AuditTable.Arn\n";
    let audit = format!("arn:aws:dynamodb:{LOCAL_REGION}:{LOCAL_ACCOUNT}:table/lp-audit");
    let retry = queue("retry").arn;
    let calls = [
        call(OPERATOR_READ, "dynamodb", "Query", &audit),
        call(OPERATOR_ACT, "sqs", "SendMessage", &retry),
        call(OPERATOR_READ, "sqs", "SendMessage", &retry),
    ];
    let problems_with = |text: &str| {
        let stack = offline(text);
        problems_where(&stack, &requests_of(&stack, &calls, ""), |p| {
            p.starts_with("operator-")
        })
    };
    // The read-only role may not send retry events: the queue denies it, and its
    // role grants no data key to send with.
    let read_sends = vec![
        format!(
            "operator-read: kms:GenerateDataKey on arn:aws:kms:{LOCAL_REGION}:{LOCAL_ACCOUNT}:key/lp-EncryptionKey is not allowed by OperatorReadRole"
        ),
        format!(
            "operator-read: sqs:SendMessage on {retry} is denied by RetryQueuePolicy policy DenyRetryEventsFromAnybodyElse"
        ),
    ];
    assert_eq!(problems_with(&text), read_sends);
    let mut missing = vec![format!(
        "operator-read: dynamodb:Query on {audit} is not allowed by OperatorReadRole"
    )];
    missing.extend(read_sends);
    assert_eq!(problems_with(&without(&text, grant)), missing);
}

/// GIVEN `Tracing` Active WHEN Lambda writes a function's trace segments with its
/// role THEN the role allows X-Ray's two write actions (which take no resource-level
/// permission: `*`) and no other X-Ray action; with PassThrough, the default, no
/// function role grants them. (The roles are the template's own, not SAM's: SAM adds
/// X-Ray's managed policy only to a role it generates.)
#[test]
fn tracing_active_grants_the_xray_writes_and_only_then() {
    let text = template_text();
    let active = offline_with(&text, &[("Tracing", "Active".to_owned())]);
    let default = offline(&text);
    for role in [
        "ResponseHandlerRole",
        "RetryHandlerRole",
        "StarterRole",
        "ReconcilerRole",
        "AuditWriterRole",
    ] {
        for action in ["xray:PutTraceSegments", "xray:PutTelemetryRecords"] {
            let r = active.request(&active.role(role), action, "*");
            assert!(
                matches!(active.evaluate(&r).unwrap(), Decision::Allowed(_)),
                "{role}: {action}"
            );
            let r = default.request(&default.role(role), action, "*");
            assert_eq!(
                default.evaluate(&r).unwrap(),
                Decision::NotAllowed,
                "{role}: {action}"
            );
        }
        let r = active.request(&active.role(role), "xray:GetTraceSummaries", "*");
        assert_eq!(active.evaluate(&r).unwrap(), Decision::NotAllowed, "{role}");
    }
}

/// One grant removed from the template: the call that needs it fails, naming the
/// function, the action and the resource.
#[test]
fn a_removed_grant_fails_naming_function_action_and_resource() {
    let text = template_text();
    let grant = "              - Sid: ReadThePayload\n                Effect: Allow\n                Action: dynamodb:GetItem\n                Resource: !GetAtt PayloadsTable.Arn\n";
    let payloads = format!("arn:aws:dynamodb:{LOCAL_REGION}:{LOCAL_ACCOUNT}:table/lp-payloads");
    let read = [call("retry-handler", "dynamodb", "GetItem", &payloads)];
    let problems_with = |text: &str| {
        let stack = offline(text);
        problems_where(&stack, &requests_of(&stack, &read, ""), |p| {
            p.starts_with("retry-handler:")
        })
    };
    assert_eq!(problems_with(&text), Vec::<String>::new());
    assert_eq!(
        problems_with(&without(&text, grant)),
        vec![format!(
            "retry-handler: dynamodb:GetItem on {payloads} is not allowed by RetryHandlerRole"
        )]
    );
}

/// The HTTP bridge's role, with its auth from Secrets Manager or from SSM: each call
/// the bridge makes (the event source's on the request queue, the answer, the
/// operator case, the secret's read, its logs) is allowed, each grant is used, the
/// other store's read is not granted; the service restriction admits it; without an
/// endpoint there is no bridge.
#[test]
fn the_http_bridge_role_is_exactly_its_calls() {
    let text = template_text();
    for (secret, parameter, read, other) in [
        (
            SECRET_ARN,
            "",
            secret_read(),
            ("ssm:GetParameter", PARAMETER_ARN),
        ),
        (
            "",
            PARAMETER_ARN,
            parameter_read(),
            ("secretsmanager:GetSecretValue", SECRET_ARN),
        ),
    ] {
        let mut params = bridge_parameters(secret, parameter);
        params.push(("ServicePrincipalArns", outside_arn(EXTERNAL)));
        let stack = offline_with(&text, &params);
        let requests = bridge_requests(&stack, read);
        let problems = problems_where(&stack, &requests, of_the_bridge);
        assert_eq!(
            problems,
            Vec::<String>::new(),
            "auth from {secret}{parameter}"
        );
        let bridge = stack.role("HttpBridgeRole");
        let not_granted = stack.request(&bridge, other.0, other.1);
        assert_eq!(
            stack.evaluate(&not_granted).unwrap(),
            Decision::NotAllowed,
            "{other:?}"
        );
        for (action, q) in [("sqs:SendMessage", "retry"), ("sqs:SendMessage", "request")] {
            let elsewhere = stack.request(&bridge, action, &queue(q).arn);
            let d = stack.evaluate(&elsewhere).unwrap();
            assert!(!matches!(d, Decision::Allowed(_)), "{action} on {q}: {d:?}");
        }
    }
    let without = offline(&text);
    assert!(
        !without.function_roles.contains_key("http-bridge"),
        "no endpoint, no bridge"
    );
}

/// Whether a problem is the HTTP bridge's or its role's.
fn of_the_bridge(problem: &str) -> bool {
    problem.starts_with("http-bridge:") || problem.contains("HttpBridgeRole")
}

/// The bridge's read of its auth secret, from Secrets Manager or from SSM.
fn secret_read() -> Call {
    call(
        "http-bridge",
        "secretsmanager",
        "GetSecretValue",
        SECRET_ARN,
    )
}

fn parameter_read() -> Call {
    call("http-bridge", "ssm", "GetParameter", PARAMETER_ARN)
}

/// The requests of the HTTP bridge's calls: the event source's on the request queue,
/// the answer, the operator case, `read` (the auth secret's), its logs.
fn bridge_requests(stack: &Stack, read: Call) -> Vec<(String, Request)> {
    let (request, response, dlq) = (queue("request"), queue("response"), queue("request-dlq"));
    let calls = [
        call("http-bridge", "sqs", "GetQueueAttributes", &request.arn),
        call("http-bridge", "sqs", "ReceiveMessage", &request.arn),
        call("http-bridge", "sqs", "DeleteMessageBatch", &request.arn),
        call("http-bridge", "sqs", "SendMessage", &response.arn),
        call("http-bridge", "sqs", "SendMessage", &dlq.arn),
        read,
    ];
    let mut requests = requests_of(stack, &calls, "");
    requests.extend(
        stack
            .log_requests("http-bridge")
            .into_iter()
            .map(|r| ("http-bridge".to_owned(), r)),
    );
    requests
}

/// The customer managed key of the bridge's auth secret, made outside the stack.
fn auth_key_arn() -> String {
    format!("arn:aws:kms:{LOCAL_REGION}:{LOCAL_ACCOUNT}:key/0f1e2d3c-4b5a-6978-8695-a4b3c2d1e0f9")
}

/// The stack with the auth key's own key policy joined: it lets the account's IAM
/// policies grant `kms:Decrypt` (the key's owner writes it; docs/http-bridge.md).
fn with_auth_key(mut stack: Stack) -> Stack {
    let text = format!(
        "Resources:\n  AuthKey:\n    Type: AWS::KMS::Key\n    Properties:\n      KeyPolicy:\n        Version: \"2012-10-17\"\n        Statement:\n          - Sid: AccountPolicies\n            Effect: Allow\n            Principal:\n              AWS: arn:aws:iam::{LOCAL_ACCOUNT}:root\n            Action: kms:Decrypt\n            Resource: \"*\"\n"
    );
    let template: Value = serde_yaml::from_str(&text).unwrap();
    let mut physical = Physical::new(LOCAL_ACCOUNT, LOCAL_REGION, "key-owner");
    physical.atts.insert("AuthKey.Arn".into(), auth_key_arn());
    stack.merge(Stack::from_template(&template, &text, physical).unwrap());
    stack
}

/// The bridge's auth secret under a customer managed key, and the bridge in a VPC:
/// with `HttpAuthKmsKeyArn`, the role may `kms:Decrypt` that key only through the
/// service that holds the secret and only for that secret (its encryption context);
/// with `HttpBridgeSubnetIds`, Lambda may manage the function's network interfaces
/// in this account and region. Every such grant is used; without the parameters,
/// neither exists.
#[test]
fn the_http_bridge_gets_key_and_vpc_grants_only_when_given() {
    let text = template_text();
    let eni = format!("arn:aws:ec2:{LOCAL_REGION}:{LOCAL_ACCOUNT}:network-interface/eni-0123");
    let subnet = format!("arn:aws:ec2:{LOCAL_REGION}:{LOCAL_ACCOUNT}:subnet/subnet-0a1");
    let group = format!("arn:aws:ec2:{LOCAL_REGION}:{LOCAL_ACCOUNT}:security-group/sg-0c3");
    let decrypt = |stack: &Stack, via: &str, context: (&str, &str)| {
        let mut r = stack.request(
            &stack.role("HttpBridgeRole"),
            "kms:Decrypt",
            &auth_key_arn(),
        );
        r.context.insert(
            "kms:ViaService".to_owned(),
            vec![format!("{via}.{LOCAL_REGION}.amazonaws.com")],
        );
        r.context.insert(
            format!("kms:EncryptionContext:{}", context.0),
            vec![context.1.to_owned()],
        );
        r
    };
    for (secret, parameter, read, via, context, other_via) in [
        (
            SECRET_ARN,
            "",
            secret_read(),
            "secretsmanager",
            ("SecretARN", SECRET_ARN),
            "ssm",
        ),
        (
            "",
            PARAMETER_ARN,
            parameter_read(),
            "ssm",
            ("PARAMETER_ARN", PARAMETER_ARN),
            "secretsmanager",
        ),
    ] {
        let mut params = bridge_parameters(secret, parameter);
        params.extend([
            ("HttpAuthKmsKeyArn", auth_key_arn()),
            ("HttpBridgeSubnetIds", "subnet-0a1,subnet-0b2".to_owned()),
            ("HttpBridgeSecurityGroupIds", "sg-0c3".to_owned()),
        ]);
        let stack = with_auth_key(offline_with(&text, &params));
        let bridge = stack.role("HttpBridgeRole");
        let mut requests = bridge_requests(&stack, read);
        requests.push(("http-bridge".to_owned(), decrypt(&stack, via, context)));
        for (action, resource) in [
            ("ec2:CreateNetworkInterface", eni.as_str()),
            ("ec2:CreateNetworkInterface", subnet.as_str()),
            ("ec2:CreateNetworkInterface", group.as_str()),
            ("ec2:DeleteNetworkInterface", eni.as_str()),
            ("ec2:AssignPrivateIpAddresses", eni.as_str()),
            ("ec2:UnassignPrivateIpAddresses", eni.as_str()),
            ("ec2:DescribeNetworkInterfaces", "*"),
            ("ec2:DescribeSubnets", "*"),
        ] {
            requests.push((
                "http-bridge".to_owned(),
                stack.request(&bridge, action, resource),
            ));
        }
        let problems = problems_where(&stack, &requests, of_the_bridge);
        assert_eq!(problems, Vec::<String>::new(), "auth from {via}");
        // The key through the other service, for another secret, or directly: no.
        let other_secret = (
            context.0,
            "arn:aws:secretsmanager:us-east-1:210987654321:secret:other-AbCdEf",
        );
        let mut direct = stack.request(&bridge, "kms:Decrypt", &auth_key_arn());
        direct.context.insert(
            format!("kms:EncryptionContext:{}", context.0),
            vec![context.1.to_owned()],
        );
        for r in [
            decrypt(&stack, other_via, context),
            decrypt(&stack, via, other_secret),
            direct,
        ] {
            assert_eq!(stack.evaluate(&r).unwrap(), Decision::NotAllowed, "{r:?}");
        }
        // Network interfaces in another account: no.
        let elsewhere = stack.request(
            &bridge,
            "ec2:CreateNetworkInterface",
            "arn:aws:ec2:us-east-1:999999999999:subnet/subnet-0a1",
        );
        assert_eq!(stack.evaluate(&elsewhere).unwrap(), Decision::NotAllowed);

        // Without the key and the subnets: neither grant.
        let stack = with_auth_key(offline_with(&text, &bridge_parameters(secret, parameter)));
        let bridge = stack.role("HttpBridgeRole");
        for r in [
            decrypt(&stack, via, context),
            stack.request(&bridge, "ec2:DescribeSubnets", "*"),
            stack.request(&bridge, "ec2:CreateNetworkInterface", &subnet),
        ] {
            assert_eq!(stack.evaluate(&r).unwrap(), Decision::NotAllowed, "{r:?}");
        }
    }
}

/// The retry queue's policy denies a principal it does not list, even one whose own
/// policy would allow it; the listed ones pass.
#[test]
fn the_retry_queue_denies_principals_it_does_not_list() {
    let stack = offline(&template_text());
    let retry = queue("retry").arn;
    let send = |p: &Principal| {
        stack
            .evaluate(&stack.request(p, "sqs:SendMessage", &retry))
            .unwrap()
    };
    for id in ["AuditWriterRole"] {
        match send(&stack.role(id)) {
            Decision::Denied(by) => {
                assert!(by.contains("DenyRetryEventsFromAnybodyElse"), "{id}: {by}")
            }
            other => panic!("{id} may send retry events: {other:?}"),
        }
    }
    assert!(matches!(
        send(&Principal::Arn(outside_arn("intruder"))),
        Decision::Denied(_)
    ));
    assert!(send(&stack.role("ReconcilerRole")).is_allowed());
    assert!(send(&stack.role("SchedulerRole")).is_allowed());
    // The retry handler puts back an event the breaker holds.
    assert!(send(&stack.role("RetryHandlerRole")).is_allowed());
    // A retry whose instant has passed: the response handler sends it itself.
    assert!(send(&stack.role("ResponseHandlerRole")).is_allowed());
    assert!(send(&Principal::Arn(outside_arn(OPERATOR))).is_allowed());
}

/// Every queue policy denies requests without TLS; with ServicePrincipalArns, only
/// the listed service answers on the response queue and reads the request queue.
#[test]
fn queue_policies_deny_plain_http_and_unlisted_service_principals() {
    let stack = offline(&template_text());
    let reconciler = stack.role("ReconcilerRole");
    let mut plain = stack.request(&reconciler, "sqs:SendMessage", &queue("retry").arn);
    assert!(stack.evaluate(&plain).unwrap().is_allowed());
    plain
        .context
        .insert("aws:SecureTransport".into(), vec!["false".into()]);
    assert!(
        matches!(stack.evaluate(&plain).unwrap(), Decision::Denied(by) if by.contains("DenyAnythingButTls"))
    );
    for q in [
        "request",
        "response",
        "request-dlq",
        "response-dlq",
        "retry-dlq",
        "scheduler-dlq",
        "audit-dlq",
    ] {
        let mut r = stack.request(
            &stack.role("RetryHandlerRole"),
            "sqs:SendMessage",
            &queue(q).arn,
        );
        r.context
            .insert("aws:SecureTransport".into(), vec!["false".into()]);
        assert!(
            matches!(stack.evaluate(&r).unwrap(), Decision::Denied(_)),
            "{q} accepts plain HTTP"
        );
    }
    let forger = Principal::Arn(outside_arn("forger"));
    let service = Principal::Arn(outside_arn(EXTERNAL));
    for (action, q) in [
        ("sqs:SendMessage", "response"),
        ("sqs:ReceiveMessage", "request"),
        ("sqs:DeleteMessage", "request"),
    ] {
        let arn = queue(q).arn;
        assert!(
            matches!(
                stack
                    .evaluate(&stack.request(&forger, action, &arn))
                    .unwrap(),
                Decision::Denied(_)
            ),
            "{action} on {q} by an unlisted principal"
        );
        assert!(!matches!(
            stack
                .evaluate(&stack.request(&service, action, &arn))
                .unwrap(),
            Decision::Denied(_)
        ));
    }
}

/// CloudWatch alarms of this account publish to the encrypted alarm topic (topic
/// policy and key policy); an alarm of another account cannot. (The HTTP bridge and
/// outbox mode's publisher are in the stack, so their alarms are counted too.)
#[test]
fn alarms_of_this_account_and_only_they_publish() {
    let text = template_text();
    let stack = offline_with(&text, &every_function());
    let requests = stack.alarm_requests();
    let alarms = text.matches("Type: AWS::CloudWatch::Alarm").count();
    assert!(alarms >= 20, "{alarms} alarms in the template");
    assert_eq!(
        requests.len(),
        3 * alarms,
        "{alarms} alarms, each: sns:Publish + GenerateDataKey + Decrypt"
    );
    for r in &requests {
        assert!(stack.evaluate(r).unwrap().is_allowed(), "{r:?}");
    }
    for r in requests.iter().take(3) {
        let mut other = r.clone();
        other
            .context
            .insert("aws:SourceAccount".into(), vec!["999999999999".into()]);
        assert_eq!(
            stack.evaluate(&other).unwrap(),
            Decision::NotAllowed,
            "{other:?}"
        );
    }
}

/// The harness reads requests and answers only while the main stack's
/// ServicePrincipalArns lists its role (the ordering docs/deploy.md describes), and a
/// grant removed from its own template fails the call that needs it, naming it.
#[test]
fn the_harness_passes_the_service_restriction_only_when_listed() {
    let calls = [
        call("harness", "sqs", "ReceiveMessage", &queue("request").arn),
        call("harness", "sqs", "SendMessage", &queue("response").arn),
    ];
    let problems = |service_principals: &str, harness_text: &str| {
        let stack = offline_with_harness(service_principals, harness_text);
        problems_where(&stack, &requests_of(&stack, &calls, ""), |p| {
            p.starts_with("harness:")
        })
    };
    let text = harness_template_text();
    let listed = format!("{},{}", outside_arn(EXTERNAL), harness_role_arn());
    assert_eq!(problems(&listed, &text), Vec::<String>::new());
    let unlisted = problems(&outside_arn(EXTERNAL), &text);
    assert_eq!(
        unlisted,
        vec![
            format!(
                "harness: sqs:ReceiveMessage on {} is denied by RequestQueuePolicy policy OnlyTheExternalServiceReadsRequests",
                queue("request").arn
            ),
            format!(
                "harness: sqs:SendMessage on {} is denied by ResponseQueuePolicy policy OnlyTheExternalServiceAnswers",
                queue("response").arn
            ),
        ]
    );
    let without_kms = without(&text, "                  - kms:GenerateDataKey\n");
    assert_eq!(
        problems(&listed, &without_kms),
        vec![format!(
            "harness: kms:GenerateDataKey on arn:aws:kms:{LOCAL_REGION}:{LOCAL_ACCOUNT}:key/lp-EncryptionKey is not allowed by HarnessRole"
        )]
    );
}

/// The key through DynamoDB is `kms:Decrypt` only: a function role may not generate
/// data keys through DynamoDB, only through SQS (what an SQS producer needs).
#[test]
fn function_roles_generate_data_keys_only_through_sqs() {
    let stack = offline(&template_text());
    let key = format!("arn:aws:kms:{LOCAL_REGION}:{LOCAL_ACCOUNT}:key/lp-EncryptionKey");
    let kms = |role: &str, action: &str, via: &str| {
        let mut r = stack.request(&stack.role(role), action, &key);
        r.context.insert(
            "kms:ViaService".into(),
            vec![format!("{via}.{LOCAL_REGION}.amazonaws.com")],
        );
        r.context
            .insert("kms:CallerAccount".into(), vec![LOCAL_ACCOUNT.into()]);
        stack.evaluate(&r).unwrap()
    };
    for role in [
        "ResponseHandlerRole",
        "RetryHandlerRole",
        "ReconcilerRole",
        "AuditWriterRole",
    ] {
        assert!(
            kms(role, "kms:GenerateDataKey", "sqs").is_allowed(),
            "{role}"
        );
        assert!(kms(role, "kms:Decrypt", "sqs").is_allowed(), "{role}");
        assert!(kms(role, "kms:Decrypt", "dynamodb").is_allowed(), "{role}");
        assert_eq!(
            kms(role, "kms:GenerateDataKey", "dynamodb"),
            Decision::NotAllowed,
            "{role} generates data keys through DynamoDB"
        );
        assert_eq!(
            kms(role, "kms:Encrypt", "sqs"),
            Decision::NotAllowed,
            "{role}"
        );
    }
    // Only the audit writer may list the table's streams (Lambda's stream event source
    // mapping checks it when it is created), and only that table's.
    let streams = format!(
        "arn:aws:dynamodb:{LOCAL_REGION}:{LOCAL_ACCOUNT}:table/lp-transactions/stream/2026-12-03T00:00:00.000"
    );
    let others = format!(
        "arn:aws:dynamodb:{LOCAL_REGION}:{LOCAL_ACCOUNT}:table/lp-audit/stream/2026-12-03T00:00:00.000"
    );
    for (role, resource, allowed) in [
        ("AuditWriterRole", &streams, true),
        ("AuditWriterRole", &others, false),
        ("ReconcilerRole", &streams, false),
    ] {
        let d = stack
            .evaluate(&stack.request(&stack.role(role), "dynamodb:ListStreams", resource))
            .unwrap();
        assert_eq!(
            matches!(d, Decision::Allowed(_)),
            allowed,
            "{role} dynamodb:ListStreams {resource}: {d:?}"
        );
    }
}

/// The harness uses the main stack's key (the one carrying its alias) through SQS,
/// and no other key of the account.
#[test]
fn the_harness_uses_only_the_main_stacks_key() {
    let listed = format!("{},{}", outside_arn(EXTERNAL), harness_role_arn());
    let stack = offline_with_harness(&listed, &harness_template_text());
    let harness = Principal::Arn(harness_role_arn());
    let key = |name: &str, aliases: &[&str]| {
        let mut r = stack.request(
            &harness,
            "kms:GenerateDataKey",
            &format!("arn:aws:kms:{LOCAL_REGION}:{LOCAL_ACCOUNT}:key/{name}"),
        );
        r.context.insert(
            "kms:ViaService".into(),
            vec![format!("sqs.{LOCAL_REGION}.amazonaws.com")],
        );
        r.context
            .insert("kms:CallerAccount".into(), vec![LOCAL_ACCOUNT.into()]);
        r.context.insert(
            "kms:ResourceAliases".into(),
            aliases.iter().map(|a| (*a).to_owned()).collect(),
        );
        r
    };
    let granted = |r: &Request| {
        stack
            .grants(&harness)
            .iter()
            .any(|(g, st)| Stack::covers(g, st, r).unwrap())
    };
    // The main stack's key, as the evaluator derives it (its alias included).
    let main_key = format!("arn:aws:kms:{LOCAL_REGION}:{LOCAL_ACCOUNT}:key/lp-EncryptionKey");
    assert_eq!(
        stack.aliases.get(&main_key),
        Some(&vec![format!("alias/deferred-retry/{MAIN}")])
    );
    let main = key("lp-EncryptionKey", &["alias/deferred-retry/lp"]);
    assert!(granted(&main));
    assert!(stack.evaluate(&main).unwrap().is_allowed());
    for other in [
        key("another-key", &["alias/another-stack"]),
        key("another-key", &[]),
        key("another-key", &["alias/deferred-retry/lp-other"]),
    ] {
        assert!(!granted(&other), "{other:?}");
    }
}

/// With ServicePrincipalArns set and the other two lists empty, the queue policies'
/// `ArnNotEquals` lists hold exactly the service's principals: no empty string.
#[test]
fn principal_lists_hold_no_empty_arn() {
    let text = template_text();
    let template: Value = serde_yaml::from_str(&text).unwrap();
    let service = outside_arn(EXTERNAL);
    let conditions = |operators: &str, externals: &str| {
        let mut ph = offline(&text).physical;
        for (k, v) in [
            ("ServicePrincipalArns", service.as_str()),
            ("OperatorPrincipalArns", operators),
            ("ExternalServicePrincipalArns", externals),
        ] {
            ph.parameters.insert(k.into(), v.into());
        }
        let stack = Stack::from_template(&template, &text, ph).unwrap();
        ["request", "response", "retry"]
            .iter()
            .flat_map(|q| {
                stack
                    .resource_statements(&queue(q).arn)
                    .iter()
                    .map(|st| {
                        (
                            st.label.clone(),
                            st.condition_values("ArnNotEquals", "aws:PrincipalArn"),
                        )
                    })
                    .filter(|(_, v)| !v.is_empty())
                    .collect::<Vec<_>>()
            })
            .collect::<BTreeMap<_, _>>()
    };
    let only_service = conditions("", "");
    let want = vec![service.clone()];
    // The operators' acting role answers too: `retryctl redrive response`.
    let act = format!("arn:aws:iam::{LOCAL_ACCOUNT}:role/lp-OperatorActRole");
    assert_eq!(
        only_service.get("RequestQueuePolicy policy OnlyTheExternalServiceReadsRequests"),
        Some(&want),
        "{only_service:?}"
    );
    assert_eq!(
        only_service.get("ResponseQueuePolicy policy OnlyTheExternalServiceAnswers"),
        Some(&vec![service.clone(), act.clone()]),
        "{only_service:?}"
    );
    for (label, values) in &only_service {
        assert!(values.iter().all(|v| !v.is_empty()), "{label}: {values:?}");
    }
    // Every list set: each principal once, in order, still no empty string.
    let op = outside_arn(OPERATOR);
    let ext = "arn:aws:iam::210987654321:role/partner".to_owned();
    let all = conditions(&op, &ext);
    assert_eq!(
        all.get("ResponseQueuePolicy policy OnlyTheExternalServiceAnswers"),
        Some(&vec![service.clone(), ext.clone(), op.clone(), act])
    );
    assert_eq!(
        all.get("RequestQueuePolicy policy OnlyTheExternalServiceReadsRequests"),
        Some(&vec![service, ext])
    );
}

/// The template, and its stack with every function.
fn every_function_stack() -> (Value, Stack) {
    let text = template_text();
    let template: Value = serde_yaml::from_str(&text).unwrap();
    let stack = offline_with(&text, &every_function());
    (template, stack)
}

/// The template's functions: all seven.
fn functions_of(template: &Value) -> Vec<(String, &Value)> {
    let functions = cfn::of_type(template, "AWS::Serverless::Function");
    assert_eq!(
        functions.len(),
        7,
        "the bridge and the publisher are in this stack"
    );
    functions
}

/// Every request of `allowed` is allowed, and every grant of the role `role` whose
/// action starts with `actions` is used by one of them.
fn allowed_and_every_grant_used(stack: &Stack, role: &str, allowed: &[Request], actions: &str) {
    for r in allowed {
        assert!(stack.evaluate(r).unwrap().is_allowed(), "{r:?}");
    }
    for (grant, st) in stack.grants(&stack.role(role)) {
        if !grant.action.starts_with(actions) {
            continue;
        }
        assert!(
            allowed
                .iter()
                .any(|r| Stack::covers(&grant, st, r).unwrap()),
            "unused grant of {role}: {} on {}",
            grant.action,
            grant.resource
        );
    }
}

/// CodeDeploy, shifting each function's `live` alias under CodeDeployRole, reads the
/// rollback alarms the functions name and moves their aliases: every such request is
/// allowed, every grant of the role is used by one, and another function's alias,
/// another alarm or another service assuming the role is not allowed.
#[test]
fn the_deploy_role_moves_only_this_stacks_aliases_and_reads_their_alarms() {
    let (template, stack) = every_function_stack();
    let role = stack.role("CodeDeployRole");
    let arn = |rest: String| format!("arn:aws:{rest}");
    let mut allowed = vec![stack.request(
        &Principal::Service("codedeploy.amazonaws.com".into()),
        "sts:AssumeRole",
        &stack.physical.role_arn("CodeDeployRole"),
    )];
    for (id, f) in &functions_of(&template) {
        let function = arn(format!(
            "lambda:{LOCAL_REGION}:{LOCAL_ACCOUNT}:function:{MAIN}-{id}"
        ));
        // Which of the two Lambda authorizes an alias action against is not
        // documented: both are granted, and both are asked here.
        for resource in [function.clone(), format!("{function}:live")] {
            for action in [
                "lambda:GetAlias",
                "lambda:UpdateAlias",
                "lambda:GetProvisionedConcurrencyConfig",
            ] {
                allowed.push(stack.request(&role, action, &resource));
            }
        }
        let alarms = cfn::path(f, &["Properties", "DeploymentPreference", "Alarms"])
            .and_then(Value::as_sequence)
            .unwrap();
        for a in alarms {
            let alarm = cfn::ref_name(a)
                .or_else(|| match cfn::intrinsic(a) {
                    Some((_, Value::Sequence(branches))) => cfn::ref_name(&branches[1]),
                    _ => None,
                })
                .unwrap();
            allowed.push(stack.request(
                &role,
                "cloudwatch:DescribeAlarms",
                &arn(format!(
                    "cloudwatch:{LOCAL_REGION}:{LOCAL_ACCOUNT}:alarm:{MAIN}-{alarm}"
                )),
            ));
        }
    }
    allowed_and_every_grant_used(&stack, "CodeDeployRole", &allowed, "");
    let refused = [
        stack.request(
            &role,
            "lambda:UpdateAlias",
            &arn(format!(
                "lambda:{LOCAL_REGION}:{LOCAL_ACCOUNT}:function:other-stack-Function:live"
            )),
        ),
        stack.request(
            &role,
            "lambda:UpdateFunctionCode",
            &arn(format!(
                "lambda:{LOCAL_REGION}:{LOCAL_ACCOUNT}:function:{MAIN}-RetryHandlerFunction"
            )),
        ),
        stack.request(
            &role,
            "cloudwatch:DescribeAlarms",
            &arn(format!(
                "cloudwatch:{LOCAL_REGION}:{LOCAL_ACCOUNT}:alarm:{MAIN}-TransactionsExhaustedAlarm"
            )),
        ),
        stack.request(
            &Principal::Service("lambda.amazonaws.com".into()),
            "sts:AssumeRole",
            &stack.physical.role_arn("CodeDeployRole"),
        ),
    ];
    for r in &refused {
        assert_eq!(stack.evaluate(r).unwrap(), Decision::NotAllowed, "{r:?}");
    }
}

/// The read-only operator role reads the `live` alias of this stack's functions and
/// the versions they route to (`retryctl versions`, verify's `versions` phase), each
/// grant asked for, and nothing of another stack's functions, no other alias, no
/// change. The local stack runs no Lambda function, so the recorded run cannot make
/// these calls; `tools/retryctl/tests/versions.rs` makes them against moto.
#[test]
fn the_read_role_reads_only_this_stacks_aliases_and_versions() {
    let (template, stack) = every_function_stack();
    let role = stack.role("OperatorReadRole");
    let function =
        |id: &str| format!("arn:aws:lambda:{LOCAL_REGION}:{LOCAL_ACCOUNT}:function:{MAIN}-{id}");
    let mut allowed = vec![];
    for (id, _) in &functions_of(&template) {
        let f = function(id);
        for r in [f.clone(), format!("{f}:live")] {
            allowed.push(stack.request(&role, "lambda:GetAlias", &r));
        }
        allowed.push(stack.request(&role, "lambda:GetFunctionConfiguration", &format!("{f}:7")));
    }
    allowed_and_every_grant_used(&stack, "OperatorReadRole", &allowed, "lambda:");
    let retry = function("RetryHandlerFunction");
    let other = format!(
        "arn:aws:lambda:{LOCAL_REGION}:{LOCAL_ACCOUNT}:function:other-stack-RetryHandlerFunction"
    );
    for (action, resource) in [
        ("lambda:GetAlias", format!("{other}:live")),
        ("lambda:GetFunctionConfiguration", format!("{other}:7")),
        ("lambda:GetAlias", format!("{retry}:staging")),
        ("lambda:UpdateAlias", format!("{retry}:live")),
        ("lambda:GetFunction", format!("{retry}:7")),
        ("lambda:InvokeFunction", format!("{retry}:live")),
    ] {
        assert_eq!(
            stack
                .evaluate(&stack.request(&role, action, &resource))
                .unwrap(),
            Decision::NotAllowed,
            "{action} on {resource}"
        );
    }
}

/// Outbox mode (`RequestDelivery=outbox`), run for real on its own server as the
/// direct-mode scenario is: the request queue and its DLQ FIFO; the starter, fed by the
/// intake queue's event source, leaves each transaction SENDING and publishes nothing;
/// the publisher, fed by the transactions stream's event source under its own role
/// (the records the template's filter keeps: SENDING, unclaimed), claims, reads the
/// payload, publishes to the FIFO queue and marks IN_PROGRESS, and notes a send claimed
/// too long ago instead of repeating it; its on-failure destination is its DLQ; the
/// reconciler publishes a SENDING record stuck past the threshold and notes one claimed
/// too long ago. Every call of the starter, the publisher and the reconciler is allowed
/// by its role in the outbox stack; every grant of the publisher's role, and the grants
/// outbox mode adds, is used; the sends outbox mode takes away from the starter and the
/// retry handler are not granted.
#[tokio::test(flavor = "multi_thread")]
async fn outbox_mode_calls_are_allowed_and_its_grants_used() {
    use aws_sdk_sqs::types::QueueAttributeName as A;
    let (recording, setup_sdk, mut p) = Recording::start().await;
    let endpoint = recording.proxy.endpoint.clone();
    let names = StackNames::new(MAIN);
    let setup_sqs = aws::clients::sqs(&setup_sdk);
    // The queues outbox mode has: the FIFO request queue and DLQ, the publisher's DLQ.
    let create = |name: String, fifo: bool| {
        let sqs = setup_sqs.clone();
        async move {
            let mut req = sqs.create_queue().queue_name(&name);
            if fifo {
                req = req
                    .attributes(A::FifoQueue, "true")
                    .attributes(A::DeduplicationScope, "messageGroup")
                    .attributes(A::FifoThroughputLimit, "perMessageGroupId");
            }
            let url = req.send().await.unwrap().queue_url().unwrap().to_owned();
            let arn = format!("arn:aws:sqs:{LOCAL_REGION}:{LOCAL_ACCOUNT}:{name}");
            testkit::provision::QueueRef { name, url, arn }
        }
    };
    p.request = create(format!("{MAIN}-request.fifo"), true).await;
    p.request_dlq = create(format!("{MAIN}-request-dlq.fifo"), true).await;
    let publisher_dlq = create(format!("{MAIN}-publisher-dlq"), false).await;
    let template = cfn::template();
    let mut ph = physical(&template, &p);
    ph.parameters
        .insert("RequestDelivery".into(), "outbox".into());
    ph.set_ref("PublisherDLQ", &publisher_dlq.url)
        .set_att("PublisherDLQ", "Arn", &publisher_dlq.arn)
        .set_att("PublisherDLQ", "QueueName", &publisher_dlq.name);
    let stack = Stack::from_template(&template, &template_text(), ph).unwrap();

    let env_of = |f: &str, extra: &[(&str, String)]| -> BTreeMap<String, String> {
        let mut m = env_with(&p, f, &[(vars::REQUEST_DELIVERY.name, "outbox")]);
        m.extend(extra.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
        m
    };
    let starter_sdk = sdk_config_as(&endpoint, "starter").await;
    let publisher_sdk = sdk_config_as(&endpoint, "publisher").await;
    let reconciler_sdk = sdk_config_as(&endpoint, "reconciler").await;
    let starter = starter::wiring::starter(
        &starter_sdk,
        &StarterConfig::from_lookup(&env_lookup(&env_of("starter", &[]))).unwrap(),
    )
    .unwrap();
    let publisher_env = env_of(
        "retry-handler",
        &[(vars::AUDIT_TABLE.name, names.audit_table.clone())],
    );
    let publisher_config =
        aws::config::PublisherConfig::from_lookup(&env_lookup(&publisher_env)).unwrap();
    let publisher = publisher::wiring::publisher(&publisher_sdk, &publisher_config).unwrap();
    let reconciler = reconciler::wiring::reconciler(
        &reconciler_sdk,
        &ReconcilerConfig::from_lookup(&env_lookup(&env_of("reconciler", &[]))).unwrap(),
    );
    let store = aws::dynamo::DynamoStore::new(
        aws::clients::dynamodb(&setup_sdk),
        &names.transactions_table,
    )
    .with_payloads_table(&names.payloads_table);

    // Five starts through the intake queue: each left SENDING, nothing published.
    for tx in ["TX-O1", "TX-O2", "TX-O3", "TX-O4", "TX-O5"] {
        let start = domain::intake::StartMessage {
            transaction_id: id(tx),
            payload: Payload::from_json(&format!(r#"{{"order":"{tx}"}}"#)).unwrap(),
            max_attempts: None,
            correlation_id: None,
        }
        .to_json();
        send(&setup_sqs, &p.intake.url, &start).await;
    }
    let (n, _) = intake(&starter_sdk, &starter, &p).await;
    assert_eq!(n, 5);
    for tx in ["TX-O1", "TX-O2", "TX-O3", "TX-O4", "TX-O5"] {
        assert_eq!(store_status(&store, tx).await, Status::Sending, "{tx}");
    }
    assert!(testkit::moto::take_all(&setup_sqs, &p.request.url)
        .await
        .unwrap()
        .is_empty());

    // TX-O3 and TX-O5 were claimed long ago by a publisher that never finished (the
    // claim older than the resend window): the image the stream still holds of TX-O3
    // is stale; TX-O5 waits for the reconciler.
    let long_ago = Timestamp::from_millis(SystemClock.now().millis() - 600_000);
    for tx in ["TX-O3", "TX-O5"] {
        let claimed = TransactionRecord {
            publishing_since: Some(long_ago),
            ..store.get(&id(tx)).await.unwrap().unwrap()
        };
        aws::clients::dynamodb(&setup_sdk)
            .update_item()
            .table_name(&names.transactions_table)
            .key(
                "transaction_id",
                aws_sdk_dynamodb::types::AttributeValue::S(tx.into()),
            )
            .update_expression("SET publishing_since = :t")
            .expression_attribute_values(
                ":t",
                aws::item::record_to_item(&claimed)["publishing_since"].clone(),
            )
            .send()
            .await
            .unwrap();
    }

    // The publisher's stream event source: the records its filter keeps, TX-O4 and
    // TX-O5 left out (the publisher missed them: the reconciler's rescue).
    let streams = aws::clients::dynamodbstreams(&publisher_sdk);
    let mut position = testkit::drain::StreamPosition::default();
    let changes = testkit::drain::drain_stream(&streams, &p.transactions_stream_arn, &mut position)
        .await
        .unwrap();
    let images: Vec<TransactionRecord> = changes
        .iter()
        .filter_map(|c| c.new.as_ref())
        .map(|flat| aws::item::record_from_flat(flat).unwrap())
        .filter(|r| r.status == Status::Sending && r.publishing_since.is_none())
        .filter(|r| !["TX-O4", "TX-O5"].contains(&r.transaction_id.as_str()))
        .collect();
    assert_eq!(images.len(), 3, "{images:?}");
    let event =
        testkit::events::stream(&images.iter().map(|r| (None, r)).collect::<Vec<_>>(), 1).unwrap();
    let m = Metrics::new("DeferredRetry", publisher::FUNCTION);
    let response = publisher.handle_event(&event, &m).await;
    assert!(response.batch_item_failures.is_empty(), "{response:?}");
    assert_eq!(m.count("AckPublished"), 2, "{m:?}");
    assert_eq!(m.count("AckPublishUnconfirmed"), 1, "{m:?}");
    // A batch it gave up on: the event source's on-failure record, under its role.
    send(
        &aws::clients::sqs(&publisher_sdk),
        &publisher_dlq.url,
        r#"{"requestContext":{"condition":"RetryAttemptsExhausted"},"DDBStreamBatchInfo":{"startSequenceNumber":"1","endSequenceNumber":"3"}}"#,
    )
    .await;

    // The reconciler: TX-O4 stuck SENDING past the threshold is published; TX-O5,
    // claimed too long ago, is not published again but noted.
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    let m = Metrics::new("DeferredRetry", "reconciler");
    reconciler.run(&m).await;
    for tx in ["TX-O1", "TX-O2", "TX-O3", "TX-O4", "TX-O5"] {
        assert_eq!(store_status(&store, tx).await, Status::InProgress, "{tx}");
    }
    let sent = testkit::moto::take_all(&setup_sqs, &p.request.url)
        .await
        .unwrap();
    assert_eq!(sent.len(), 3, "TX-O1, TX-O2, TX-O4 once each: {sent:?}");

    let calls = recording.stop().await;
    let requests = requests_of(&stack, &calls, "");
    let mut requests = requests;
    requests.extend(
        stack
            .log_requests("publisher")
            .into_iter()
            .map(|r| ("publisher".to_owned(), r)),
    );
    let problems = problems_where(&stack, &requests, |p| {
        ["starter:", "publisher:", "reconciler:"]
            .iter()
            .any(|f| p.starts_with(f))
            || p.contains("PublisherRole")
            || p.contains("NoteUnconfirmedPublishesInTheAuditTrail")
    });
    assert_eq!(problems, Vec::<String>::new());
    for role in ["StarterRole", "RetryHandlerRole"] {
        let r = stack.request(&stack.role(role), "sqs:SendMessage", &p.request.arn);
        assert_eq!(stack.evaluate(&r).unwrap(), Decision::NotAllowed, "{role}");
    }
}
