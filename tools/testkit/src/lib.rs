//! Test and local-stack machinery, kept out of the production crates (the Lambda
//! binaries depend on `deferred-retry-domain`, `-aws` and `-runtime` only).
//!
//! - [`moto`]: the moto launcher and loopback SDK configuration; [`provision`]: every
//!   table, queue and schedule group of a stack, as data; [`drain`]: a stream into the
//!   audit writer.
//! - [`memory`]: in-memory adapters of every port; [`meter`]: an SDK call counter;
//!   [`answers`]: the service's answers; [`logs`]: captured log lines.
//! - [`proxy`]: a recording pass-through in front of moto, injecting [`faults`];
//!   [`trail`], [`size`], [`events`]: audit trails, item sizes, Lambda's SQS events.
//!
//! `docs/adapters.md#local-server-and-provisioning`.

pub mod answers;
pub mod drain;
pub mod events;
pub mod faults;
pub mod logs;
pub mod memory;
pub mod meter;
pub mod moto;
pub mod oracle;
pub mod ports;
pub mod provision;
pub mod proxy;
pub mod size;
pub mod trail;
