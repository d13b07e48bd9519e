//! Reads of the state table that no port covers: the counts by status and attempt
//! (`retryctl stats`, the demo's progress bar). A Scan with a projection of two
//! attributes: fine for an operator command or a local table, never used by a function.

use crate::error::CliError;
use crate::view::Stats;
use aws_sdk_dynamodb::types::AttributeValue;
use domain::Status;
use std::collections::HashMap;

/// An item as the DynamoDB SDK returns it.
pub type Item = HashMap<String, AttributeValue>;

/// Hands every item of `table` to `each`, page by page (a paginated Scan).
/// `attributes`: the projection (through name placeholders: `status` is a reserved
/// word); none = whole items. `consistent`: strongly consistent reads.
pub async fn scan_each(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    attributes: &[&str],
    consistent: bool,
    mut each: impl FnMut(&Item),
) -> Result<(), CliError> {
    let names: HashMap<String, String> = attributes
        .iter()
        .enumerate()
        .map(|(i, a)| (format!("#p{i}"), (*a).to_owned()))
        .collect();
    let projection = (!attributes.is_empty()).then(|| {
        (0..attributes.len())
            .map(|i| format!("#p{i}"))
            .collect::<Vec<_>>()
            .join(", ")
    });
    let mut start: Option<Item> = None;
    loop {
        let page = ddb
            .scan()
            .table_name(table)
            .consistent_read(consistent)
            .set_projection_expression(projection.clone())
            .set_expression_attribute_names((!names.is_empty()).then(|| names.clone()))
            .set_exclusive_start_key(start.take())
            .send()
            .await
            .map_err(|e| crate::error::sdk_error("Scan", table, e))?;
        page.items().iter().for_each(&mut each);
        match page.last_evaluated_key() {
            Some(k) if !k.is_empty() => start = Some(k.clone()),
            _ => break,
        }
    }
    Ok(())
}

pub async fn scan_stats(ddb: &aws_sdk_dynamodb::Client, table: &str) -> Result<Stats, CliError> {
    // Every status is a key, zeros included: scripts read the counts without guessing.
    let mut st = Stats {
        by_status: Status::ALL.into_iter().map(|s| (s, 0)).collect(),
        ..Stats::default()
    };
    scan_each(ddb, table, &["status", "current_attempt"], false, |item| {
        let status = item
            .get("status")
            .and_then(|v| v.as_s().ok())
            .and_then(|s| Status::parse(s));
        let attempt: u32 = item
            .get("current_attempt")
            .and_then(|v| v.as_n().ok())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        st.total += 1;
        let Some(status) = status else {
            st.unreadable += 1;
            return;
        };
        *st.by_status.entry(status).or_insert(0) += 1;
        *st.by_status_and_attempt
            .entry(status)
            .or_default()
            .entry(attempt)
            .or_insert(0) += 1;
    })
    .await?;
    Ok(st)
}
