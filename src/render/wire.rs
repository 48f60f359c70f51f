//! What the provider adapters add to a request, shared by the encoders
//! (`provider/`) and the counter, which counts what they send.

use serde_json::{json, Value};

use crate::model::ToolSchema;

/// Text of the user message inserted when the conversation would start with
/// the assistant (or be empty).
pub const CONTINUATION_TEXT: &str = "(continuing conversation)";
/// Text standing in for a message (or tool result) that would otherwise be empty.
pub const EMPTY_TEXT: &str = "(empty)";

/// The `input_schema` a tool is sent with: required by the API, so a tool
/// without parameters takes an empty object.
pub fn input_schema(t: &ToolSchema) -> Value {
    if t.parameters.is_object() {
        t.parameters.clone()
    } else {
        json!({"type": "object", "properties": {}})
    }
}

/// How a rendered tool result relates to the output it came with, for an
/// encoder that sends the result back in its provider form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kept {
    /// Sent as it came.
    Same,
    /// Sent as it came between the tool-output delimiter's two lines.
    Delimited {
        /// The opening line.
        open: String,
        /// The closing line.
        close: String,
    },
    /// Changed (cleared, externalized, capped): sent as its rendered text.
    Changed,
}

/// What `rendered` is of `original` (the text the importer read from it).
pub fn kept_as(rendered: &str, original: &str) -> Kept {
    if rendered == original {
        return Kept::Same;
    }
    if rendered == super::delimit_data(original) {
        let open = rendered.lines().next().unwrap_or_default().to_string();
        let close = rendered.lines().last().unwrap_or_default().to_string();
        return Kept::Delimited { open, close };
    }
    Kept::Changed
}

/// An output of parts as it came between the delimiter's lines, each a text
/// part of type `text_type`.
pub fn delimited_parts(parts: &[Value], open: &str, close: &str, text_type: &str) -> Value {
    let mut out = Vec::with_capacity(parts.len() + 2);
    out.push(json!({"type": text_type, "text": open}));
    out.extend(parts.iter().cloned());
    out.push(json!({"type": text_type, "text": close}));
    Value::Array(out)
}

/// `v[key]` = `value` on an object (a provider form being updated).
pub fn set(v: &mut Value, key: &str, value: Value) {
    if let Value::Object(o) = v {
        o.insert(key.to_string(), value);
    }
}
