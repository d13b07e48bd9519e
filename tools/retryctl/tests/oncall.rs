//! The on-call loop on a running local stack, through the binary: list what failed,
//! look at one, replay the whole list as a dry run and then for real with a reason,
//! find the reason and the caller in the audit trail, and see every replayed
//! transaction end terminal.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

mod common;

use common::{options, retryctl, start_stack, submit, wait_status, Ran};
use serde_json::Value;
use std::collections::BTreeSet;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(120);
const IDS: [&str; 3] = ["TX-ONCALL-1", "TX-ONCALL-2", "TX-ONCALL-3"];

/// The JSON lines of a run.
fn lines(r: &Ran) -> Vec<Value> {
    r.stdout
        .lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}\n{r:?}"))
        })
        .collect()
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

/// The keys docs/operations.md documents for each kind of `list --json` line
/// (`transaction`, `page`).
fn documented_list_keys(kind: &str) -> BTreeSet<String> {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/operations.md"
    ))
    .unwrap();
    let start = doc.find("<!-- list-schema:start -->").unwrap();
    let end = doc.find("<!-- list-schema:end -->").unwrap();
    doc[start..end]
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            (cells.len() > 3 && cells[1] == kind).then(|| cells[2].trim_matches('`').to_owned())
        })
        .collect()
}

/// The FAILED transactions `list` finds, as (id, updated_at, current_attempt).
async fn failed(s: &common::Running) -> Vec<(String, String, u64)> {
    let r = retryctl(s, &["list", "--status", "FAILED", "--json"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    let mut out: Vec<(String, String, u64)> = lines(&r)
        .iter()
        .filter(|l| l.get("transaction_id").is_some())
        .map(|l| {
            (
                l["transaction_id"].as_str().unwrap().to_owned(),
                l["updated_at"].as_str().unwrap().to_owned(),
                l["current_attempt"].as_u64().unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

/// GIVEN transactions the service always refuses (max 2 attempts), all FAILED WHEN an
/// operator lists them, shows one, replays the list as a dry run and then for real with
/// a reason THEN the dry run changes nothing, the replay's audit entry names the reason
/// and the caller, and every replayed transaction ends terminal with its new attempts
/// spent.
#[tokio::test(flavor = "multi_thread")]
async fn list_show_replay_dry_run_then_for_real_with_a_reason() {
    let s = start_stack(options("oncall", 1, 1.0));
    for id in IDS {
        submit(&s, id, r#"{"n":1}"#, "2").await;
    }
    for id in IDS {
        wait_status(&s, id, "FAILED", LONG).await;
    }

    // 1. list --status FAILED --json: the failed-index, every documented key.
    let listed = retryctl(&s, &["list", "--status", "FAILED", "--json"]).await;
    assert_eq!(listed.code, 0, "{listed:?}");
    assert!(listed.stderr.contains("(the failed-index)"), "{listed:?}");
    let rows = lines(&listed);
    let (txs, page): (Vec<&Value>, Vec<&Value>) =
        rows.iter().partition(|l| l.get("transaction_id").is_some());
    let ids: BTreeSet<&str> = txs
        .iter()
        .map(|l| l["transaction_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, IDS.into_iter().collect());
    for t in &txs {
        assert_eq!(keys(t), documented_list_keys("transaction"), "{t}");
        assert_eq!(t["status"], "FAILED");
        assert_eq!(t["schema_version"], 1);
    }
    assert_eq!(page.len(), 1, "one page line: {rows:?}");
    assert_eq!(keys(page[0]), documented_list_keys("page"));
    assert_eq!(page[0]["listed"], 3);
    assert_eq!(page[0]["next_token"], Value::Null);
    assert_eq!(page[0]["source"], "failed-index");

    // 2. show one.
    let shown = retryctl(&s, &["show", IDS[0], "--json"]).await;
    assert_eq!(shown.code, 0, "{shown:?}");
    let shown = shown.json();
    assert_eq!(shown["record"]["status"], "FAILED");
    let before_trail = shown["timeline"].as_array().unwrap().len();
    assert_eq!(
        shown["timeline"].as_array().unwrap().last().unwrap()["to"],
        "FAILED"
    );

    let dir = std::env::temp_dir().join(testkit::moto::unique_prefix("oncall"));
    std::fs::create_dir_all(&dir).unwrap();
    let list_file = dir.join("failed.jsonl");
    std::fs::write(&list_file, &listed.stdout).unwrap();
    let list_path = list_file.to_str().unwrap();

    // 3. The dry run says what would change for each, and changes nothing.
    let before = failed(&s).await;
    let dry = retryctl(
        &s,
        &["replay", "--from-list", list_path, "--dry-run", "--json"],
    )
    .await;
    assert_eq!(dry.code, 0, "{dry:?}");
    let dry_rows = lines(&dry);
    assert_eq!(
        dry_rows.len(),
        4,
        "three transactions and the summary: {dry:?}"
    );
    for row in &dry_rows[..3] {
        assert_eq!(row["ok"], true, "{row}");
        assert_eq!(row["result"], "would-replay", "{row}");
        let status = row["changes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["attribute"] == "status")
            .unwrap();
        assert_eq!(
            (&status["from"], &status["to"]),
            (&"FAILED".into(), &"SCHEDULING".into())
        );
        assert_eq!(row["effects"][0], "publish-retry attempt 3", "{row}");
    }
    assert_eq!(dry_rows[3]["dry_run"], true);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(failed(&s).await, before, "the dry run wrote nothing");
    let again = retryctl(&s, &["show", IDS[0], "--json"]).await.json();
    assert_eq!(again["timeline"].as_array().unwrap().len(), before_trail);

    // Resolving them would be refused, each said, exit 4 (the first failure's code).
    let refused = retryctl(&s, &["resolve", "--from-list", list_path, "--dry-run"]).await;
    assert_eq!(refused.code, 4, "{refused:?}");
    assert_eq!(
        refused
            .stdout
            .lines()
            .filter(|l| l.contains(": refused — "))
            .count(),
        3,
        "{refused:?}"
    );
    assert!(
        refused
            .stdout
            .contains("resolve: 0 of 3 done, 3 failed; dry run: nothing written"),
        "{refused:?}"
    );
    // A bad filter is named, as JSON under --json.
    let bad = retryctl(&s, &["list", "--status", "LOST", "--json"]).await;
    assert_eq!(bad.code, 2, "{bad:?}");
    assert_eq!(bad.json()["error"], "bad-argument");

    // 4. For real, with a reason.
    let reason = "INC-7: the service is back";
    let done = retryctl(
        &s,
        &[
            "replay",
            "--from-list",
            list_path,
            "--reason",
            reason,
            "--json",
        ],
    )
    .await;
    assert_eq!(done.code, 0, "{done:?}");
    let done_rows = lines(&done);
    assert_eq!(done_rows.len(), 4, "{done:?}");
    for row in &done_rows[..3] {
        assert_eq!(
            (&row["ok"], &row["result"]),
            (&true.into(), &"replayed".into()),
            "{row}"
        );
    }
    let summary = &done_rows[3];
    assert_eq!(summary["reason"], reason);
    let caller = summary["caller"].as_str().unwrap().to_owned();
    assert!(caller.starts_with("arn:aws:"), "{caller}");

    // 5. Every replayed transaction ends terminal (the service refuses again: FAILED
    // with the two new attempts spent), and its trail holds who replayed it and why.
    for id in IDS {
        let v = wait_status(&s, id, "FAILED", LONG).await;
        assert_eq!(v["record"]["current_attempt"], 4, "{v}");
        let replays: Vec<&Value> = v["timeline"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["actor"] == "operator")
            .collect();
        assert_eq!(replays.len(), 1, "{v}");
        assert_eq!(replays[0]["from"], "FAILED");
        assert_eq!(replays[0]["to"], "SCHEDULING");
        assert_eq!(replays[0]["operator_reason"], reason);
        assert_eq!(replays[0]["operator_caller"], caller.as_str());
    }
    let text = retryctl(&s, &["show", IDS[0]]).await;
    assert!(
        text.stdout.contains(&format!("by {caller}: {reason}")),
        "{}",
        text.stdout
    );
    // Failed again, they are listed again, at their new attempt.
    let after = failed(&s).await;
    assert_eq!(after.len(), 3);
    assert!(
        after.iter().all(|(_, _, attempt)| *attempt == 4),
        "{after:?}"
    );
}
