//! `retryctl erase` on a running local stack, through the binary: a live transaction
//! is refused naming its status; a FAILED one loses its payload and every reason text
//! (record and audit trail) and gains an audit entry naming what was erased, by whom
//! and why; it can no longer be replayed; erasing again is harmless and says so;
//! `--force` resolves a live one first, which then carries its TTL.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

mod common;

use aws::config::StackNames;
use aws_sdk_dynamodb::types::AttributeValue;
use common::{options, retryctl, start_stack, submit, wait_status};
use domain::audit::Notice;
use domain::retention::Erased;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(120);

async fn item(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    tx: &str,
) -> Option<std::collections::HashMap<String, AttributeValue>> {
    testkit::provision::read_item(ddb, table, tx).await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn erase_removes_the_payload_and_reasons_records_it_and_refuses_a_live_one() {
    // Every answer CANCELLED, retries an hour apart: max 1 fails at once, max 3 waits.
    let s = start_stack(options("erase", 3600, 1.0));
    for (tx, max) in [("TX-ER-F", "1"), ("TX-ER-L", "3")] {
        submit(&s, tx, r#"{"customer":"Ana Pérez"}"#, max).await;
    }
    wait_status(&s, "TX-ER-F", "FAILED", LONG).await;
    wait_status(&s, "TX-ER-L", "SCHEDULED", LONG).await;
    let names = StackNames::new(&s.prefix);
    let sdk = testkit::moto::sdk_config(&s.endpoint).await;
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    let audit = aws::audit::AuditWriter::new(ddb.clone(), &names.audit_table, 365);

    // A live transaction: refused (exit 4), its status named, nothing touched.
    let r = retryctl(&s, &["erase", "TX-ER-L", "--reason", "customer request"]).await;
    assert_eq!(r.code, 4, "{r:?}");
    assert!(
        r.stderr.contains("is SCHEDULED") && r.stderr.contains("--force"),
        "{r:?}"
    );
    assert!(item(&ddb, &names.payloads_table, "TX-ER-L").await.is_some());

    // A FAILED one: payload gone, reasons gone, one entry saying so.
    let record = item(&ddb, &names.transactions_table, "TX-ER-F")
        .await
        .unwrap();
    assert!(record.contains_key("last_reason"), "{record:?}");
    let r = retryctl(
        &s,
        &["erase", "TX-ER-F", "--reason", "GDPR request 118", "--json"],
    )
    .await;
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    assert_eq!(v["result"], "erased", "{v}");
    assert_eq!(v["status"], "FAILED", "{v}");
    assert_eq!(
        v["erased"],
        serde_json::json!(["PAYLOAD", "SERVICE_REASON"]),
        "{v}"
    );
    assert!(item(&ddb, &names.payloads_table, "TX-ER-F").await.is_none());
    let record = item(&ddb, &names.transactions_table, "TX-ER-F")
        .await
        .unwrap();
    assert!(!record.contains_key("last_reason"), "{record:?}");
    assert_eq!(record["status"], AttributeValue::S("FAILED".into()));

    let trail = audit
        .history(&domain::TransactionId::parse("TX-ER-F").unwrap())
        .await
        .unwrap();
    let erasures: Vec<_> = trail
        .iter()
        .filter(|e| e.notice == Some(Notice::Erased))
        .collect();
    assert_eq!(erasures.len(), 1, "{trail:?}");
    let e = erasures[0];
    assert_eq!(
        e.erased.iter().collect::<Vec<_>>(),
        [Erased::Payload, Erased::ServiceReason]
    );
    let op = e.operator.as_ref().unwrap();
    assert!(!op.caller.is_empty(), "{e:?}");
    assert_eq!(op.reason.as_deref(), Some("GDPR request 118"));
    assert!(
        trail.iter().all(|e| e.reason.is_none()),
        "no reason text left: {trail:?}"
    );
    assert!(trail
        .iter()
        .any(|e| e.to == domain::Status::Failed && e.is_transition()));
    // `show` names the erasure.
    let shown = retryctl(&s, &["show", "TX-ER-F", "--json"]).await.json();
    let last = shown["timeline"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["notice"], "ERASED", "{last}");
    assert_eq!(
        last["erased"],
        serde_json::json!(["PAYLOAD", "SERVICE_REASON"])
    );

    // Its payload gone, it cannot be replayed.
    let r = retryctl(&s, &["replay", "TX-ER-F", "--reason", "service back"]).await;
    assert_eq!(r.code, 4, "{r:?}");
    assert!(r.stderr.contains("no payload any more"), "{r:?}");
    assert_eq!(
        item(&ddb, &names.transactions_table, "TX-ER-F")
            .await
            .unwrap()["status"],
        AttributeValue::S("FAILED".into())
    );

    // Again: nothing left, nothing written, said so.
    let r = retryctl(
        &s,
        &["erase", "TX-ER-F", "--reason", "GDPR request 118", "--json"],
    )
    .await;
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.json()["result"], "already-erased");
    let trail = audit
        .history(&domain::TransactionId::parse("TX-ER-F").unwrap())
        .await
        .unwrap();
    assert_eq!(
        trail
            .iter()
            .filter(|e| e.notice == Some(Notice::Erased))
            .count(),
        1
    );

    // --force: resolved first (SUCCEEDED, schedule deleted, its TTL set), then erased.
    let r = retryctl(
        &s,
        &[
            "erase",
            "TX-ER-L",
            "--reason",
            "customer request",
            "--force",
            "--json",
        ],
    )
    .await;
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    assert_eq!(v["status"], "SUCCEEDED", "{v}");
    assert_eq!(v["ended"]["result"], "resolved", "{v}");
    assert!(
        v["erased"].as_array().unwrap().contains(&"PAYLOAD".into()),
        "{v}"
    );
    assert!(item(&ddb, &names.payloads_table, "TX-ER-L").await.is_none());
    let record = item(&ddb, &names.transactions_table, "TX-ER-L")
        .await
        .unwrap();
    let purge: i64 = record[aws::retention::PURGE_AT]
        .as_n()
        .unwrap()
        .parse()
        .unwrap();
    let updated = domain::Timestamp::parse(record["updated_at"].as_s().unwrap()).unwrap();
    assert_eq!(
        purge,
        updated.epoch_seconds() + i64::from(domain::defaults::RETENTION_DAYS) * 86_400
    );
}
