//! Reads of the state table that no port covers: the counts by status and attempt
//! (`retryctl stats`, the demo's progress bar). A Scan with a projection of two
//! attributes: fine for an operator command or a local table, never used by a function.

use crate::error::CliError;
use crate::view::Stats;
use aws_sdk_dynamodb::types::AttributeValue;

pub async fn scan_stats(ddb: &aws_sdk_dynamodb::Client, table: &str) -> Result<Stats, CliError> {
    let mut st = Stats::default();
    let mut start: Option<std::collections::HashMap<String, AttributeValue>> = None;
    loop {
        let page = ddb
            .scan()
            .table_name(table)
            .projection_expression("#s, #a")
            .expression_attribute_names("#s", "status")
            .expression_attribute_names("#a", "current_attempt")
            .set_exclusive_start_key(start.take())
            .send()
            .await
            .map_err(|e| {
                CliError::Aws(format!(
                    "Scan of `{table}`: {}",
                    aws_sdk_dynamodb::error::DisplayErrorContext(e)
                ))
            })?;
        for item in page.items() {
            let status = item
                .get("status")
                .and_then(|v| v.as_s().ok())
                .cloned()
                .unwrap_or_else(|| "?".into());
            let attempt: u32 = item
                .get("current_attempt")
                .and_then(|v| v.as_n().ok())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            st.total += 1;
            *st.by_status.entry(status.clone()).or_insert(0) += 1;
            *st.by_status_and_attempt
                .entry(status)
                .or_default()
                .entry(attempt)
                .or_insert(0) += 1;
        }
        match page.last_evaluated_key() {
            Some(k) if !k.is_empty() => start = Some(k.clone()),
            _ => break,
        }
    }
    Ok(st)
}
