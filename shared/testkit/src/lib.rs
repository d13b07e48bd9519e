//! Test and local-stack machinery, kept out of the production crates.
//!
//! The Lambda binaries depend on `deferred-retry-domain`, `-aws` and `-runtime` only;
//! everything here serves the tests, `retryctl`'s local stack, the verifier and the
//! benchmarks (`cargo tree -e normal -p response-handler` lists no `deferred-retry-testkit`).
//!
//! - [`moto`]: moto server launcher (`scripts/moto_server_patched.py`) and loopback
//!   SDK configuration.
//! - [`provision`]: creates every table, queue and the schedule group of a stack on
//!   an endpoint, from definitions kept as data (compared with `template.yaml`).
//! - [`drain`]: reads a table's stream and audits its changes (the local stand-in
//!   for the audit writer's event source).
//! - [`memory`]: in-memory adapters of every port, with DynamoDB's conditional
//!   semantics (handler tests, the simulator, the model checker, the benchmarks).
//! - [`meter`]: an SDK interceptor counting the API calls of the clients it builds
//!   and the DynamoDB capacity they consumed (tests of a path's cost, the benchmark).
//! - [`proxy`]: a recording pass-through in front of moto: every API call with its
//!   caller (access key id), service, operation and resource ARNs; with [`faults`],
//!   it injects throttling, 5xx, lost responses and latency, seeded per operation.
//! - [`trail`]: audit trails as `FROM>TO@attempt` strings, compared whole by tests.
//! - [`size`]: DynamoDB's size of an item, by its published rule (what the benchmark
//!   bills and the audit tests bound).

pub mod drain;
pub mod faults;
pub mod memory;
pub mod meter;
pub mod moto;
pub mod oracle;
pub mod ports;
pub mod provision;
pub mod proxy;
pub mod size;
pub mod trail;
