//! What the client saw of each AWS service during a load test: its calls, and the
//! attempts the SDK made past the first one of a call (its retries: throttling,
//! transient 5xx, timeouts, cut connections — `aws::clients`' bounded policy), as an
//! interceptor on the clients the load test uses. The clients keep the retry policy
//! and timeouts every other caller has; the interceptor only counts.

use aws_config::SdkConfig;
use aws_sdk_dynamodb::config::interceptors::{
    BeforeSerializationInterceptorContextRef, BeforeTransmitInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::BoxError;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

#[derive(Debug, Default)]
struct Counter {
    calls: AtomicU64,
    attempts: AtomicU64,
}

/// One service's calls as the client saw them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ServiceCalls {
    /// API calls made.
    pub calls: u64,
    /// Attempts past the first of a call: the SDK retried them (throttled, 5xx,
    /// timed out or cut off).
    pub sdk_retries: u64,
}

/// The counters of the three clients a load test uses.
#[derive(Debug, Clone, Default)]
pub struct ClientMeter {
    dynamodb: Arc<Counter>,
    sqs: Arc<Counter>,
    scheduler: Arc<Counter>,
}

#[derive(Debug)]
struct Tap(Arc<Counter>);

impl Intercept for Tap {
    fn name(&self) -> &'static str {
        "LoadtestClientMeter"
    }

    fn read_before_execution(
        &self,
        _: &BeforeSerializationInterceptorContextRef<'_>,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        self.0.calls.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn read_before_attempt(
        &self,
        _: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        self.0.attempts.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

impl Counter {
    fn snapshot(&self) -> ServiceCalls {
        let calls = self.calls.load(Ordering::Relaxed);
        ServiceCalls {
            calls,
            sdk_retries: self.attempts.load(Ordering::Relaxed).saturating_sub(calls),
        }
    }
}

/// `aws::clients::$service(sdk)` (bounded retries, timeouts) with `tap` counting its
/// calls: the SDKs' configs share no trait, so each is rebuilt by name.
macro_rules! counted {
    ($service:ident, $sdk_crate:ident, $sdk:expr, $tap:expr) => {
        $sdk_crate::Client::from_conf(
            aws::clients::$service($sdk)
                .config()
                .to_builder()
                .interceptor(Tap($tap.clone()))
                .build(),
        )
    };
}

impl ClientMeter {
    /// The DynamoDB client of `sdk` (bounded retries, timeouts), counted.
    pub fn dynamodb(&self, sdk: &SdkConfig) -> aws_sdk_dynamodb::Client {
        counted!(dynamodb, aws_sdk_dynamodb, sdk, self.dynamodb)
    }

    pub fn sqs(&self, sdk: &SdkConfig) -> aws_sdk_sqs::Client {
        counted!(sqs, aws_sdk_sqs, sdk, self.sqs)
    }

    pub fn scheduler(&self, sdk: &SdkConfig) -> aws_sdk_scheduler::Client {
        counted!(scheduler, aws_sdk_scheduler, sdk, self.scheduler)
    }

    /// Each service's calls so far: `dynamodb`, `sqs`, `scheduler`.
    pub fn snapshot(&self) -> Vec<(&'static str, ServiceCalls)> {
        vec![
            ("dynamodb", self.dynamodb.snapshot()),
            ("sqs", self.sqs.snapshot()),
            ("scheduler", self.scheduler.snapshot()),
        ]
    }
}
