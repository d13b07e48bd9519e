//! Helpers shared by the cross-cutting tests in `tests/tests/`.
//!
//! - [`cfn`]: reading `template.yaml` (short and long intrinsic forms).
//! - [`iam`]: a small offline evaluator of the template's IAM: identity policies of
//!   the roles, queue, key, topic and trust policies, resolved with a test's physical
//!   names, and the actions AWS implies beyond the API name.

pub mod cfn;
pub mod iam;
