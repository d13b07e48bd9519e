//! Phase `delivery`: the request delivery mode the stack runs, from the three places
//! that must agree ([`judge`]): the `RequestDelivery` parameter (when the outputs file
//! carries the stack's parameters), the request queue's `FifoQueue` attribute (FIFO in
//! outbox mode, standard in direct mode) and the `REQUEST_DELIVERY` variable each
//! deciding function's `live` alias runs with (when the outputs name the functions).
//! A disagreement fails naming each source and what it says; in outbox mode the
//! publisher function must be named too. `docs/deploy.md#switching-delivery-mode`.

use super::outputs::StackOutputs;
use super::Checks;
use aws_sdk_sqs::types::QueueAttributeName;
use domain::decide::Delivery;

const PHASE: &str = "delivery";

/// The stack parameter, as `template.yaml` names it.
pub const PARAMETER: &str = "RequestDelivery";

/// The outputs naming the functions that decide a send, and how the report calls
/// them.
pub const DECIDING_FUNCTIONS: &[(&str, &str)] = &[
    ("ResponseHandlerFunctionName", "response-handler"),
    ("RetryHandlerFunctionName", "retry-handler"),
    ("ReconcilerFunctionName", "reconciler"),
    ("StarterFunctionName", "starter"),
];

/// The output naming outbox mode's publisher.
pub const PUBLISHER_OUTPUT: &str = "PublisherFunctionName";

/// What one source says: its name in the report and its raw value (`None`: it
/// could not say).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Said {
    pub source: String,
    pub value: Option<String>,
}

impl Said {
    pub fn new(source: impl Into<String>, value: Option<&str>) -> Self {
        Self {
            source: source.into(),
            value: value.map(str::to_owned),
        }
    }
}

/// The mode every source agrees on, with a summary; or why they do not. A value
/// that names no mode, or no source at all, fails too.
pub fn judge(said: &[Said]) -> Result<(Delivery, String), String> {
    let mut modes = Vec::new();
    for s in said {
        let Some(raw) = &s.value else { continue };
        match Delivery::parse(raw) {
            Some(d) => modes.push((s, d)),
            None => return Err(format!("{} says {raw:?}: not direct or outbox", s.source)),
        }
    }
    let Some(&(_, first)) = modes.first() else {
        return Err("no source says the mode (no parameter, queue or function read)".into());
    };
    let listed = |ms: &[(&Said, Delivery)]| {
        ms.iter()
            .map(|(s, d)| format!("{} {d}", s.source))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if modes.iter().all(|(_, d)| *d == first) {
        Ok((first, format!("{first}: {}", listed(&modes))))
    } else {
        Err(format!(
            "the stack runs two modes: {} (drain and deploy again: docs/deploy.md#switching-delivery-mode)",
            listed(&modes)
        ))
    }
}

/// The mode the request queue's `FifoQueue` attribute says.
pub fn queue_mode(fifo_attribute: Option<&str>) -> &'static str {
    match fifo_attribute {
        Some(v) if v.eq_ignore_ascii_case("true") => Delivery::Outbox.as_str(),
        _ => Delivery::Direct.as_str(),
    }
}

/// Reads every source and records the phase's checks.
pub async fn check(
    sdk: &aws_config::SdkConfig,
    sqs: &aws_sdk_sqs::Client,
    outputs: &StackOutputs,
    checks: &mut Checks,
) {
    let mut said = Vec::new();
    let parameter = outputs
        .parameters
        .iter()
        .find(|(_, k, _)| k == PARAMETER)
        .map(|(_, _, v)| v.as_str());
    if parameter.is_some() {
        said.push(Said::new(format!("parameter {PARAMETER}"), parameter));
    }
    if let Some(url) = outputs.get("RequestQueueUrl") {
        match super::resources::queue_attributes(sqs, url).await {
            Ok(attrs) => {
                let fifo = attrs
                    .get(&QueueAttributeName::FifoQueue)
                    .map(String::as_str);
                let source = format!("request queue (FifoQueue {})", fifo.unwrap_or("unset"));
                said.push(Said::new(source, Some(queue_mode(fifo))));
            }
            Err(e) => checks.fail(PHASE, "request queue", format!("cannot be read: {e}")),
        }
    }
    let named: Vec<(&str, &str)> = DECIDING_FUNCTIONS
        .iter()
        .filter_map(|(k, label)| outputs.get(k).map(|name| (*label, name)))
        .collect();
    if !named.is_empty() {
        let lambda = aws_sdk_lambda::Client::new(sdk);
        for (label, name) in &named {
            match function_delivery(&lambda, name).await {
                // Unset: the code's default.
                Ok(v) => said.push(Said::new(
                    format!("{label} REQUEST_DELIVERY"),
                    Some(v.as_deref().unwrap_or(Delivery::default().as_str())),
                )),
                Err(e) => checks.fail(PHASE, *label, e),
            }
        }
    }
    match judge(&said) {
        Ok((mode, summary)) => {
            let publisher = outputs.get(PUBLISHER_OUTPUT);
            if mode == Delivery::Outbox && !named.is_empty() && publisher.is_none() {
                checks.fail(
                    PHASE,
                    "mode",
                    format!(
                        "{summary}; but no output {PUBLISHER_OUTPUT}: the publisher is missing"
                    ),
                );
            } else {
                checks.pass(PHASE, "mode", summary);
            }
        }
        Err(e) => checks.fail(PHASE, "mode", e),
    }
}

/// `REQUEST_DELIVERY` of the function's `live` alias (`None`: not set).
async fn function_delivery(
    lambda: &aws_sdk_lambda::Client,
    name: &str,
) -> Result<Option<String>, String> {
    let c = lambda
        .get_function_configuration()
        .function_name(name)
        .qualifier(crate::versions::ALIAS)
        .send()
        .await
        .map_err(aws::errors::sdk_error(format!(
            "GetFunctionConfiguration {name}"
        )))?;
    Ok(c.environment()
        .and_then(|e| e.variables())
        .and_then(|v| v.get(aws::config::vars::REQUEST_DELIVERY.name))
        .cloned())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn said(pairs: &[(&str, Option<&str>)]) -> Vec<Said> {
        pairs.iter().map(|(s, v)| Said::new(*s, *v)).collect()
    }

    /// GIVEN the parameter, the queue and the functions agreeing THEN that mode,
    /// each source listed; GIVEN one disagreeing THEN a failure naming every source
    /// and what it says; a value that is no mode, or no source, fails.
    #[test]
    fn the_sources_must_agree_on_one_mode() {
        let (mode, summary) = judge(&said(&[
            ("parameter RequestDelivery", Some("outbox")),
            ("request queue", Some(queue_mode(Some("true")))),
            ("starter REQUEST_DELIVERY", Some("outbox")),
        ]))
        .unwrap();
        assert_eq!(mode, Delivery::Outbox);
        assert_eq!(
            summary,
            "outbox: parameter RequestDelivery outbox, request queue outbox, starter REQUEST_DELIVERY outbox"
        );
        let e = judge(&said(&[
            ("parameter RequestDelivery", Some("outbox")),
            ("request queue", Some(queue_mode(None))),
            ("retry-handler REQUEST_DELIVERY", Some("outbox")),
        ]))
        .unwrap_err();
        assert!(
            e.contains("parameter RequestDelivery outbox, request queue direct, retry-handler REQUEST_DELIVERY outbox"),
            "{e}"
        );
        let e = judge(&said(&[("starter REQUEST_DELIVERY", Some("fifo"))])).unwrap_err();
        assert!(e.contains("\"fifo\""), "{e}");
        assert!(judge(&said(&[("parameter", None)])).is_err());
        let (mode, _) =
            judge(&said(&[("request queue", Some(queue_mode(Some("false"))))])).unwrap();
        assert_eq!(mode, Delivery::Direct);
    }
}
