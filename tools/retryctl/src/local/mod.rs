//! The local stack: emulators of what AWS runs around the functions, against moto.
//!
//! - [`esm`]: Lambda's SQS event source mapping (batches, partial batch failures,
//!   visibility timeouts, maximum concurrency).
//! - [`scheduler`]: EventBridge Scheduler delivering one-time schedules.
//! - [`external`]: the external service on the request and response queues.
//! - [`stack`]: all of them wired together with the handlers, the audit stream and
//!   the reconciler's cron.

pub mod esm;
pub mod external;
pub mod scheduler;
pub mod stack;
pub mod stop;

use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::Mutex;

/// An SQS client that also resolves queue ARNs to URLs (cached), as services that
/// target a queue by ARN must.
#[derive(Debug, Clone)]
pub struct SqsDirectory {
    client: aws_sdk_sqs::Client,
    urls: Arc<Mutex<HashMap<String, String>>>,
}

impl SqsDirectory {
    pub fn new(client: aws_sdk_sqs::Client) -> Self {
        Self {
            client,
            urls: Arc::default(),
        }
    }

    pub fn client(&self) -> &aws_sdk_sqs::Client {
        &self.client
    }

    /// `arn:aws:sqs:<region>:<account>:<name>` → queue URL.
    pub async fn url_for_arn(&self, arn: &str) -> Result<String, String> {
        if let Some(u) = self.urls.lock().await.get(arn) {
            return Ok(u.clone());
        }
        let parts: Vec<&str> = arn.split(':').collect();
        let (account, name) = match parts.as_slice() {
            ["arn", _, "sqs", _, account, name] => (*account, *name),
            _ => return Err(format!("`{arn}` is not an SQS queue ARN")),
        };
        let out = self
            .client
            .get_queue_url()
            .queue_name(name)
            .queue_owner_aws_account_id(account)
            .send()
            .await
            .map_err(|e| {
                format!(
                    "GetQueueUrl for `{arn}`: {}",
                    aws_sdk_sqs::error::DisplayErrorContext(e)
                )
            })?;
        let url = out
            .queue_url()
            .ok_or_else(|| format!("GetQueueUrl for `{arn}` returned no URL"))?
            .to_owned();
        self.urls.lock().await.insert(arn.to_owned(), url.clone());
        Ok(url)
    }
}
