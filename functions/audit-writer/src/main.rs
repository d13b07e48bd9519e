//! The audit writer Lambda: DynamoDB stream of the transactions table → audit table.
//! Everything but the wiring lives in the library (`audit_writer::handle`).

// The batch future nests the SDK call futures deeper than the default limit.
#![recursion_limit = "256"]

use aws_lambda_events::dynamodb::Event;
use lambda_runtime::Error;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let (config, sdk) = runtime::lambda::start(aws::config::AuditWriterConfig::from_env).await?;
    let writer = aws::audit::AuditWriter::new(
        aws::clients::dynamodb(&sdk),
        &config.audit_table,
        aws::audit::Retention::new(config.retention_days, config.transaction_deadline),
    )
    .with_payloads(&config.payloads_table, config.retention);
    let (writer, namespace) = (&writer, config.metrics_namespace.as_str());
    runtime::lambda::serve(move |event: Event| async move {
        let metrics = audit_writer::metrics(namespace);
        let result = audit_writer::handle(writer, &event, &metrics).await;
        metrics.emit();
        result
    })
    .await
}
