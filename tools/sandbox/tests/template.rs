//! The local stack's event source mapping settings are the template's defaults.

use sandbox::local::stack::template;
use serde_yaml::Value;

fn default_of(t: &Value, name: &str) -> f64 {
    let v = &t["Parameters"][name]["Default"];
    v.as_f64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or_else(|| panic!("template.yaml has no numeric default for {name}"))
}

#[test]
fn esm_and_rate_settings_match_template_yaml() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../template.yaml");
    let text = std::fs::read_to_string(path).expect("template.yaml at the repository root");
    let t: Value = serde_yaml::from_str(&text).expect("template.yaml parses");
    let pairs = [
        ("ResponseBatchSize", template::RESPONSE_BATCH_SIZE as f64),
        (
            "ResponseBatchingWindowSeconds",
            template::RESPONSE_BATCHING_WINDOW_SECONDS as f64,
        ),
        (
            "ResponseHandlerMaxConcurrency",
            template::RESPONSE_MAX_CONCURRENCY as f64,
        ),
        ("RetryBatchSize", template::RETRY_BATCH_SIZE as f64),
        (
            "RetryBatchingWindowSeconds",
            template::RETRY_BATCHING_WINDOW_SECONDS as f64,
        ),
        (
            "RetryHandlerMaxConcurrency",
            template::RETRY_MAX_CONCURRENCY as f64,
        ),
        ("MaxRequestsPerSecond", template::MAX_REQUESTS_PER_SECOND),
        ("IntakeBatchSize", template::INTAKE_BATCH_SIZE as f64),
        (
            "IntakeMaxConcurrency",
            template::INTAKE_MAX_CONCURRENCY as f64,
        ),
        ("IntakeStartsPerSecond", template::INTAKE_STARTS_PER_SECOND),
        (
            "HttpBridgeBatchSize",
            template::HTTP_BRIDGE_BATCH_SIZE as f64,
        ),
        (
            "HttpBridgeMaxConcurrency",
            template::HTTP_BRIDGE_MAX_CONCURRENCY as f64,
        ),
    ];
    for (name, ours) in pairs {
        assert_eq!(default_of(&t, name), ours, "{name}");
    }
    let bridge = &t["Resources"]["HttpBridgeFunction"]["Properties"]["Events"]["Requests"]
        ["Properties"]["MaximumBatchingWindowInSeconds"];
    assert_eq!(
        bridge.as_f64(),
        Some(template::HTTP_BRIDGE_BATCHING_WINDOW_SECONDS as f64),
        "the HTTP bridge's batching window"
    );
}

/// The publisher's stream event source in the local stack (outbox delivery) is the
/// template's: its filter pattern, batch size, retries and bisection.
#[test]
fn the_publishers_stream_mapping_matches_template_yaml() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../template.yaml");
    let text = std::fs::read_to_string(path).expect("template.yaml at the repository root");
    let t: Value = serde_yaml::from_str(&text).expect("template.yaml parses");
    let events = t["Resources"]["PublisherFunction"]["Properties"]["Events"]
        .as_mapping()
        .expect("PublisherFunction has Events");
    let (_, event) = events.iter().next().expect("one event source");
    let p = &event["Properties"];
    let pattern = p["FilterCriteria"]["Filters"][0]["Pattern"]
        .as_str()
        .expect("a filter pattern");
    let theirs: serde_json::Value = serde_json::from_str(pattern).expect("the pattern is JSON");
    let ours: serde_json::Value = serde_json::from_str(template::PUBLISHER_FILTER).unwrap();
    assert_eq!(theirs, ours);
    assert_eq!(p["BisectBatchOnFunctionError"].as_bool(), Some(true));
    // Both given by the audit writer's parameters.
    let param = |v: &Value| -> String {
        let Value::Tagged(tagged) = v else {
            panic!("{v:?} is not a !Ref")
        };
        tagged.value.as_str().unwrap().to_owned()
    };
    assert_eq!(
        default_of(&t, &param(&p["BatchSize"])),
        template::PUBLISHER_BATCH_SIZE as f64
    );
    assert_eq!(
        default_of(&t, &param(&p["MaximumRetryAttempts"])),
        f64::from(template::PUBLISHER_MAX_RETRY_ATTEMPTS)
    );
}
