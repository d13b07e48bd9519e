//! The bridge built from its configuration and the AWS adapters, once per process:
//! what its Lambda `main` calls, and what tests call with an SDK configuration of
//! their own. Every text setting is checked here, the error naming the variable and
//! the value: the endpoint (a URL, `https://` except to a loopback host), the
//! method, the headers (a JSON object of strings, valid names and values), the header
//! names, the secret's reference, the classification JSON.

use crate::call::{Caller, Target, TargetError};
use crate::classify::{OperatorCases, Rules};
use crate::secret::{AwsSecret, Cached, SecretRef};
use crate::Bridge;
use aws::config::vars::{
    HTTP_AUTH_HEADER, HTTP_AUTH_SECRET, HTTP_CLASSIFICATION, HTTP_ENDPOINT, HTTP_HEADERS,
    HTTP_IDEMPOTENCY_HEADER, HTTP_METHOD, HTTP_OPERATOR_CASES,
};
use aws::config::HttpBridgeConfig;
use aws::sqs::{SqsDeadLetter, SqsResponsePublisher};
use aws_config::SdkConfig;
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use runtime::batch::BatchOptions;
use std::collections::BTreeMap;
use thiserror::Error;

/// The bridge on AWS.
pub type AwsBridge = Bridge<SqsResponsePublisher, AwsSecret, SqsDeadLetter>;

/// A configuration the bridge cannot be built with.
#[derive(Debug, Error)]
pub enum WiringError {
    #[error(transparent)]
    Setting(#[from] TargetError),
    #[error("the HTTP client cannot be built (TLS roots): {0}")]
    Client(#[from] std::io::Error),
}

fn invalid(field: &'static str, value: &str, reason: impl Into<String>) -> TargetError {
    TargetError {
        field,
        value: value.to_owned(),
        reason: reason.into(),
    }
}

fn header_name(field: &'static str, value: &str) -> Result<HeaderName, TargetError> {
    HeaderName::from_bytes(value.as_bytes())
        .map_err(|_| invalid(field, value, "is not an HTTP header name"))
}

/// The parts of the configuration a call needs, checked.
pub fn target(c: &HttpBridgeConfig) -> Result<Target, TargetError> {
    Target::check_endpoint(HTTP_ENDPOINT.name, &c.endpoint)?;
    let method = Method::from_bytes(c.method.as_bytes())
        .ok()
        .filter(|m| *m != Method::CONNECT && *m != Method::TRACE)
        .ok_or_else(|| invalid(HTTP_METHOD.name, &c.method, "is not an HTTP method"))?;
    let mut headers = HeaderMap::new();
    if !c.headers_json.is_empty() {
        let map: BTreeMap<String, String> = serde_json::from_str(&c.headers_json).map_err(|e| {
            invalid(
                HTTP_HEADERS.name,
                &c.headers_json,
                format!("must be a JSON object of strings: {e}"),
            )
        })?;
        for (name, value) in &map {
            let n = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                invalid(
                    HTTP_HEADERS.name,
                    &c.headers_json,
                    format!("{name:?} is not an HTTP header name"),
                )
            })?;
            let v = HeaderValue::from_str(value).map_err(|_| {
                invalid(
                    HTTP_HEADERS.name,
                    &c.headers_json,
                    format!("the value of {name} is not a header value"),
                )
            })?;
            headers.insert(n, v);
        }
    }
    Ok(Target {
        method,
        endpoint: c.endpoint.clone(),
        headers,
        idempotency_header: header_name(HTTP_IDEMPOTENCY_HEADER.name, &c.idempotency_header)?,
        auth_header: header_name(HTTP_AUTH_HEADER.name, &c.auth_header)?,
    })
}

/// The classification overrides and what operator cases become, checked.
pub fn rules(c: &HttpBridgeConfig) -> Result<Rules, TargetError> {
    let mode = OperatorCases::parse(&c.operator_cases).ok_or_else(|| {
        invalid(
            HTTP_OPERATOR_CASES.name,
            &c.operator_cases,
            format!("must be one of {}", OperatorCases::NAMES.join(", ")),
        )
    })?;
    Rules::from_json(&c.classification_json)
        .and_then(|r| r.with_operator_cases(mode))
        .map_err(|e| {
            invalid(
                HTTP_CLASSIFICATION.name,
                &c.classification_json,
                e.to_string(),
            )
        })
}

/// The secret's reference, checked; `None`: no auth header.
pub fn secret_ref(c: &HttpBridgeConfig) -> Result<Option<SecretRef>, TargetError> {
    SecretRef::parse(&c.auth_secret).map_err(|e| invalid(HTTP_AUTH_SECRET.name, &c.auth_secret, e))
}

/// The bridge from its configuration.
pub fn bridge(sdk: &SdkConfig, c: &HttpBridgeConfig) -> Result<AwsBridge, WiringError> {
    let sqs = aws::clients::sqs(sdk);
    let auth = secret_ref(c)?.map(|reference| {
        Cached::new(AwsSecret {
            reference,
            secrets: aws_sdk_secretsmanager::Client::new(sdk),
            parameters: aws_sdk_ssm::Client::new(sdk),
        })
    });
    Ok(Bridge {
        caller: Caller::new(target(c)?, c.connect_timeout, c.timeout)?,
        rules: rules(c)?,
        answers: SqsResponsePublisher::new(sqs.clone(), &c.response_queue_url),
        auth,
        dead_letter: SqsDeadLetter::new(sqs, &c.request_dlq_url),
        batch: BatchOptions {
            concurrency: c.batch_concurrency,
        },
        namespace: c.metrics_namespace.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> HttpBridgeConfig {
        let mut all = vec![
            ("RESPONSE_QUEUE_URL", "http://q/response"),
            ("REQUEST_DLQ_URL", "http://q/request-dlq"),
            (
                "HTTP_ENDPOINT",
                "https://api.example.com/pay/{transaction_id}",
            ),
        ];
        all.extend_from_slice(pairs);
        let map: BTreeMap<String, String> = all
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        HttpBridgeConfig::from_lookup(&move |k| map.get(k).cloned()).unwrap()
    }

    #[test]
    fn defaults_and_a_full_configuration() {
        let t = target(&config(&[])).unwrap();
        assert_eq!(t.method, Method::POST);
        assert_eq!(t.idempotency_header.as_str(), "idempotency-key");
        assert_eq!(t.auth_header.as_str(), "authorization");
        assert!(t.headers.is_empty());
        assert_eq!(secret_ref(&config(&[])).unwrap(), None);
        assert_eq!(rules(&config(&[])).unwrap(), Rules::default());
        assert_eq!(
            rules(&config(&[])).unwrap().operator_cases,
            OperatorCases::DeadLetter
        );
        let c = config(&[
            ("HTTP_METHOD", "PUT"),
            (
                "HTTP_HEADERS",
                r#"{"X-Api-Version":"2024-05-01","Accept":"application/json"}"#,
            ),
            ("HTTP_IDEMPOTENCY_HEADER", "X-Idempotency-Key"),
            ("HTTP_AUTH_HEADER", "X-Api-Key"),
            ("HTTP_AUTH_SECRET", "/pay/api-key"),
            (
                "HTTP_CLASSIFICATION",
                r#"{"statuses":[{"from":404,"outcome":"CANCELLED","reason":"NOT_FOUND"}]}"#,
            ),
        ]);
        let t = target(&c).unwrap();
        assert_eq!(t.method, Method::PUT);
        assert_eq!(t.headers["x-api-version"], "2024-05-01");
        assert_eq!(t.idempotency_header.as_str(), "x-idempotency-key");
        assert_eq!(t.auth_header.as_str(), "x-api-key");
        assert_eq!(
            secret_ref(&c).unwrap(),
            Some(SecretRef::Parameter("/pay/api-key".into()))
        );
        assert_eq!(rules(&c).unwrap().statuses.len(), 1);
    }

    #[test]
    fn each_refusal_names_the_variable_and_the_value() {
        let cases: &[(&str, &str)] = &[
            ("HTTP_ENDPOINT", "http://api.example.com/pay"),
            ("HTTP_METHOD", "PO ST"),
            ("HTTP_METHOD", "CONNECT"),
            ("HTTP_HEADERS", r#"["X-A"]"#),
            ("HTTP_HEADERS", r#"{"X A":"1"}"#),
            ("HTTP_HEADERS", r#"{"X-A":"line\nbreak"}"#),
            ("HTTP_IDEMPOTENCY_HEADER", "Idempotency Key"),
            ("HTTP_AUTH_HEADER", "Auth:"),
        ];
        for &(name, value) in cases {
            let e = target(&config(&[(name, value)])).unwrap_err();
            assert_eq!((e.field, e.value.as_str()), (name, value), "{e}");
        }
        let e = secret_ref(&config(&[("HTTP_AUTH_SECRET", "arn:aws:s3:::b")])).unwrap_err();
        assert_eq!(
            (e.field, e.value.as_str()),
            ("HTTP_AUTH_SECRET", "arn:aws:s3:::b")
        );
        let e = rules(&config(&[(
            "HTTP_CLASSIFICATION",
            r#"{"statuses":[{"from":1,"outcome":"ERROR"}]}"#,
        )]))
        .unwrap_err();
        assert_eq!(e.field, "HTTP_CLASSIFICATION");
        assert!(e.reason.starts_with("statuses[0].from"), "{e}");
        let e = rules(&config(&[("HTTP_OPERATOR_CASES", "retry")])).unwrap_err();
        assert_eq!(
            (e.field, e.value.as_str()),
            ("HTTP_OPERATOR_CASES", "retry")
        );
        assert!(e.reason.contains("dead-letter, reject"), "{e}");
        // A rule answering REJECTED before the setting allows it.
        let rejected = r#"{"statuses":[{"from":404,"outcome":"CANCELLED"},{"from":409,"outcome":"REJECTED"}]}"#;
        let e = rules(&config(&[("HTTP_CLASSIFICATION", rejected)])).unwrap_err();
        assert_eq!(e.field, "HTTP_CLASSIFICATION");
        assert!(e.reason.starts_with("statuses[1].outcome"), "{e}");
        let ok = rules(&config(&[
            ("HTTP_CLASSIFICATION", rejected),
            ("HTTP_OPERATOR_CASES", "reject"),
        ]))
        .unwrap();
        assert_eq!(ok.operator_cases, OperatorCases::Reject);
    }

    #[test]
    fn timeouts_are_bounded_by_the_function() {
        let lookup = |pairs: Vec<(&'static str, &'static str)>| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        let base = vec![
            ("RESPONSE_QUEUE_URL", "u"),
            ("REQUEST_DLQ_URL", "u"),
            ("HTTP_ENDPOINT", "https://e"),
        ];
        let mut long = base.clone();
        long.push(("HTTP_TIMEOUT_SECONDS", "26"));
        let e = HttpBridgeConfig::from_lookup(&lookup(long)).unwrap_err();
        assert!(e.to_string().contains("HTTP_TIMEOUT_SECONDS=\"26\""), "{e}");
        let mut crossed = base.clone();
        crossed.extend([
            ("HTTP_TIMEOUT_SECONDS", "4"),
            ("HTTP_CONNECT_TIMEOUT_SECONDS", "5"),
        ]);
        let e = HttpBridgeConfig::from_lookup(&lookup(crossed)).unwrap_err();
        assert!(
            e.to_string().contains("HTTP_CONNECT_TIMEOUT_SECONDS=\"5\""),
            "{e}"
        );
        let c = HttpBridgeConfig::from_lookup(&lookup(base)).unwrap();
        assert_eq!((c.connect_timeout.as_secs(), c.timeout.as_secs()), (3, 10));
        assert!(c.timeout.as_secs() + 5 <= u64::from(aws::config::timeouts::HTTP_BRIDGE_SECONDS));
    }
}
