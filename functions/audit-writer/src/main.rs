//! The audit writer Lambda: DynamoDB stream of the transactions table → audit table.
//! Everything but the wiring lives in the library (`audit_writer::handle`).

use aws_lambda_events::dynamodb::Event;
use lambda_runtime::{service_fn, Error, LambdaEvent};

#[tokio::main]
async fn main() -> Result<(), Error> {
    runtime::telemetry::init();
    let config = aws::config::AuditWriterConfig::from_env().inspect_err(|e| {
        tracing::error!(error = %e, "invalid configuration");
    })?;
    let sdk = aws::config::load_sdk_config().await;
    let writer = aws::audit::AuditWriter::new(
        aws::clients::dynamodb(&sdk),
        &config.audit_table,
        config.retention_days,
    );
    let (writer, namespace) = (&writer, config.metrics_namespace.as_str());
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Event>| async move {
        let metrics = audit_writer::metrics(namespace);
        let result = audit_writer::handle(writer, &event.payload, &metrics).await;
        metrics.emit();
        result.map_err(Error::from)
    }))
    .await
}
