//! The wire: generated `compactd.v1` types and the one place they meet the
//! core. Every conversion is strict in both directions, so a server and a
//! client built from this crate can never disagree on what a value means: an
//! unknown enum number, invalid JSON text or a missing required message is a
//! [`ConvertError`] naming the field, never a silent default. Only the zero
//! values the API documents as "the default" (an unspecified outcome is a
//! success, an unspecified sensitivity is internal) are mapped to one.
//!
//! Outbound (core → wire) conversions are total `From` impls; inbound ones are
//! `TryFrom` impls whose errors name the field relative to the value
//! converted, and [`ConvertError::within`] prefixes the enclosing path
//! (`messages[3]` + `role` → `thread.messages[3].role`).

mod plan;
mod render;
pub mod status;
mod thread;

#[cfg(test)]
mod tests;

use thiserror::Error;

pub use render::counting_to_pb;
pub use render::output_format;
pub use thread::{
    observations_from_pb, observations_to_pb, policy_from_overrides, sensitivity, sensitivity_to_pb,
};

/// Generated protobuf messages, server and client of `compactd.v1`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod pb {
    tonic::include_proto!("compactd.v1");

    /// Encoded descriptor set of `proto/`, for server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/compactd_descriptor.bin"));
}

/// A wire value the core cannot represent.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{field}: {message}")]
pub struct ConvertError {
    /// Dotted path of the offending field (`thread.messages[3].role`).
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl ConvertError {
    /// An error at `field`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        ConvertError {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The same error seen from the enclosing value at `prefix`.
    #[must_use]
    pub fn within(mut self, prefix: &str) -> Self {
        self.field = join(prefix, &self.field);
        self
    }
}

/// `a` + `b` as a field path: `tools` + `[0].name` → `tools[0].name`,
/// `thread` + `id` → `thread.id`.
fn join(prefix: &str, field: &str) -> String {
    if prefix.is_empty() {
        field.to_string()
    } else if field.is_empty() {
        prefix.to_string()
    } else if field.starts_with('[') {
        format!("{prefix}{field}")
    } else {
        format!("{prefix}.{field}")
    }
}

type Result<T> = std::result::Result<T, ConvertError>;

/// A required sub-message, converted; `field` names it.
pub fn required<P, C>(value: Option<P>, field: &str) -> Result<C>
where
    C: TryFrom<P, Error = ConvertError>,
{
    let v = value.ok_or_else(|| ConvertError::new(field, "is required"))?;
    C::try_from(v).map_err(|e| e.within(field))
}

/// An optional sub-message, converted when present; errors name `field`.
pub fn optional<P, C>(value: Option<P>, field: &str) -> Result<Option<C>>
where
    C: TryFrom<P, Error = ConvertError>,
{
    value
        .map(|v| C::try_from(v).map_err(|e| e.within(field)))
        .transpose()
}

/// Every element of a repeated field, converted; errors name the index.
pub fn each<P, C>(values: Vec<P>, field: &str) -> Result<Vec<C>>
where
    C: TryFrom<P, Error = ConvertError>,
{
    values
        .into_iter()
        .enumerate()
        .map(|(i, v)| C::try_from(v).map_err(|e| e.within(&format!("{field}[{i}]"))))
        .collect()
}

fn unknown_enum(field: &str, v: i32) -> ConvertError {
    ConvertError::new(field, format!("unknown enum value {v}"))
}

fn unset_enum(field: &str) -> ConvertError {
    ConvertError::new(field, "is required")
}
