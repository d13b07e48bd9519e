//! The events Lambda hands a function, built for tests.

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};

/// An SQS event of these bodies, message ids `m0`, `m1`, …
pub fn sqs<B: AsRef<str>>(bodies: &[B]) -> SqsEvent {
    let mut e = SqsEvent::default();
    e.records = bodies
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let mut m = SqsMessage::default();
            m.message_id = Some(format!("m{i}"));
            m.body = Some(b.as_ref().to_owned());
            m
        })
        .collect();
    e
}
