//! Helpers shared by the cross-cutting tests in `tests/tests/`.
