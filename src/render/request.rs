//! The neutral request: what the renderer produces before a provider format is chosen.

use serde::{Deserialize, Serialize};

use crate::model::{Content, Role, ToolCall, ToolSchema};

/// Where a rendered message came from, so reports and provider adapters can
/// tell thread content from synthetic content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// A thread message, unchanged.
    Verbatim,
    /// A thread message whose content is a placeholder.
    Cleared,
    /// A summary standing for a span.
    Summary,
    /// A pointer to externalized content.
    Externalized,
    /// Artifact content injected for this turn only; never part of the thread.
    Rehydrated,
    /// Passages of compacted content matching the current request, for
    /// this turn only; never part of the thread.
    Recalled,
    /// Content a caller's hook adds for this turn; never part of the thread.
    Injected,
    /// The workspace slot of the assembled context; never part of the thread.
    Workspace,
}

/// One message of a rendered request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RenderedMessage {
    /// Role as sent.
    pub role: Role,
    /// Content as sent.
    pub content: Content,
    /// Assistant tool calls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For role tool: the call this answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// For role tool: the tool's name (Anthropic and logs want it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    /// True when the tool result is an error (Anthropic's `is_error`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
    /// Thread message id (first of the span for summaries), or the artifact id
    /// for rehydrated content.
    pub source_id: String,
    /// What produced it.
    pub origin: Origin,
    /// For role tool: the result as its provider wrote it (see
    /// [`crate::model::ToolResultEnvelope::wire`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wire: Option<Box<crate::model::ProviderPart>>,
}

/// A complete request in neutral form.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// System prompt, sent first (OpenAI) or separately (Anthropic).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// Conversation messages.
    pub messages: Vec<RenderedMessage>,
    /// Tool schemas.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSchema>,
    /// What rendering changed to satisfy providers (for the audit record);
    /// not part of the request itself.
    #[serde(skip)]
    pub notes: Vec<String>,
}

/// Provider-specific settings for the OpenAI and Anthropic payloads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderOptions {
    /// Model name written into the payload.
    pub model: String,
    /// `max_tokens` for the response (required by Anthropic; optional for OpenAI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    /// The provider's prompt cache: breakpoints, routing key, end user.
    #[serde(default)]
    pub prompt_cache: PromptCache,
}

/// How a body addresses the provider's prompt cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PromptCache {
    /// Place cache breakpoints (Anthropic's `cache_control`, see
    /// [`crate::provider::anthropic_cache`]); on unless the caller turns it
    /// off, since without them Anthropic caches nothing.
    pub breakpoints: bool,
    /// OpenAI's `prompt_cache_key`, written into OpenAI bodies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// OpenAI's `safety_identifier`, written into OpenAI bodies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub safety_identifier: Option<String>,
}

impl Default for PromptCache {
    fn default() -> Self {
        PromptCache {
            breakpoints: true,
            key: None,
            safety_identifier: None,
        }
    }
}
