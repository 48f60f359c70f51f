//! What each wire format knows, one file per format: `openai_chat.rs`,
//! `anthropic.rs`, `openai_responses.rs` and `neutral.rs` each hold the
//! format's reader (a body or log → a [`crate::model::Thread`], in an
//! `import` submodule), its encoder (a rendered [`crate::render::Request`]
//! → its request body), the check of a body against the provider's rules,
//! its tool-id rules, its body count, and what it is counted with: its
//! [`Framing`] (the flags the counting layer reads) and its
//! [`ChatOverhead`] (per-message and per-request tokens, image worst
//! cases). This module holds the one [`Format`] enum with its dispatch and
//! [`Format::target`], which picks a request's framing and overheads from
//! its format and model (the neutral format, the caller's own adapter, is
//! counted for the model's provider, or conservatively); `import.rs`
//! recognizes which format a body is in and holds what the readers share.
//!
//! The token, render and app layers name no provider: a format reaches
//! them only through [`Format`] and as [`Framing`] data.
//!
//! Adding a format:
//! 1. a file here with its `FRAMING`, `overhead(model)`, encoder, check,
//!    `count_body` and (if it is read too) an `import` submodule;
//! 2. one `Format` arm. Every dispatch is an exhaustive `match` on
//!    `Format`, so the compiler then lists each place the new format must
//!    answer: [`Format::encode`], [`Format::check`], [`body_tokens`],
//!    [`Format::target`], its names, and the proto's `OutputFormat`
//!    mapping in `src/proto/render.rs` (with the value added to
//!    `proto/compactd/v1/compactd.proto`);
//! 3. its recognition in `import.rs`, when bodies in it are read;
//! 4. its cells in `tests/format_pins.rs`, and the format in the fuzz
//!    oracle's list (`testkit/src/fuzz/oracle.rs`).

use serde::{Deserialize, Serialize};

pub mod anthropic;
pub mod anthropic_cache;
mod body;
mod import;
pub mod neutral;
pub mod openai_chat;
pub mod openai_responses;
#[cfg(test)]
pub(crate) mod testgen;
#[cfg(test)]
mod vocabulary_tests;

use serde_json::Value;

use crate::model::{Content, ContentPart, Dialect};
use crate::render::{ProviderOptions, RenderedMessage, Request, RequestCounter};
use crate::tokens::{encoding_known, normalize_model, ChatOverhead, Framing, Target};

pub use body::BodyCounter;
pub use import::{
    appended_from_json, field_with_flag, read_protected_flag_as, thread_from_json,
    thread_from_json_as, ImportError, ThreadInput,
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

/// Anything else (Gemini, unknown models) in the neutral format: every
/// reasoning part counted.
const OTHER: Framing = Framing {
    name: "other",
    sends_thinking: true,
    sends_reasoning: true,
    ..openai_chat::FRAMING
};

/// Reads a short name or the proto's long one (`openai_chat`,
/// `anthropic_messages`, `openai_responses`), in any case.
impl std::str::FromStr for Format {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let lower = s.to_ascii_lowercase();
        Format::ALL
            .into_iter()
            .find(|f| {
                let long = match f {
                    Format::Neutral => "neutral",
                    Format::OpenAiChat => "openai_chat",
                    Format::AnthropicMessages => "anthropic_messages",
                    Format::OpenAiResponses => "openai_responses",
                };
                lower == f.name() || lower == long
            })
            .ok_or_else(|| format!("{s:?} is not one of neutral, openai, anthropic, responses"))
    }
}

/// A provider part a format has no form for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsendable {
    /// The message holding it.
    pub message_id: String,
    /// Its index in the message's parts.
    pub part: usize,
    /// Its type.
    pub kind: String,
    /// The format it came in.
    pub from: Format,
    /// The format asked for.
    pub to: Format,
}

impl std::fmt::Display for Unsendable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "message {:?} part {} is {} item type {:?}, which {} has no form for",
            self.message_id,
            self.part,
            self.from.display_name(),
            self.kind,
            self.to.display_name()
        )
    }
}

/// A provider part as `dialect`'s body sends it: its JSON when it came in
/// that dialect, else its text when it is only text (`None`: neither;
/// [`Format::unsendable`] refuses such a thread first).
pub(crate) enum Sent {
    /// The part's own JSON.
    Raw(Value),
    /// Its text.
    Text(String),
}

pub(crate) fn sent(p: &crate::model::ProviderPart, dialect: Dialect) -> Option<Sent> {
    if p.dialect == dialect {
        Some(Sent::Raw(p.value()))
    } else {
        p.text_equivalent().map(Sent::Text)
    }
}

/// Whether `v`'s `arguments` string parses to `arguments`: then a call in
/// its provider form keeps them as they came (whitespace, key order).
pub(crate) fn same_arguments(v: &Value, arguments: &Value) -> bool {
    v.get("arguments")
        .and_then(Value::as_str)
        .is_some_and(|a| import::parse_arguments(Some(&Value::String(a.to_string()))) == *arguments)
}

/// OpenAI's prompt-cache routing key and safety identifier, as the caller
/// gave them: they route the request to a cache and name the end user, and
/// change nothing the model reads.
fn openai_cache_fields(body: &mut serde_json::Map<String, Value>, opts: &ProviderOptions) {
    for (key, value) in [
        ("prompt_cache_key", &opts.prompt_cache.key),
        ("safety_identifier", &opts.prompt_cache.safety_identifier),
    ] {
        if let Some(v) = value {
            body.insert(key.into(), Value::String(v.clone()));
        }
    }
}

/// A rendered request in its format.
#[derive(Debug, Clone, PartialEq)]
pub enum Encoded {
    /// The neutral request itself.
    Neutral(Request),
    /// A provider's request body.
    Body(Value),
}

impl Format {
    /// Every format, in the proto's order.
    pub const ALL: [Format; 4] = [
        Format::Neutral,
        Format::OpenAiChat,
        Format::AnthropicMessages,
        Format::OpenAiResponses,
    ];

    /// Its short name, as the command line spells it.
    pub fn name(self) -> &'static str {
        match self {
            Format::Neutral => "neutral",
            Format::OpenAiChat => "openai",
            Format::AnthropicMessages => "anthropic",
            Format::OpenAiResponses => "responses",
        }
    }

    /// The request in this format, checked against the provider's rules
    /// (pairing, adjacency, alternation, non-empty content); the check's
    /// complaint, naming positions and ids, never content, when it fails.
    /// The request is consumed where the encoder can move its text.
    pub fn encode(self, request: Request, opts: &ProviderOptions) -> Result<Encoded, String> {
        let body = match self {
            Format::Neutral => {
                neutral::check(&request)?;
                return Ok(Encoded::Neutral(request));
            }
            Format::OpenAiChat => openai_chat::into_openai(request, opts),
            Format::AnthropicMessages => anthropic::to_anthropic(&request, opts),
            Format::OpenAiResponses => openai_responses::into_responses(request, opts),
        };
        self.check(&body)?;
        Ok(Encoded::Body(body))
    }

    /// Whether `body` keeps the provider's rules (neutral output has no
    /// body: always).
    pub fn check(self, body: &Value) -> Result<(), String> {
        match self {
            Format::Neutral => Ok(()),
            Format::OpenAiChat => openai_chat::check_pairing(body),
            Format::AnthropicMessages => anthropic::check_structure(body),
            Format::OpenAiResponses => openai_responses::check_structure(body),
        }
    }

    /// How the provider's prompt cache serves bodies of this format for
    /// `model` (`None`: neutral output has no body).
    pub fn cache_rules(self, model: &str) -> Option<crate::render::cache::Rules> {
        use crate::render::cache::Rules;
        match self {
            Format::Neutral => None,
            Format::AnthropicMessages => Some(Rules::Breakpoints {
                minimum: anthropic_cache::minimum_cacheable(model),
            }),
            Format::OpenAiChat | Format::OpenAiResponses => Some(Rules::Automatic),
        }
    }

    /// Where a body's blocks and cache marks are (only breakpoint formats
    /// have marks).
    pub fn cache_layout(self, body: &Value) -> crate::render::cache::Layout {
        match self {
            Format::AnthropicMessages => anthropic_cache::layout(body),
            _ => crate::render::cache::Layout::default(),
        }
    }

    /// The tool-call ids the body sends differently from the request, as
    /// (the caller's, the provider's), in request order.
    pub fn tool_id_rewrites(self, request: &Request) -> Vec<(String, String)> {
        match self {
            Format::AnthropicMessages => anthropic::tool_id_rewrites(request),
            Format::OpenAiResponses => openai_responses::tool_id_rewrites(request),
            Format::Neutral | Format::OpenAiChat => Vec::new(),
        }
    }

    /// How many elements of the body's message list a request's system
    /// prompt and `messages` become, when each message becomes its own
    /// elements whatever its neighbours (so a body can be extended by
    /// encoding only what follows a kept part); `None` for formats that
    /// merge or rename across messages (Anthropic joins same-role turns,
    /// Anthropic and Responses make tool ids unique over the request).
    pub fn elements_of(self, system: Option<&str>, messages: &[RenderedMessage]) -> Option<usize> {
        match self {
            Format::OpenAiChat => Some(
                usize::from(system.is_some_and(|s| !s.is_empty()))
                    + messages.iter().filter(|m| openai_chat::sends(m)).count(),
            ),
            Format::Neutral | Format::AnthropicMessages | Format::OpenAiResponses => None,
        }
    }

    /// Tokens of the elements `range` of a body's message list, as the
    /// body's count ([`body_tokens`]) adds them up; `None` where
    /// [`Format::elements_of`] is.
    pub fn element_tokens(
        self,
        body: &Value,
        range: std::ops::Range<usize>,
        rc: &RequestCounter<'_>,
    ) -> Option<u32> {
        let bc = BodyCounter::new(rc);
        match self {
            Format::OpenAiChat => Some(
                body::array(body, "messages")
                    .skip(range.start)
                    .take(range.len())
                    .map(|m| openai_chat::count_message(m, &bc))
                    .sum(),
            ),
            Format::Neutral | Format::AnthropicMessages | Format::OpenAiResponses => None,
        }
    }

    /// The provider vocabulary a body in this format is written in
    /// (`None`: the neutral format, which carries every part as it is).
    pub fn dialect(self) -> Option<Dialect> {
        match self {
            Format::Neutral => None,
            Format::OpenAiChat => Some(Dialect::OpenAiChat),
            Format::AnthropicMessages => Some(Dialect::AnthropicMessages),
            Format::OpenAiResponses => Some(Dialect::OpenAiResponses),
        }
    }

    /// The format a dialect's bodies are.
    pub fn of_dialect(d: Dialect) -> Format {
        match d {
            Dialect::OpenAiChat => Format::OpenAiChat,
            Dialect::AnthropicMessages => Format::AnthropicMessages,
            Dialect::OpenAiResponses => Format::OpenAiResponses,
        }
    }

    /// The first provider part of `messages` this format cannot send: one
    /// of another format that is more than text with metadata. Nothing is
    /// dropped silently: such a thread is refused in this format.
    pub fn unsendable<'a>(
        self,
        messages: impl IntoIterator<Item = &'a crate::model::Message>,
    ) -> Option<Unsendable> {
        let dialect = self.dialect()?;
        messages.into_iter().find_map(|m| {
            // A custom (free-form) tool call: only OpenAI formats have one.
            if dialect == Dialect::AnthropicMessages {
                if let Some((k, c)) = m.tool_calls.iter().enumerate().find(|(_, c)| c.is_custom()) {
                    return Some(Unsendable {
                        message_id: m.id.clone(),
                        part: k,
                        kind: c.wire.as_ref().map_or_else(String::new, |w| w.kind.clone()),
                        from: Format::of_dialect(c.wire.as_ref().map_or(dialect, |w| w.dialect)),
                        to: self,
                    });
                }
            }
            let Content::Parts(parts) = &m.content else {
                return None;
            };
            parts.iter().enumerate().find_map(|(k, p)| match p {
                ContentPart::Provider(p)
                    if p.dialect != dialect && p.text_equivalent().is_none() =>
                {
                    Some(Unsendable {
                        message_id: m.id.clone(),
                        part: k,
                        kind: p.kind.clone(),
                        from: Format::of_dialect(p.dialect),
                        to: self,
                    })
                }
                _ => None,
            })
        })
    }

    /// The name a person reads in warnings.
    pub fn display_name(self) -> &'static str {
        match self {
            Format::Neutral => "the neutral format",
            Format::OpenAiChat => "OpenAI Chat",
            Format::AnthropicMessages => "Anthropic",
            Format::OpenAiResponses => "OpenAI Responses",
        }
    }

    /// What a request in `format` for `model` is counted for: the format's
    /// framing, or for neutral output (and Compact) the one the model
    /// implies.
    pub fn target(format: Option<Format>, model: &str) -> Target {
        let format = match format {
            Some(Format::Neutral) | None => implied_by(model),
            given => given,
        };
        // An OpenAI format for a model no OpenAI tokenizer knows (a gateway
        // alias) gets the conservative overheads.
        let openai = || {
            if encoding_known(model) {
                openai_chat::overhead(model)
            } else {
                conservative_overhead()
            }
        };
        let (framing, overhead) = match format {
            Some(Format::OpenAiChat) => (openai_chat::FRAMING, openai()),
            Some(Format::OpenAiResponses) => (openai_responses::FRAMING, openai()),
            Some(Format::AnthropicMessages) => (anthropic::FRAMING, anthropic::overhead(model)),
            Some(Format::Neutral) | None => (OTHER, conservative_overhead()),
        };
        Target { framing, overhead }
    }

    /// OpenAI Chat Completions with the gpt-4o family's framing.
    pub fn openai_chat_target() -> Target {
        Format::target(Some(Format::OpenAiChat), "gpt-4o")
    }
}

/// Tokens of `body` in `format` as the target of `rc` reads it. Neutral
/// output is not a body: `None`.
pub fn body_tokens(format: Format, body: &Value, rc: &RequestCounter<'_>) -> Option<u32> {
    let bc = BodyCounter::new(rc);
    match format {
        Format::Neutral => None,
        Format::OpenAiChat => Some(openai_chat::count_body(body, &bc)),
        Format::AnthropicMessages => Some(anthropic::count_body(body, &bc)),
        Format::OpenAiResponses => Some(openai_responses::count_body(body, &bc)),
    }
}

/// The provider format a model name implies, when no output format says
/// (`None`: neither Claude nor a model an OpenAI tokenizer knows).
fn implied_by(model: &str) -> Option<Format> {
    if normalize_model(model).contains("claude") {
        Some(Format::AnthropicMessages)
    } else if encoding_known(model) {
        Some(Format::OpenAiChat)
    } else {
        None
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
pub(super) const MAX_IMAGE_TOKENS: u32 = 4784;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_read_their_short_and_long_names_in_any_case() {
        for f in Format::ALL {
            assert_eq!(f.name().parse::<Format>(), Ok(f));
        }
        assert_eq!("OpenAI_Chat".parse(), Ok(Format::OpenAiChat));
        assert_eq!("anthropic_messages".parse(), Ok(Format::AnthropicMessages));
        assert_eq!("openai_responses".parse(), Ok(Format::OpenAiResponses));
        let e = "xml".parse::<Format>().unwrap_err();
        assert!(e.contains("\"xml\"") && e.contains("responses"), "{e}");
    }

    fn framing(model: &str) -> Framing {
        Format::target(None, model).framing
    }

    #[test]
    fn framings_from_model_names() {
        for (m, f) in [
            ("gpt-4o", openai_chat::FRAMING),
            ("openai/gpt-4.1-mini", openai_chat::FRAMING),
            ("claude-sonnet-4-5", anthropic::FRAMING),
            (
                "anthropic.claude-3-5-sonnet-20240620-v1:0",
                anthropic::FRAMING,
            ),
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
        let o = openai_chat::overhead("gpt-4o");
        assert_eq!((o.per_message, o.per_name, o.reply_priming), (4, 1, 3));
        assert_eq!(Format::target(None, "gpt-4o").overhead, o);
        assert_eq!(
            Format::target(None, "claude-sonnet-4-5").overhead,
            anthropic::overhead("claude-sonnet-4-5")
        );
        assert_eq!(anthropic::overhead("x").tools_preamble, 810);
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
            assert_eq!(openai_chat::image_tokens(m), n, "{m}");
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
            assert_eq!(anthropic::image_tokens(m), n, "{m}");
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
            [
                openai_chat::FRAMING,
                openai_responses::FRAMING,
                anthropic::FRAMING,
                OTHER
            ]
            .map(|f| f.name),
            ["openai-chat", "openai-responses", "anthropic", "other"]
        );
    }
}
