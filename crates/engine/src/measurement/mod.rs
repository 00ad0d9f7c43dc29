//! What a transfer measures about itself while it runs: [`progress`], its live counters;
//! [`listing`], the files it completed, one by one (`cp -v`); [`pace`], the rate its
//! connections keep to (`cp --bwlimit`); [`acked`], what each push session's server has
//! acknowledged.

pub(crate) mod acked;
pub mod listing;
pub mod pace;
pub mod progress;
