//! The HTTP bridge: the external service's consumer of the request queue, for a
//! service that speaks HTTP. See `docs/http-bridge.md`.

pub mod classify;
