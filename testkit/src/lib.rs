//! Test and benchmark support for compactd: kept out of the service's public
//! API so nothing test-only ships with it. Used as a dev-dependency only.

pub mod synth;
