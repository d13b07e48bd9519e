//! The audit writer Lambda: DynamoDB stream of the transactions table → audit table.
//! Everything but the wiring lives in the library (`audit_writer`).

// The batch future nests the SDK call futures deeper than the default limit.
#![recursion_limit = "256"]

use audit_writer::AuditFunction;
use aws::audit::{AuditWriter, Retention};
use aws::config::AuditWriterConfig;

runtime::lambda_main!(
    AuditWriterConfig::from_env,
    runtime::lambda::infallible(wire),
    AuditFunction::invoke,
);

/// The audit writer on its tables, from its configuration.
fn wire(sdk: &runtime::lambda::SdkConfig, config: &AuditWriterConfig) -> AuditFunction {
    let writer = AuditWriter::new(
        aws::clients::dynamodb(sdk),
        &config.audit_table,
        Retention::new(config.retention_days, config.transaction_deadline),
    )
    .with_payloads(&config.payloads_table, config.retention);
    AuditFunction {
        writer,
        namespace: config.metrics_namespace.clone(),
    }
}
