//! Test-only helpers for sprat (filled in by the testkit work).
