//! What each wire format knows, in one place: the [`Format`] a request is
//! rendered in, and what it is counted for ([`Format::target`]): the
//! format's framing rules (as data the counting layer reads, see
//! [`Framing`]), its per-message overheads and the tokenizer.
//!
//! The token layer names no provider: a format's behaviour reaches it only
//! as a [`Framing`] and a [`ChatOverhead`] built here.

use serde::{Deserialize, Serialize};

pub mod anthropic;
pub mod openai_chat;
pub mod openai_responses;
#[cfg(test)]
pub(crate) mod testgen;

use crate::tokens::{
    encoding_known, normalize_model, BlankFiller, ChatOverhead, Framing, IdGrowth, Target,
    TokenizerRule,
};

/// The form a rendered request is returned in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// Neutral messages plus the system prompt, for callers with their own adapter.
    #[default]
    Neutral,
    /// An OpenAI Chat Completions request body.
    OpenAiChat,
    /// An Anthropic Messages request body.
    AnthropicMessages,
    /// An OpenAI Responses request body (`input` items).
    OpenAiResponses,
}

/// OpenAI Chat Completions (and compatible servers): sent as given.
const OPENAI_CHAT: Framing = Framing {
    name: "openai-chat",
    sends_thinking: false,
    sends_reasoning: false,
    labels_late_instructions: false,
    joins_non_user_parts: false,
    id_growth: IdGrowth::Verbatim,
    wraps_scalar_input: false,
    blank_filler: BlankFiller::Never,
    tools_as_sent: false,
    continuation: false,
    tokenizer: TokenizerRule::ByModel,
};

/// OpenAI Responses: reasoning items are sent; every role's parts but the
/// user's go joined; a reused call id gets a suffix; a blank user message
/// is filled.
const OPENAI_RESPONSES: Framing = Framing {
    name: "openai-responses",
    sends_reasoning: true,
    joins_non_user_parts: true,
    id_growth: IdGrowth::Suffix,
    blank_filler: BlankFiller::UserOnly,
    tools_as_sent: true,
    ..OPENAI_CHAT
};

/// Anthropic Messages: thinking is sent; later instructions are labelled;
/// ids it refuses are hashed; scalar tool input is wrapped; blank content
/// is filled; a conversation may need a continuation message; counted as
/// Claude's text whatever the model is called.
const ANTHROPIC: Framing = Framing {
    name: "anthropic",
    sends_thinking: true,
    labels_late_instructions: true,
    id_growth: IdGrowth::HashedSuffix,
    wraps_scalar_input: true,
    blank_filler: BlankFiller::Always,
    tools_as_sent: true,
    continuation: true,
    tokenizer: TokenizerRule::ClaudeEstimate,
    ..OPENAI_CHAT
};

/// Anything else (Gemini, unknown models) in the neutral format: every
/// reasoning part counted.
const OTHER: Framing = Framing {
    name: "other",
    sends_thinking: true,
    sends_reasoning: true,
    ..OPENAI_CHAT
};

impl Format {
    /// What a request in `format` for `model` is counted for: the format's
    /// framing, or for neutral output (and Compact) the one the model
    /// implies.
    pub fn target(format: Option<Format>, model: &str) -> Target {
        let framing = match format {
            Some(Format::OpenAiChat) => OPENAI_CHAT,
            Some(Format::OpenAiResponses) => OPENAI_RESPONSES,
            Some(Format::AnthropicMessages) => ANTHROPIC,
            Some(Format::Neutral) | None => framing_for_model(model),
        };
        let overhead = if framing == ANTHROPIC {
            anthropic_overhead(model)
        } else if (framing == OPENAI_CHAT || framing == OPENAI_RESPONSES) && encoding_known(model) {
            ChatOverhead {
                per_image: openai_image_tokens(model),
                ..openai_overhead()
            }
        } else {
            conservative_overhead()
        };
        Target { framing, overhead }
    }

    /// OpenAI Chat Completions with the gpt-4o family's framing.
    pub fn openai_chat_target() -> Target {
        Format::target(Some(Format::OpenAiChat), "gpt-4o")
    }
}

/// The framing a model name implies, when no output format says.
fn framing_for_model(model: &str) -> Framing {
    if normalize_model(model).contains("claude") {
        ANTHROPIC
    } else if encoding_known(model) {
        OPENAI_CHAT
    } else {
        OTHER
    }
}

/// OpenAI Chat Completions.
///
/// - `per_message` 4: the OpenAI cookbook ("How to count tokens with
///   tiktoken") counts 3 framing tokens per message (`<|start|>`,
///   `<|message|>`, `<|end|>`) plus the encoded role, and every role name
///   is one token in o200k and cl100k (asserted in a test). Folding the
///   role in means callers need not count it.
/// - `per_name` 1 and `reply_priming` 3: the cookbook's numbers, which
///   match the API's `prompt_tokens` for gpt-3.5/4/4o.
/// - `per_tool_call` 10: OpenAI does not publish it; tiktoken-rs uses 1,
///   which undercounts because every call after the first gets its own
///   message header (4) plus a recipient and content-type header
///   (`to=functions.…`, `json`, about 5) and a terminator (1). Errs high.
/// - `per_image`: the model's worst case ([`openai_image_tokens`]), since
///   a URL says nothing of the image's size.
fn openai_overhead() -> ChatOverhead {
    ChatOverhead {
        per_message: 4,
        per_name: 1,
        reply_priming: 3,
        per_tool_call: 10,
        per_image: 1445,
        per_block: 4,
        tools_preamble: 0,
    }
}

/// Anthropic Messages. Anthropic publishes no per-message framing; its
/// token-counting example (a system prompt and one message, 14 tokens)
/// implies about 6, so 8 per message and per block. A tool use gets 16
/// and a tool result's id 4: the adapter may add a `_<n>` suffix to a
/// reused id. Once per request 8 for the reply header (the
/// `(continuing conversation)` message the adapter may add is counted
/// with the request's fixed part). A request with tools pays
/// Anthropic's hidden tool-use system prompt: 804 tokens at most in its
/// published table (Opus 4.7, `tool_choice: any`), so 810.
fn anthropic_overhead(model: &str) -> ChatOverhead {
    ChatOverhead {
        per_message: 8,
        per_name: 4,
        reply_priming: 8,
        per_tool_call: 16,
        per_image: anthropic_image_tokens(model),
        per_block: 8,
        tools_preamble: 810,
    }
}

/// Providers that publish no framing rules (Google, unknown): OpenAI's
/// numbers with headroom, and the largest per-image cost any provider
/// publishes.
fn conservative_overhead() -> ChatOverhead {
    ChatOverhead {
        per_message: 8,
        per_name: 2,
        reply_priming: 8,
        per_tool_call: 16,
        per_image: MAX_IMAGE_TOKENS,
        per_block: 8,
        tools_preamble: 0,
    }
}

/// The largest per-image token cost any supported provider publishes
/// (Anthropic's high-resolution models: 4784 visual tokens).
const MAX_IMAGE_TOKENS: u32 = 4784;

/// Worst-case tokens of one image for an OpenAI model (OpenAI's "Images and
/// vision" guide). Tile models scale to 2048×2048 and the short side to 768:
/// at most 8 tiles. Patch models cap at 1536 patches times a multiplier.
/// - gpt-4o, gpt-4.1, gpt-4.5, chatgpt-4o: 85 + 8 × 170 = 1445
/// - o1, o3: 75 + 8 × 150 = 1275
/// - gpt-4o-mini: 2833 + 8 × 5667 = 48169 (its images are billed as tokens
///   at this rate)
/// - gpt-4.1-mini 1536 × 1.62, gpt-4.1-nano 1536 × 2.46, o4-mini 1536 × 1.72
/// - anything else (gpt-5 family and newer): the largest patch cost, 3779
fn openai_image_tokens(model: &str) -> u32 {
    let m = normalize_model(model);
    let is = |p: &str| m == p || m.starts_with(&format!("{p}-"));
    if is("gpt-4o-mini") {
        48_169
    } else if is("gpt-4.1-nano") {
        3779
    } else if is("gpt-4.1-mini") {
        2489
    } else if is("o4-mini") {
        2642
    } else if is("o1") || is("o3") {
        1275
    } else if [
        "gpt-4o",
        "gpt-4.1",
        "gpt-4.5",
        "chatgpt-4o",
        "gpt-4-turbo",
        "gpt-4",
    ]
    .iter()
    .any(|p| is(p))
    {
        1445
    } else {
        3779
    }
}

/// Worst-case tokens of one image for a Claude model (Anthropic's vision
/// guide: 28 px patches, capped at 1568 visual tokens, 4784 from Opus 4.7 on).
/// Models known to predate the larger cap get 1600 (the older documented
/// ceiling); any other Claude model gets 4784.
fn anthropic_image_tokens(model: &str) -> u32 {
    let m = normalize_model(model);
    let older = m.contains("claude-3")
        || m.contains("claude-sonnet-4")
        || m.contains("claude-haiku-4")
        || m.split("claude-opus-4")
            .nth(1)
            .is_some_and(|rest| match rest.strip_prefix('-') {
                // `claude-opus-4`, or a date (`-20250514`): Opus 4.0.
                None => true,
                Some(v) => {
                    let minor: String = v.chars().take_while(char::is_ascii_digit).collect();
                    minor.len() != 1 || minor.parse::<u32>().is_ok_and(|n| n < 7)
                }
            });
    if older {
        1600
    } else {
        MAX_IMAGE_TOKENS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framing(model: &str) -> Framing {
        Format::target(None, model).framing
    }

    #[test]
    fn framings_from_model_names() {
        for (m, f) in [
            ("gpt-4o", OPENAI_CHAT),
            ("openai/gpt-4.1-mini", OPENAI_CHAT),
            ("claude-sonnet-4-5", ANTHROPIC),
            ("anthropic.claude-3-5-sonnet-20240620-v1:0", ANTHROPIC),
            ("gemini-2.5-pro", OTHER),
            ("llama-3.1-70b", OTHER),
        ] {
            assert_eq!(framing(m), f, "{m}");
        }
        // Which reasoning parts each format sends (and so counts).
        let sends = |format| {
            let f = Format::target(Some(format), "gpt-4o").framing;
            (f.sends_thinking, f.sends_reasoning)
        };
        assert_eq!(sends(Format::AnthropicMessages), (true, false));
        assert_eq!(sends(Format::OpenAiResponses), (false, true));
        assert_eq!(sends(Format::OpenAiChat), (false, false));
        let other = framing("gemini-2.5-pro");
        assert_eq!((other.sends_thinking, other.sends_reasoning), (true, true));
    }

    #[test]
    fn overhead_presets() {
        let o = openai_overhead();
        assert_eq!((o.per_message, o.per_name, o.reply_priming), (4, 1, 3));
        assert_eq!(Format::target(None, "gpt-4o").overhead, o);
        assert_eq!(
            Format::target(None, "claude-sonnet-4-5").overhead,
            anthropic_overhead("claude-sonnet-4-5")
        );
        assert_eq!(anthropic_overhead("x").tools_preamble, 810);
        let c = conservative_overhead();
        assert!(c.per_message >= o.per_message && c.per_image >= o.per_image);
        // An OpenAI format for a model OpenAI's tokenizers do not know.
        assert_eq!(
            Format::target(Some(Format::OpenAiChat), "my-gateway-alias").overhead,
            c
        );
    }

    #[test]
    fn image_worst_cases() {
        for (m, n) in [
            ("gpt-4o", 1445),
            ("gpt-4o-2024-08-06", 1445),
            ("gpt-4.1", 1445),
            ("gpt-4o-mini", 48_169),
            ("gpt-4.1-mini", 2489),
            ("gpt-4.1-nano", 3779),
            ("o4-mini", 2642),
            ("o3", 1275),
            ("gpt-5", 3779),
        ] {
            assert_eq!(openai_image_tokens(m), n, "{m}");
        }
        for (m, n) in [
            ("claude-3-5-sonnet-20241022", 1600),
            ("claude-sonnet-4-5", 1600),
            ("claude-opus-4-20250514", 1600),
            ("claude-opus-4-1", 1600),
            ("claude-opus-4-6", 1600),
            ("claude-opus-4-7", 4784),
            ("claude-opus-5", 4784),
        ] {
            assert_eq!(anthropic_image_tokens(m), n, "{m}");
        }
        assert_eq!(
            Format::target(None, "gemini-2.5-pro").overhead.per_image,
            MAX_IMAGE_TOKENS
        );
    }

    #[test]
    fn fingerprint_names_are_stable() {
        // They are part of every plan fingerprint: a rename recompacts
        // every committed thread once.
        assert_eq!(
            [OPENAI_CHAT, OPENAI_RESPONSES, ANTHROPIC, OTHER].map(|f| f.name),
            ["openai-chat", "openai-responses", "anthropic", "other"]
        );
    }
}
