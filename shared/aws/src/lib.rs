//! AWS adapters of the domain's ports, configuration from the environment, and the
//! local (moto server) stack used by tests and `retryctl demo`.
//!
//! - [`local`]: moto server launcher and loopback SDK configuration.
//! - [`config`]: one configuration struct per function, read from the environment,
//!   and the physical resource names of a stack ([`config::StackNames`]).

pub mod audit;
pub mod clients;
pub mod config;
pub mod dynamo;
pub mod errors;
pub mod item;
pub mod local;
pub mod meter;
pub mod scheduler;
pub mod sqs;
