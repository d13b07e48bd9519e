//! `retryctl list`: transactions by status, attempt and time of their last write.
//!
//! `--status FAILED` alone (with or without `--since/--until`) reads the sparse
//! `failed-index` — a Query per shard of the reconciler's shard count, which holds only
//! FAILED transactions — and one consistent GetItem per transaction listed: its cost
//! follows what is listed, never the size of the table. Every other filter is a Scan of
//! the state table with a filter expression: DynamoDB reads (and bills) every item, 0.5
//! read unit per 4 KB eventually consistent, whatever the filter keeps.

use crate::commands::{Output, Target};
use crate::error::CliError;
use crate::table::Item;
use crate::view;
use aws::dynamo::FailedEntry;
use aws::item::{attr, flat_from_dynamodb, record_from_flat};
use aws_sdk_dynamodb::types::AttributeValue;
use domain::ports::Records;
use domain::{Status, Timestamp, TransactionId, TransactionRecord};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::fmt::Write as _;

/// The filters of `retryctl list`, validated.
#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    pub status: Option<Status>,
    pub attempt: Option<u32>,
    pub since: Option<Timestamp>,
    pub until: Option<Timestamp>,
    pub limit: u32,
    pub after: Option<Token>,
    /// Scan even for `--status FAILED` (transactions that failed before the index
    /// existed carry no index key).
    pub scan: bool,
}

/// Where a page ends: the next page starts after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Token {
    /// The failed-index, ordered by (time of failure, transaction id).
    Failed(FailedEntry),
    /// The Scan, in table order: the last transaction listed.
    Scan(TransactionId),
}

impl Token {
    pub fn encode(&self) -> String {
        match self {
            Token::Failed(e) => format!("failed/{}/{}", e.updated_at.millis(), e.transaction_id),
            Token::Scan(id) => format!("scan/{id}"),
        }
    }

    pub fn decode(raw: &str) -> Result<Token, CliError> {
        let bad = |why: &str| CliError::bad("--next-token", raw, why);
        let id = |s: &str| {
            TransactionId::parse(s).map_err(|e| bad(&format!("names no transaction: {e}")))
        };
        match raw.split_once('/') {
            Some(("scan", rest)) => Ok(Token::Scan(id(rest)?)),
            Some(("failed", rest)) => {
                let (ms, tx) = rest
                    .split_once('/')
                    .ok_or_else(|| bad("expected failed/<millis>/<transaction id>"))?;
                let ms: i64 = ms
                    .parse()
                    .map_err(|_| bad("expected failed/<millis>/<transaction id>"))?;
                Ok(Token::Failed(FailedEntry {
                    updated_at: Timestamp::from_millis(ms),
                    transaction_id: id(tx)?,
                }))
            }
            _ => Err(bad(
                "not a token `list` printed (it starts with `failed/` or `scan/`)",
            )),
        }
    }
}

impl ListQuery {
    /// The query from the command line: every value checked, naming the flag.
    pub fn parse(
        status: Option<&str>,
        attempt: Option<u32>,
        since: Option<&str>,
        until: Option<&str>,
        limit: u32,
        next_token: Option<&str>,
        scan: bool,
    ) -> Result<ListQuery, CliError> {
        let status = status
            .map(|s| {
                Status::parse(&s.to_ascii_uppercase()).ok_or_else(|| {
                    CliError::bad(
                        "--status",
                        s,
                        "expected one of IN_PROGRESS, SCHEDULING, SCHEDULED, SENDING, SUCCEEDED, FAILED",
                    )
                })
            })
            .transpose()?;
        if attempt == Some(0) {
            return Err(CliError::bad("--attempt", "0", "attempts count from 1"));
        }
        let time = |flag: &'static str, raw: Option<&str>| {
            raw.map(|r| {
                Timestamp::parse(r).map_err(|_| {
                    CliError::bad(
                        flag,
                        r,
                        "expected RFC 3339 in UTC, e.g. 2026-12-04T07:30:00Z",
                    )
                })
            })
            .transpose()
        };
        let since = time("--since", since)?;
        let until = time("--until", until)?;
        if let (Some(s), Some(u)) = (since, until) {
            if s > u {
                return Err(CliError::bad(
                    "--until",
                    u.to_rfc3339(),
                    format!("is before --since {}", s.to_rfc3339()),
                ));
            }
        }
        if !(1..=1000).contains(&limit) {
            return Err(CliError::bad(
                "--limit",
                limit.to_string(),
                "must be from 1 to 1000",
            ));
        }
        let q = ListQuery {
            status,
            attempt,
            since,
            until,
            limit,
            after: next_token.map(Token::decode).transpose()?,
            scan,
        };
        match (&q.after, q.by_index()) {
            (Some(Token::Scan(_)), true) | (Some(Token::Failed(_)), false) => Err(CliError::bad(
                "--next-token",
                next_token.unwrap_or_default(),
                "belongs to a listing with other filters: repeat the filters of the page that printed it",
            )),
            _ => Ok(q),
        }
    }

    /// True when the failed-index answers (no Scan).
    pub fn by_index(&self) -> bool {
        self.status == Some(Status::Failed) && !self.scan
    }

    fn keeps(&self, r: &TransactionRecord) -> bool {
        self.status.is_none_or(|s| r.status == s)
            && self.attempt.is_none_or(|a| r.current_attempt.get() == a)
            && self.since.is_none_or(|t| r.updated_at >= t)
            && self.until.is_none_or(|t| r.updated_at <= t)
    }
}

/// One page of a listing.
#[derive(Debug, Clone, Default)]
pub struct Listed {
    pub records: Vec<TransactionRecord>,
    pub next: Option<Token>,
    /// `failed-index` or `scan`.
    pub source: &'static str,
}

/// The FAILED transactions from the failed-index: each shard queried past the token
/// (at most `limit + 1` entries each), merged by (time of failure, id), each read
/// (consistent) and kept while still FAILED and matching the other filters.
async fn by_index(t: &Target, q: &ListQuery) -> Result<Listed, CliError> {
    let shards = t.shards()?;
    let store = t.store()?;
    let after = match &q.after {
        Some(Token::Failed(e)) => Some(e.clone()),
        _ => None,
    };
    let from = match (&after, q.since) {
        (Some(a), Some(s)) => Some(a.updated_at.max(s)),
        (Some(a), None) => Some(a.updated_at),
        (None, s) => s,
    };
    let want = q.limit as usize + 1;
    let mut entries: Vec<FailedEntry> = Vec::new();
    // A shard with more than was fetched: the listing goes on past what is examined.
    let mut truncated = false;
    for shard in 0..shards {
        let mut cursor: Option<String> = None;
        let mut got = 0usize;
        loop {
            let page = store
                .query_failed(shard, from, q.until, q.limit + 1, cursor.as_deref())
                .await?;
            for e in page.entries {
                if after.as_ref().is_none_or(|a| &e > a) {
                    if got == want {
                        truncated = true;
                        break;
                    }
                    entries.push(e);
                    got += 1;
                }
            }
            match page.next {
                Some(c) if got < want => cursor = Some(c),
                Some(_) => {
                    truncated = true;
                    break;
                }
                None => break,
            }
        }
    }
    entries.sort();
    let mut out = Listed {
        source: "failed-index",
        ..Listed::default()
    };
    let mut last = None;
    for e in &entries {
        if out.records.len() == q.limit as usize {
            break;
        }
        last = Some(e.clone());
        // Read again: replayed since the index answered, it is not FAILED any more.
        if let Some(r) = store.get(&e.transaction_id).await? {
            if q.keeps(&r) {
                out.records.push(r);
            }
        }
    }
    let examined = entries
        .iter()
        .position(|e| Some(e) == last.as_ref())
        .map_or(0, |i| i + 1);
    if examined < entries.len() || truncated {
        out.next = last.map(Token::Failed);
    }
    Ok(out)
}

/// Any other filter: a Scan of the state table with a filter expression, page after
/// page until `limit` transactions are kept.
async fn by_scan(t: &Target, q: &ListQuery) -> Result<Listed, CliError> {
    let table = t.transactions_table()?;
    let ddb = aws_sdk_dynamodb::Client::new(&t.sdk);
    let mut names: HashMap<String, String> = HashMap::new();
    let mut values: HashMap<String, AttributeValue> = HashMap::new();
    let mut filter: Vec<String> = Vec::new();
    if let Some(s) = q.status {
        names.insert("#st".into(), attr::STATUS.into());
        values.insert(":st".into(), AttributeValue::S(s.as_str().into()));
        filter.push("#st = :st".into());
    }
    if let Some(a) = q.attempt {
        names.insert("#ca".into(), attr::CURRENT_ATTEMPT.into());
        values.insert(":ca".into(), AttributeValue::N(a.to_string()));
        filter.push("#ca = :ca".into());
    }
    if let Some(s) = q.since {
        names.insert("#up".into(), attr::UPDATED_AT.into());
        values.insert(":since".into(), AttributeValue::S(s.to_rfc3339()));
        filter.push("#up >= :since".into());
    }
    if let Some(u) = q.until {
        names.insert("#up".into(), attr::UPDATED_AT.into());
        values.insert(":until".into(), AttributeValue::S(u.to_rfc3339()));
        filter.push("#up <= :until".into());
    }
    let mut start: Option<Item> = match &q.after {
        Some(Token::Scan(id)) => Some(HashMap::from([(
            attr::TRANSACTION_ID.to_owned(),
            AttributeValue::S(id.as_str().to_owned()),
        )])),
        _ => None,
    };
    let mut out = Listed {
        source: "scan",
        ..Listed::default()
    };
    loop {
        let page = ddb
            .scan()
            .table_name(&table)
            .set_filter_expression((!filter.is_empty()).then(|| filter.join(" AND ")))
            .set_expression_attribute_names((!names.is_empty()).then(|| names.clone()))
            .set_expression_attribute_values((!values.is_empty()).then(|| values.clone()))
            .set_exclusive_start_key(start.take())
            .send()
            .await
            .map_err(|e| crate::error::sdk_error("Scan", &table, e))?;
        let items = page.items();
        for (i, item) in items.iter().enumerate() {
            let r = record_from_flat(&flat_from_dynamodb(item))
                .map_err(|e| CliError::Aws(format!("an item of `{table}` does not decode: {e}")))?;
            if !q.keeps(&r) {
                continue;
            }
            out.records.push(r);
            if out.records.len() == q.limit as usize {
                let rest = i + 1 < items.len();
                let more = page.last_evaluated_key().is_some_and(|k| !k.is_empty());
                if rest || more {
                    out.next = out
                        .records
                        .last()
                        .map(|r| Token::Scan(r.transaction_id.clone()));
                }
                return Ok(out);
            }
        }
        match page.last_evaluated_key() {
            Some(k) if !k.is_empty() => start = Some(k.clone()),
            _ => return Ok(out),
        }
    }
}

/// Lists the transactions `q` selects: one page.
pub async fn list(t: &Target, q: &ListQuery) -> Result<Listed, CliError> {
    if q.by_index() {
        by_index(t, q).await
    } else {
        by_scan(t, q).await
    }
}

/// One transaction as `list` prints it: id, status, attempt of max, time of the last
/// write, last outcome and reason.
pub fn line(r: &TransactionRecord) -> String {
    let mut s = format!(
        "{:<24} {:<11} attempt {}/{}  updated {}",
        r.transaction_id.as_str(),
        r.status.as_str(),
        r.current_attempt,
        r.max_attempts,
        r.updated_at
    );
    if let Some(o) = r.last_outcome {
        let _ = write!(s, "  {}", o.as_str());
    }
    if let Some(x) = &r.last_reason {
        let _ = write!(s, " {x}");
    }
    s
}

/// `retryctl list`: text, one line per transaction (the page summary on stderr); JSON,
/// one line per transaction (the record's attributes, every key present) and a last
/// line with `next_token`.
pub async fn run(t: &Target, q: &ListQuery) -> Result<Output, CliError> {
    let page = list(t, q).await?;
    let mut text = String::new();
    for r in &page.records {
        let _ = writeln!(text, "{}", line(r));
    }
    let next = page.next.as_ref().map(Token::encode);
    eprintln!(
        "retryctl: {} listed ({}){}",
        page.records.len(),
        if page.source == "scan" {
            "a Scan of the state table"
        } else {
            "the failed-index"
        },
        next.as_ref()
            .map(|n| format!("; next page: --next-token '{n}'"))
            .unwrap_or_default()
    );
    let mut rows: Vec<Value> = page.records.iter().map(view::record_json).collect();
    rows.push(json!({
        "listed": page.records.len(),
        "source": page.source,
        "next_token": next,
    }));
    Ok(Output {
        text,
        json: Value::Array(rows),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_bad_ones_name_the_flag() {
        for t in [
            Token::Failed(FailedEntry {
                updated_at: Timestamp::from_millis(1_790_000_000_123),
                transaction_id: TransactionId::parse("TX/with/slashes").unwrap(),
            }),
            Token::Scan(TransactionId::parse("TX-1").unwrap()),
        ] {
            assert_eq!(Token::decode(&t.encode()).unwrap(), t);
        }
        let e = Token::decode("nope").unwrap_err().to_string();
        assert!(
            e.starts_with("invalid value for --next-token: `nope`"),
            "{e}"
        );
        assert!(Token::decode("failed/x/TX-1").is_err());
    }

    #[test]
    fn filters_are_checked_and_only_failed_alone_uses_the_index() {
        let q =
            |status, attempt, scan| ListQuery::parse(status, attempt, None, None, 100, None, scan);
        assert!(q(Some("failed"), None, false).unwrap().by_index());
        assert!(q(Some("FAILED"), Some(3), false).unwrap().by_index());
        assert!(!q(Some("FAILED"), None, true).unwrap().by_index());
        assert!(!q(Some("SCHEDULED"), None, false).unwrap().by_index());
        assert!(!q(None, Some(2), false).unwrap().by_index());
        let e = q(Some("LOST"), None, false).unwrap_err().to_string();
        assert!(e.contains("--status: `LOST`"), "{e}");
        let e = ListQuery::parse(None, None, Some("yesterday"), None, 1, None, false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--since: `yesterday`"), "{e}");
        let e = ListQuery::parse(
            None,
            None,
            Some("2026-12-04T08:00:00Z"),
            Some("2026-12-04T07:00:00Z"),
            1,
            None,
            false,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("is before --since"), "{e}");
        assert!(ListQuery::parse(None, None, None, None, 0, None, false).is_err());
        // A token of the other kind of listing is refused.
        let e = ListQuery::parse(
            Some("FAILED"),
            None,
            None,
            None,
            5,
            Some("scan/TX-1"),
            false,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("other filters"), "{e}");
    }
}
