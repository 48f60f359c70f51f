//! Placeholder replaced by the growth bench (issue 8).
fn main() {}
