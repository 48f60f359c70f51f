//! What a wire format adds to or leaves out of a request, as data: the
//! counting layer reads these flags and never asks which provider it is
//! counting for. Each format's values live with the format (`provider/`).

/// How a tool-call id can grow on its way to the provider (counted at its
/// longest).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IdGrowth {
    /// Sent as given.
    Verbatim,
    /// A reused id gets a `_<n>` suffix.
    Suffix,
    /// An id the provider refuses is hashed, and a reused one gets a suffix.
    HashedSuffix,
}

/// Where blank content is sent as a filler text the provider accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlankFiller {
    /// Never: blank content is sent blank.
    Never,
    /// Only in user messages.
    UserOnly,
    /// In every message without tool calls.
    Always,
}

/// Which tokenizer counts what the format carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenizerRule {
    /// The one the model name implies.
    ByModel,
    /// Claude's estimate whatever the model is called (a Bedrock ARN, a
    /// gateway alias): counted as any other model it would undercount.
    ClaudeEstimate,
}

/// A wire format's framing rules, as the counter needs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Framing {
    /// Stable name (fingerprints, reports).
    pub name: &'static str,
    /// Thinking blocks are sent (and so counted).
    pub sends_thinking: bool,
    /// Reasoning items are sent (and so counted).
    pub sends_reasoning: bool,
    /// A later system or developer message is sent with a `[role]` label.
    pub labels_late_instructions: bool,
    /// The content parts of every role but the user's are sent joined as
    /// one string (which need not tokenize like its parts).
    pub joins_non_user_parts: bool,
    /// How tool-call ids can grow.
    pub id_growth: IdGrowth,
    /// Non-object tool input is sent wrapped as `{"value": …}`.
    pub wraps_scalar_input: bool,
    /// Where blank content is filled.
    pub blank_filler: BlankFiller,
    /// Tool schemas are counted as sent (an empty object schema for a tool
    /// without parameters), not in OpenAI's function-namespace form.
    pub tools_as_sent: bool,
    /// A continuation message may open the conversation (when it would
    /// otherwise open with the assistant): counted with the fixed part.
    pub continuation: bool,
    /// The tokenizer.
    pub tokenizer: TokenizerRule,
}
