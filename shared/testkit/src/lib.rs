//! Test and local-stack machinery, kept out of the production crates.
//!
//! The Lambda binaries depend on `deferred-retry-domain`, `-aws` and `-runtime` only;
//! everything here serves the tests, `retryctl`'s local stack, the verifier and the
//! benchmarks (`cargo tree -e normal -p response-handler` lists no `deferred-retry-testkit`).
//!
//! - [`proxy`]: a recording pass-through in front of moto: every API call with its
//!   caller (access key id), service, operation and resource ARNs.

pub mod oracle;
pub mod ports;
pub mod proxy;
