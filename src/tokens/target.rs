//! What a request is counted for: the provider that will receive it and that
//! provider's framing. Counts must match what the provider is sent: thinking
//! blocks reach only Anthropic, reasoning items only the Responses API, and
//! each provider frames messages, tools and images its own way.

use super::overhead::ChatOverhead;

/// The provider a request goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Provider {
    /// OpenAI Chat Completions (and compatible servers).
    OpenAiChat,
    /// OpenAI Responses.
    OpenAiResponses,
    /// Anthropic Messages.
    Anthropic,
    /// Anything else (Gemini, unknown models): counted conservatively, with
    /// every part included.
    Other,
}

impl Provider {
    /// Stable name (fingerprints, reports).
    pub fn name(self) -> &'static str {
        match self {
            Provider::OpenAiChat => "openai-chat",
            Provider::OpenAiResponses => "openai-responses",
            Provider::Anthropic => "anthropic",
            Provider::Other => "other",
        }
    }

    /// The provider a model name implies, when no output format says.
    pub fn for_model(model: &str) -> Provider {
        let m = normalize(model);
        if m.contains("claude") {
            Provider::Anthropic
        } else if super::counter::encoding_known(model) {
            Provider::OpenAiChat
        } else {
            Provider::Other
        }
    }

    /// Whether Anthropic thinking blocks are sent (and so counted).
    pub fn sends_thinking(self) -> bool {
        matches!(self, Provider::Anthropic | Provider::Other)
    }

    /// Whether Responses reasoning items are sent (and so counted).
    pub fn sends_reasoning(self) -> bool {
        matches!(self, Provider::OpenAiResponses | Provider::Other)
    }
}

/// The provider and the framing a request is counted with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// Who receives it.
    pub provider: Provider,
    /// Their framing.
    pub overhead: ChatOverhead,
}

impl Target {
    /// The target for `provider` and `model`.
    pub fn new(provider: Provider, model: &str) -> Target {
        Target {
            provider,
            overhead: ChatOverhead::for_target(provider, model),
        }
    }

    /// OpenAI Chat Completions with the gpt-4o family's framing.
    pub fn openai_chat() -> Target {
        Target::new(Provider::OpenAiChat, "gpt-4o")
    }

    /// Stable description for fingerprints.
    pub fn describe(&self) -> String {
        format!("{}:{:?}", self.provider.name(), self.overhead)
    }
}

/// Lowercase, without a fine-tune prefix or a `vendor/` path.
pub(super) fn normalize(model: &str) -> String {
    let m = model.trim().to_ascii_lowercase();
    let m = m.strip_prefix("ft:").unwrap_or(&m).to_string();
    m.rsplit('/').next().unwrap_or(&m).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn providers_from_model_names() {
        for (m, p) in [
            ("gpt-4o", Provider::OpenAiChat),
            ("openai/gpt-4.1-mini", Provider::OpenAiChat),
            ("claude-sonnet-4-5", Provider::Anthropic),
            (
                "anthropic.claude-3-5-sonnet-20240620-v1:0",
                Provider::Anthropic,
            ),
            ("gemini-2.5-pro", Provider::Other),
            ("llama-3.1-70b", Provider::Other),
        ] {
            assert_eq!(Provider::for_model(m), p, "{m}");
        }
        assert!(Provider::Anthropic.sends_thinking() && !Provider::Anthropic.sends_reasoning());
        assert!(
            Provider::OpenAiResponses.sends_reasoning()
                && !Provider::OpenAiResponses.sends_thinking()
        );
        assert!(!Provider::OpenAiChat.sends_thinking() && !Provider::OpenAiChat.sends_reasoning());
    }
}
