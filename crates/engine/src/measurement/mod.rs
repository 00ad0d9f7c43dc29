//! What a transfer measures about itself while it runs: [`progress`], its live counters;
//! [`listing`], the files it completed, one by one (`cp -v`); [`pace`], the rate its
//! connections keep to (`cp --bwlimit`).

pub mod listing;
pub mod pace;
pub mod progress;
