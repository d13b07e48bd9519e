//! Each service on its own moto server: a configuration from `sdk_config_for` sends
//! every client to its service's server, and the environment it prints does the same
//! for a configuration loaded from the environment.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use testkit::moto::{sdk_config, sdk_config_for, Endpoints, MotoServer};

/// The tables and the number of queues on the server at `endpoint`.
async fn contents(endpoint: &str) -> (Vec<String>, usize) {
    let sdk = sdk_config(endpoint).await;
    let tables = aws_sdk_dynamodb::Client::new(&sdk).list_tables().send();
    let queues = aws_sdk_sqs::Client::new(&sdk).list_queues().send();
    let (tables, queues) = tokio::join!(tables, queues);
    (
        tables.unwrap().table_names().to_vec(),
        queues.unwrap().queue_urls().len(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn each_client_calls_its_own_server() {
    let (a, b) = tokio::join!(
        MotoServer::launch(MotoServer::PROGRAM),
        MotoServer::launch(MotoServer::PROGRAM)
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    let endpoints = Endpoints {
        dynamodb: a.endpoint_url(),
        sqs: b.endpoint_url(),
        scheduler: b.endpoint_url(),
    };
    assert!(!endpoints.is_single());
    let sdk = sdk_config_for(&endpoints).await;
    aws_sdk_sqs::Client::new(&sdk)
        .create_queue()
        .queue_name("split-q")
        .send()
        .await
        .unwrap();
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    testkit::provision::create_table(&ddb, &testkit::provision::TableDef::keyed("split-t", "pk"))
        .await
        .unwrap();
    assert_eq!(
        contents(&a.endpoint_url()).await,
        (vec!["split-t".to_owned()], 0)
    );
    assert_eq!(contents(&b.endpoint_url()).await, (vec![], 1));

    let env = endpoints.env();
    assert!(env.contains(&("AWS_ENDPOINT_URL_SQS", b.endpoint_url())));
    assert!(env.contains(&("AWS_ENDPOINT_URL_DYNAMODB_STREAMS", a.endpoint_url())));
    assert_eq!(
        Endpoints::single(&a.endpoint_url()).env(),
        vec![("AWS_ENDPOINT_URL", a.endpoint_url())]
    );
    a.stop().await;
    b.stop().await;
}
