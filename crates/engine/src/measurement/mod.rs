//! What a transfer measures about itself while it runs: [`progress`], its live counters.

pub mod progress;
