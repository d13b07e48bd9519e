//! AWS adapters of the domain's ports and configuration from the environment: what
//! the Lambda binaries link. The local (moto server) stack, provisioning and the
//! other test machinery live in `deferred-retry-testkit`.
//!
//! - [`config`]: one configuration struct per function, read from the environment,
//!   and the physical resource names of a stack ([`config::StackNames`]).

pub mod audit;
pub mod breaker;
pub mod clients;
pub mod config;
pub mod dynamo;
pub mod errors;
pub mod item;
pub mod purge;
pub mod retention;
pub mod scan;
pub mod scheduler;
pub mod sqs;
