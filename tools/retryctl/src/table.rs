//! Reads of the state table that no port covers: the counts by status and attempt
//! (`retryctl stats`). A Scan ([`aws::scan`]) with a projection of two attributes:
//! fine for an operator command, never used by a function.

use crate::error::CliError;
use crate::view::Stats;
use domain::Status;

pub use aws::scan::Item;

pub async fn scan_stats(ddb: &aws_sdk_dynamodb::Client, table: &str) -> Result<Stats, CliError> {
    // Every status is a key, zeros included: scripts read the counts without guessing.
    let mut st = Stats {
        by_status: Status::ALL.iter().copied().map(|s| (s, 0)).collect(),
        ..Stats::default()
    };
    aws::scan::scan_each(ddb, table, &["status", "current_attempt"], false, |item| {
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
    .await
    .map_err(|e| {
        CliError::AwsCall(crate::error::AwsFailure {
            resource: Some(table.to_owned()),
            ..e.into()
        })
    })?;
    Ok(st)
}
