//! A small burst through the local stack, with the benchmark's own code and the
//! template's rate settings: nothing lost, nothing duplicated (at the service and at
//! the endpoint), nothing beyond the attempt budget, every transaction SUCCEEDED. (The per-second peak is reported, not
//! asserted: timing is measured, never asserted; the pacer's bound is proved with
//! virtual time in the runtime's tests.) The benchmark runs the same code with 1,000
//! or 10,000 responses.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use retry_bench::burst::{run, BurstSpec};
use retry_bench::template::Deployment;
use std::path::Path;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread")]
async fn a_small_burst_loses_and_duplicates_nothing() {
    let d =
        Deployment::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../template.yaml")).unwrap();
    let spec = BurstSpec {
        responses: 40,
        max_requests_per_second: d.max_requests_per_second,
        retry_concurrency: d.retry_max_concurrency as usize,
        backoff_seconds: 1.0,
        deadline: Duration::from_secs(120),
        scheduler_tick: Duration::from_millis(200),
        moto_program: testkit::moto::MotoServer::PROGRAM.to_owned(),
    };
    let r = run(spec).await.expect("local stack (. scripts/tools.sh)");
    println!("{r:#?}");
    assert!(
        r.drain.is_some(),
        "every retried request reached the service: {r:?}"
    );
    assert_eq!(r.retried_unique, 40);
    assert_eq!(
        (r.lost, r.pending, r.dead_lettered),
        (Some(0), 0, 0),
        "{r:?}"
    );
    assert_eq!((r.duplicated, r.beyond_budget), (0, 0), "{r:?}");
    // Seen where requests reach the AWS endpoint: each retried request published once.
    assert_eq!((r.published, r.published_twice), (40, 0), "{r:?}");
    assert_eq!((r.succeeded, r.not_succeeded), (40, 0), "{r:?}");
    assert_eq!(r.schedules_fired, 40);
    assert!(
        r.all_fired.is_some() && r.all_fired <= r.drain,
        "every retry event was delivered before the last request: {r:?}"
    );
    assert_eq!(r.rate_bound, d.fleet_rate_bound());
    // Nothing was lost on the way, so the reconciler (threshold: half the deadline)
    // had nothing to rescue.
    assert_eq!(r.spec.reconcile_threshold(), Duration::from_secs(60));
    assert!(r.reconciler_actions.is_empty(), "{r:?}");
}
