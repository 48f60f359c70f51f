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
