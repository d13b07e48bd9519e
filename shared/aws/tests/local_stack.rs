//! The moto launcher and provisioning, against a real moto server.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use aws::config::StackNames;
use aws_sdk_sqs::types::QueueAttributeName;
use std::net::TcpStream;
use std::time::Duration;
use testkit::moto::{self, MotoServer};
use testkit::provision::{provision, queue_definitions, table_definitions};

/// GIVEN a moto server of our own WHEN a stack is provisioned THEN every table,
/// index, stream, TTL, queue attribute and the schedule group exist as defined;
/// reset forgets them; dropping the server stops the process.
#[tokio::test(flavor = "multi_thread")]
async fn provisions_every_resource_then_reset_and_drop() {
    let server = MotoServer::start().expect("moto_server on PATH (. scripts/tools.sh)");
    let endpoint = server.endpoint_url();
    let sdk = moto::sdk_config(&endpoint).await;
    let names = StackNames::new("prov");
    let p = provision(&sdk, &names).await.unwrap();
    assert_eq!(p.endpoint, endpoint);
    assert!(
        p.transactions_stream_arn.contains("/stream/"),
        "{}",
        p.transactions_stream_arn
    );

    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    for def in table_definitions(&names) {
        let d = ddb
            .describe_table()
            .table_name(&def.name)
            .send()
            .await
            .unwrap();
        let t = d.table().unwrap();
        let hash = t
            .key_schema()
            .iter()
            .find(|k| k.key_type().as_str() == "HASH")
            .unwrap();
        assert_eq!(hash.attribute_name(), def.hash_key);
        let range = t
            .key_schema()
            .iter()
            .find(|k| k.key_type().as_str() == "RANGE")
            .map(|k| k.attribute_name().to_owned());
        assert_eq!(range.as_deref(), def.range_key);
        assert_eq!(t.global_secondary_indexes().len(), def.indexes.len());
        for (ix, want) in t.global_secondary_indexes().iter().zip(&def.indexes) {
            assert_eq!(ix.index_name(), Some(want.name));
            let keys: Vec<&str> = ix.key_schema().iter().map(|k| k.attribute_name()).collect();
            assert_eq!(keys[0], want.hash_key);
            assert_eq!(keys.get(1).copied(), want.range_key);
            assert_eq!(
                ix.projection()
                    .and_then(|p| p.projection_type())
                    .map(|p| p.as_str()),
                Some(want.projection)
            );
        }
        let view = t
            .stream_specification()
            .filter(|s| s.stream_enabled())
            .and_then(|s| s.stream_view_type())
            .map(|v| v.as_str().to_owned());
        assert_eq!(view.as_deref(), def.stream_view, "{}", def.name);
        let ttl = ddb
            .describe_time_to_live()
            .table_name(&def.name)
            .send()
            .await
            .unwrap();
        let ttl_attr = ttl
            .time_to_live_description()
            .filter(|d| d.time_to_live_status().map(|s| s.as_str()) == Some("ENABLED"))
            .and_then(|d| d.attribute_name())
            .map(str::to_owned);
        assert_eq!(ttl_attr.as_deref(), def.ttl_attribute, "{}", def.name);
    }

    let sqs = aws_sdk_sqs::Client::new(&sdk);
    for def in queue_definitions(&names) {
        let url = sqs
            .get_queue_url()
            .queue_name(&def.name)
            .send()
            .await
            .unwrap();
        let attrs = sqs
            .get_queue_attributes()
            .queue_url(url.queue_url().unwrap())
            .attribute_names(QueueAttributeName::All)
            .send()
            .await
            .unwrap();
        let a = attrs.attributes().unwrap();
        let vis: u32 = a[&QueueAttributeName::VisibilityTimeout].parse().unwrap();
        assert_eq!(
            vis,
            def.visibility_timeout_seconds.unwrap_or(30),
            "{}",
            def.name
        );
        match &def.redrive {
            None => assert!(!a.contains_key(&QueueAttributeName::RedrivePolicy)),
            Some(r) => {
                let policy: serde_json::Value =
                    serde_json::from_str(&a[&QueueAttributeName::RedrivePolicy]).unwrap();
                assert_eq!(
                    policy["maxReceiveCount"].as_u64(),
                    Some(u64::from(r.max_receive_count))
                );
                let dlq_name = queue_definitions(&names)
                    .into_iter()
                    .find(|q| q.logical_id == r.dlq_logical_id)
                    .unwrap()
                    .name;
                assert!(policy["deadLetterTargetArn"]
                    .as_str()
                    .unwrap()
                    .ends_with(&dlq_name));
            }
        }
    }
    assert_eq!(
        p.retry.arn,
        format!("arn:aws:sqs:us-east-1:123456789012:{}", names.retry_queue)
    );

    let sched = aws_sdk_scheduler::Client::new(&sdk);
    let g = sched
        .get_schedule_group()
        .name(&names.schedule_group)
        .send()
        .await
        .unwrap();
    assert_eq!(g.arn(), Some(p.schedule_group_arn.as_str()));

    // The environment a function would get parses with the config structs.
    let env = |f: &str| {
        let pairs = p.env_for(f);
        move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
    };
    let rh = aws::config::ResponseHandlerConfig::from_lookup(&env("response-handler")).unwrap();
    assert_eq!(rh.scheduler.retry_queue_arn, p.retry.arn);
    aws::config::RetryHandlerConfig::from_lookup(&env("retry-handler")).unwrap();
    aws::config::ReconcilerConfig::from_lookup(&env("reconciler")).unwrap();
    aws::config::AuditWriterConfig::from_lookup(&env("audit-writer")).unwrap();

    server.reset().unwrap();
    let tables = ddb.list_tables().send().await.unwrap();
    assert!(tables.table_names().is_empty(), "reset forgets tables");

    let port = server.port();
    drop(server);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "the server stops when dropped"
    );
}

/// The shared endpoint is one server for the whole binary.
#[test]
fn shared_endpoint_is_stable() {
    let a = moto::shared_endpoint().unwrap();
    let b = moto::shared_endpoint().unwrap();
    assert_eq!(a, b);
    assert!(a.starts_with("http://127.0.0.1:") || std::env::var("AWS_ENDPOINT_URL").is_ok());
}
