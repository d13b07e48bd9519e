//! Test and local-stack machinery, kept out of the production crates: the Lambda
//! binaries depend on `deferred-retry-domain`, `-aws` and `-runtime` only
//! (`cargo tree -e normal -p response-handler` lists no `deferred-retry-testkit`).
//!
//! - [`moto`]: the moto server launcher and loopback SDK configuration; [`provision`]:
//!   every table, queue and schedule group of a stack, as data (compared with
//!   `template.yaml`); [`drain`]: a table's stream into the audit writer.
//! - [`memory`]: in-memory adapters of every port, with DynamoDB's conditional semantics;
//!   [`meter`]: an SDK interceptor counting API calls and consumed capacity.
//! - [`proxy`]: a recording pass-through in front of moto, injecting [`faults`];
//!   [`trail`]: audit trails as `FROM>TO@attempt` strings; [`size`]: DynamoDB's item
//!   size; [`events`]: the SQS events Lambda delivers. See
//!   `docs/adapters.md#local-server-and-provisioning`.

pub mod drain;
pub mod events;
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
