//! Parsing and checking the `sprat cp --json` final report.
//!
//! The report must be the only thing on stdout: exactly one JSON object, with at least the keys
//! `files`, `dirs`, `bytes` (non-negative integers), `seconds` (a non-negative number) and
//! `bottleneck` (a non-empty string naming the slowest stage). [`parse_json_report`] panics with
//! the offending text if any of that does not hold. `serde_json` is re-exported for tests that
//! want to look at more keys. Not a schema for the report: only what the tests rely on.

pub use serde_json;
use serde_json::Value;

/// A parsed `--json` report.
#[derive(Clone, Debug)]
pub struct JsonReport {
    /// The whole object.
    pub value: Value,
}

impl JsonReport {
    /// `files`: regular files copied.
    pub fn files(&self) -> u64 {
        self.u64("files")
    }

    /// `dirs`: directories copied.
    pub fn dirs(&self) -> u64 {
        self.u64("dirs")
    }

    /// `bytes`: file content bytes copied.
    pub fn bytes(&self) -> u64 {
        self.u64("bytes")
    }

    /// `seconds`: wall time of the transfer.
    pub fn seconds(&self) -> f64 {
        self.value["seconds"].as_f64().unwrap_or(f64::NAN)
    }

    /// `bottleneck`: the stage that set the pace.
    pub fn bottleneck(&self) -> &str {
        self.value["bottleneck"].as_str().unwrap_or_default()
    }

    /// Another key's value (`Value::Null` if absent).
    pub fn get(&self, key: &str) -> &Value {
        &self.value[key]
    }

    /// The integer at `key` (panics, naming it, when it is not one).
    pub fn u64(&self, key: &str) -> u64 {
        self.value[key]
            .as_u64()
            .unwrap_or_else(|| panic!("--json report: `{key}` is not an integer: {}", self.value))
    }
}

/// Parses stdout of `sprat cp --json`; panics unless it is exactly one JSON object with the
/// required keys of the required types.
#[track_caller]
pub fn parse_json_report(stdout: &[u8]) -> JsonReport {
    let text = String::from_utf8_lossy(stdout);
    let value: Value = serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("--json: stdout is not exactly one JSON value ({e}):\n{text}"));
    assert!(
        value.is_object(),
        "--json: stdout is not a JSON object:\n{text}"
    );
    for key in ["files", "dirs", "bytes"] {
        assert!(
            value[key].is_u64(),
            "--json: key `{key}` missing or not a non-negative integer:\n{text}"
        );
    }
    let secs = value["seconds"].as_f64();
    assert!(
        secs.is_some_and(|s| s.is_finite() && s >= 0.0),
        "--json: key `seconds` missing or not a non-negative number:\n{text}"
    );
    assert!(
        value["bottleneck"].as_str().is_some_and(|s| !s.is_empty()),
        "--json: key `bottleneck` missing or not a non-empty string:\n{text}"
    );
    JsonReport { value }
}
