//! The events Lambda hands a function, built for tests: SQS batches ([`sqs`]) and the
//! transactions table's stream ([`stream`]).

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

/// A record's image in the DynamoDB JSON of a stream record (`{"status":{"S":…}}`).
pub fn image_json(r: &domain::TransactionRecord) -> serde_json::Value {
    use aws::item::Scalar;
    let flat = aws::item::flat_from_dynamodb(&aws::item::record_to_item(r));
    serde_json::Value::Object(
        flat.into_iter()
            .map(|(k, v)| {
                let v = match v {
                    Scalar::S(s) => serde_json::json!({ "S": s }),
                    Scalar::N(n) => serde_json::json!({ "N": n }),
                    // A record encodes only strings and numbers.
                    Scalar::Other(t) => serde_json::json!({ t: null }),
                };
                (k, v)
            })
            .collect(),
    )
}

/// A DynamoDB stream event of these changes (old image, new image) of the
/// transactions table, `NEW_AND_OLD_IMAGES`, sequence numbers `first`, `first + 1`, …
/// in order.
pub fn stream(
    changes: &[(
        Option<&domain::TransactionRecord>,
        &domain::TransactionRecord,
    )],
    first: u64,
) -> Result<aws_lambda_events::dynamodb::Event, serde_json::Error> {
    let records = changes
        .iter()
        .enumerate()
        .map(|(i, (old, new))| {
            let mut dynamodb = serde_json::json!({
                "ApproximateCreationDateTime": 1_790_000_000,
                "Keys": { "transaction_id": { "S": new.transaction_id.as_str() } },
                "SequenceNumber": format!("{:021}", first + i as u64),
                "SizeBytes": 360,
                "StreamViewType": "NEW_AND_OLD_IMAGES",
                "NewImage": image_json(new),
            });
            if let Some(o) = old {
                dynamodb["OldImage"] = image_json(o);
            }
            serde_json::json!({
                "eventID": (first + i as u64).to_string(),
                "eventName": if old.is_some() { "MODIFY" } else { "INSERT" },
                "eventVersion": "1.1",
                "eventSource": "aws:dynamodb",
                "awsRegion": "us-east-1",
                "dynamodb": dynamodb,
                "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/dr-transactions/stream/2026-09-21T00:00:00.000",
            })
        })
        .collect::<Vec<_>>();
    serde_json::from_value(serde_json::json!({ "Records": records }))
}
