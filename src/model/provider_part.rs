//! Provider parts: an item or block of a provider's own vocabulary that
//! compactd carries without modelling it (web search and code execution
//! calls, MCP items, files and documents, provider-side compaction, a text
//! block with `cache_control` or annotations, a type added next month).
//! Its JSON is kept byte for byte and sent back only to the format it came
//! in; compactd reads from it only what it needs: its readable text (for
//! search, summaries and artifacts), the ids it pairs by, and its media.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::message::JsonText;

/// The wire format a provider part came in: the only one it is sent back to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dialect {
    /// OpenAI Chat Completions.
    OpenAiChat,
    /// OpenAI Responses.
    OpenAiResponses,
    /// Anthropic Messages.
    AnthropicMessages,
}

impl Dialect {
    /// Wire name (the proto's output-format names, lower case).
    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::OpenAiChat => "openai_chat",
            Dialect::OpenAiResponses => "openai_responses",
            Dialect::AnthropicMessages => "anthropic_messages",
        }
    }

    /// Parses a wire name.
    pub fn parse(s: &str) -> Option<Dialect> {
        Some(match s {
            "openai_chat" => Dialect::OpenAiChat,
            "openai_responses" => Dialect::OpenAiResponses,
            "anthropic_messages" => Dialect::AnthropicMessages,
            _ => return None,
        })
    }
}

/// What to do with an item or block of a type compactd does not know
/// (one a provider added after this release).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnknownItems {
    /// Carry it as it came, with a warning in the response and the audit
    /// record.
    #[default]
    Carry,
    /// Refuse the thread with INVALID_ARGUMENT naming it.
    Refuse,
}

impl Dialect {
    /// Whether `kind` is a type of this dialect's request vocabulary that
    /// compactd knows (in the SDK versions it is tested with, `openai`
    /// 3.57 and `anthropic` 2.15; docs/providers.md lists them).
    pub fn knows(self, kind: &str) -> bool {
        let known: &[&str] = match self {
            Dialect::OpenAiChat => &[
                "message",
                "text",
                "image_url",
                "input_audio",
                "file",
                "refusal",
            ],
            Dialect::OpenAiResponses => &[
                "message",
                "input_text",
                "output_text",
                "input_image",
                "input_file",
                "refusal",
                "file_search_call",
                "computer_call",
                "computer_call_output",
                "web_search_call",
                "function_call",
                "function_call_output",
                "tool_search_call",
                "tool_search_output",
                "additional_tools",
                "configuration_update",
                "reasoning",
                "compaction",
                "image_generation_call",
                "code_interpreter_call",
                "local_shell_call",
                "local_shell_call_output",
                "shell_call",
                "shell_call_output",
                "apply_patch_call",
                "apply_patch_call_output",
                "mcp_list_tools",
                "mcp_approval_request",
                "mcp_approval_response",
                "mcp_call",
                "custom_tool_call_output",
                "custom_tool_call",
                "compaction_trigger",
                "item_reference",
                "program",
                "program_output",
            ],
            Dialect::AnthropicMessages => &[
                "text",
                "image",
                "document",
                "search_result",
                "thinking",
                "redacted_thinking",
                "tool_use",
                "tool_result",
                "server_tool_use",
                "web_search_tool_result",
                "web_fetch_tool_result",
                "code_execution_tool_result",
                "bash_code_execution_tool_result",
                "text_editor_code_execution_tool_result",
                "tool_search_tool_result",
                "mcp_tool_use",
                "mcp_tool_result",
                "container_upload",
                "compaction",
                "advisor_tool_result",
                "tool_addition",
                "tool_removal",
                "mcp_tool_listing",
                "fallback",
            ],
        };
        // Chat-shaped messages carrying Anthropic blocks are what LangChain
        // writes for a Claude conversation: Chat knows those blocks too.
        known.contains(&kind)
            || (self == Dialect::OpenAiChat && Dialect::AnthropicMessages.knows(kind))
    }
}

/// Keys whose strings are provider state or media, never conversation
/// text: not searched, not summarized, not redacted, not counted as text.
pub const STATE_KEYS: &[&str] = &["encrypted_content", "signature", "data", "file_data"];

/// Strings at least this long without whitespace, all in the base64
/// alphabet, are media or state, whatever key they are under.
const BLOB_MIN: usize = 256;

/// Whether `s` is an inline blob (base64 data, an encrypted state, a data
/// URL): structure, not language, so it holds for any text.
pub fn is_blob(s: &str) -> bool {
    if is_data_url(s) {
        return true;
    }
    s.len() >= BLOB_MIN
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=' | b'-' | b'_'))
}

/// Whether `s` is one base64 data URL and nothing else: a media type
/// without whitespace, then `;base64,` and only the base64 alphabet. Text
/// that merely starts like one (several pasted together, or prose after
/// it) is text, and is counted and sent as text.
fn is_data_url(s: &str) -> bool {
    let Some(rest) = s.strip_prefix("data:") else {
        return false;
    };
    let Some((media_type, payload)) = rest.split_once(";base64,") else {
        return false;
    };
    !media_type.bytes().any(|b| b.is_ascii_whitespace())
        && payload
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=' | b'-' | b'_'))
}

/// An item or block carried as the provider wrote it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProviderPart {
    /// The format it came in.
    pub dialect: Dialect,
    /// Its `type` (`web_search_call`, `document`, …; `item_reference` for
    /// a Responses reference without one).
    pub kind: String,
    /// Its JSON, exactly as it arrived.
    pub json: JsonText,
}

/// The media a part carries inline, for counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Media {
    /// An image.
    Image,
    /// A PDF of about this many pages.
    Pdf {
        /// Pages found in the file (at least 1).
        pages: u32,
    },
    /// Audio of this many decoded bytes.
    Audio {
        /// Decoded size.
        bytes: usize,
    },
    /// Any other inline file of this many decoded bytes.
    File {
        /// Decoded size.
        bytes: usize,
    },
}

/// Text tokens Anthropic publishes for one PDF page at most (1,500–3,000;
/// each page is also sent as an image).
pub const PDF_PAGE_TEXT_TOKENS: u32 = 3_000;
/// Bytes of PDF taken as at least one page, when its pages are hidden in
/// compressed object streams.
pub const PDF_BYTES_PER_PAGE: usize = 50_000;
/// Audio tokens per second of input (OpenAI: one per 100 ms).
pub const AUDIO_TOKENS_PER_SECOND: u32 = 10;
/// Bytes of audio taken as one second: 8 kbit/s, below any speech codec
/// a provider takes, so the count errs high.
pub const AUDIO_BYTES_PER_SECOND: usize = 1_000;

impl Media {
    /// Its tokens for a provider whose worst-case image is `per_image`:
    /// an image that; a PDF page its text and its image; audio by its
    /// duration at the lowest bitrate; any other file one token per two
    /// bytes (text extracted from it is at most that).
    pub fn tokens(self, per_image: u32) -> u32 {
        let sat = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        match self {
            Media::Image => per_image,
            Media::Pdf { pages } => pages.saturating_mul(PDF_PAGE_TEXT_TOKENS + per_image),
            Media::Audio { bytes } => {
                sat(bytes.div_ceil(AUDIO_BYTES_PER_SECOND)).saturating_mul(AUDIO_TOKENS_PER_SECOND)
            }
            Media::File { bytes } => sat(bytes.div_ceil(2)),
        }
    }
}

/// What a counter reads of a provider item or block given as JSON: its
/// compact text with media emptied, and the media.
pub fn countable(v: &Value) -> (String, Vec<Media>) {
    let mut media = Vec::new();
    collect_media(v, &mut media);
    if media.is_empty() {
        return (v.to_string(), media);
    }
    let mut v = v.clone();
    without_media(&mut v);
    (v.to_string(), media)
}

impl ProviderPart {
    /// A part from its parsed JSON (re-serialized once, compactly).
    pub fn new(dialect: Dialect, kind: &str, v: &Value) -> ProviderPart {
        ProviderPart {
            dialect,
            kind: kind.to_string(),
            json: JsonText::from_value(v),
        }
    }

    /// Its parsed JSON.
    pub fn value(&self) -> Value {
        self.json.parse()
    }

    /// The conversation text it holds, in order, one piece a line: every
    /// string but ids, types, provider state and inline blobs. What search
    /// indexes, summaries read and an artifact keeps beside the JSON.
    pub fn readable_text(&self) -> String {
        let mut out = Vec::new();
        collect_text(&self.value(), None, &mut out);
        out.join("\n")
    }

    /// The text it stands for in a format that has no form for it, when it
    /// is only text with metadata (a text block with `cache_control`, an
    /// `output_text` with annotations, a refusal, a message item with an
    /// id): `None` for everything else, which is refused there.
    pub fn text_equivalent(&self) -> Option<String> {
        // Parsed only for the kinds that can be text: this is asked of
        // every carried part whenever a message's text is read.
        if !matches!(
            self.kind.as_str(),
            "text" | "input_text" | "output_text" | "refusal" | "message"
        ) {
            return None;
        }
        let v = self.value();
        match self.kind.as_str() {
            "text" | "input_text" | "output_text" => {
                v.get("text").and_then(Value::as_str).map(str::to_string)
            }
            "refusal" => v.get("refusal").and_then(Value::as_str).map(str::to_string),
            "message" => {
                let refusal = v.get("refusal").and_then(Value::as_str);
                match v.get("content").unwrap_or(&Value::Null) {
                    // Calls and a `name` alone: no text.
                    Value::Null => Some(refusal.unwrap_or_default().to_string()),
                    Value::String(s) => Some(s.clone()),
                    Value::Array(a) => {
                        let mut texts = Vec::new();
                        for p in a {
                            let key = match p.get("type").and_then(Value::as_str) {
                                Some("input_text" | "output_text" | "text") => "text",
                                Some("refusal") => "refusal",
                                _ => return None,
                            };
                            texts.push(p.get(key)?.as_str()?.to_string());
                        }
                        Some(texts.join("\n"))
                    }
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// The ids other items name it by (`call_id`, `id`).
    pub fn ids(&self) -> Vec<String> {
        let v = self.value();
        ["call_id", "id"]
            .iter()
            .filter_map(|k| v.get(*k).and_then(Value::as_str))
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    }

    /// The id of an earlier item it answers, if it is an answer: an
    /// output's `call_id`, an approval's or an approved call's
    /// `approval_request_id`.
    pub fn answers(&self) -> Option<String> {
        let v = self.value();
        // `local_shell_call_output` names its call by `id`.
        let keys: &[&str] = if self.kind.ends_with("_output") {
            &["call_id", "id"]
        } else {
            &["approval_request_id"]
        };
        keys.iter()
            .find_map(|k| v.get(*k).and_then(Value::as_str).filter(|s| !s.is_empty()))
            .map(str::to_string)
    }

    /// The inline media it carries.
    pub fn media(&self) -> Vec<Media> {
        let mut out = Vec::new();
        collect_media(&self.value(), &mut out);
        out
    }

    /// What a counter reads: its JSON text with media emptied, and the
    /// media.
    pub fn countable(&self) -> (std::borrow::Cow<'_, str>, Vec<Media>) {
        let json = self.json.as_str();
        // What no medium is written without: the JSON as it is, unparsed
        // (a part is counted whenever its message is).
        let may_hold_media = ["data", "image", "format", "_type"]
            .iter()
            .any(|k| json.contains(k));
        if !may_hold_media {
            return (std::borrow::Cow::Borrowed(json), Vec::new());
        }
        let (text, media) = countable(&self.value());
        (std::borrow::Cow::Owned(text), media)
    }

    /// Bytes it carries, for size limits.
    pub fn byte_len(&self) -> usize {
        self.json.as_str().len()
    }
}

/// Strings worth reading, depth first in document order.
fn collect_text(v: &Value, key: Option<&str>, out: &mut Vec<String>) {
    match v {
        Value::String(s) => {
            let skipped = matches!(
                key,
                Some("type" | "id" | "call_id" | "status" | "media_type" | "tool_use_id")
            ) || key.is_some_and(|k| STATE_KEYS.contains(&k))
                || is_blob(s)
                || s.trim().is_empty();
            if !skipped {
                out.push(s.clone());
            }
        }
        Value::Array(a) => a.iter().for_each(|x| collect_text(x, key, out)),
        Value::Object(m) => {
            for (k, x) in m {
                collect_text(x, Some(k), out);
            }
        }
        _ => {}
    }
}

/// Inline media found anywhere in `v`: `data` and `file_data` strings
/// (Anthropic's base64 sources, OpenAI's `input_audio` and `input_file`),
/// data URLs, and blobs beside a media type or output format (a generated
/// image's `result`). Other blobs (encrypted state) are text to a counter.
fn collect_media(v: &Value, out: &mut Vec<Media>) {
    match v {
        Value::Object(m) => {
            let found = out.len();
            let hint = media_hint(m);
            for (k, x) in m {
                match x {
                    Value::String(s) if is_media(k, s, hint.as_deref()) => {
                        out.push(media_of(s, hint.as_deref()))
                    }
                    other => collect_media(other, out),
                }
            }
            // An image by URL or file id: the model's worst case all the same.
            let image = matches!(
                m.get("type").and_then(Value::as_str),
                Some("image" | "image_url" | "input_image")
            );
            if image && out.len() == found {
                out.push(Media::Image);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| collect_media(x, out)),
        _ => {}
    }
}

/// The media type an object names for its blobs.
fn media_hint(m: &serde_json::Map<String, Value>) -> Option<String> {
    let s = |k: &str| m.get(k).and_then(Value::as_str);
    s("media_type")
        .or_else(|| s("mime_type"))
        .map(str::to_string)
        // OpenAI `input_audio` names its format only (`wav`, `mp3`).
        .or_else(|| s("format").map(|f| format!("audio/{f}")))
        .or_else(|| s("output_format").map(|f| format!("image/{f}")))
}

/// Whether the string under `key` is inline media.
pub(crate) fn is_media(key: &str, s: &str, hint: Option<&str>) -> bool {
    is_data_url(s)
        || ((key == "data" || key == "file_data") && !s.is_empty())
        || (hint.is_some() && is_blob(s))
}

/// What a blob is, from its own data URL prefix or the type beside it.
fn media_of(s: &str, hint: Option<&str>) -> Media {
    let (ty, data) = match super::image::data_url(s) {
        Some((ty, data)) => (ty.to_string(), data.unwrap_or_default()),
        None => (hint.unwrap_or_default().to_string(), s),
    };
    let bytes = data.len() / 4 * 3;
    if ty.starts_with("image/") {
        Media::Image
    } else if ty == "application/pdf" {
        Media::Pdf {
            pages: pdf_pages(data)
                .max(u32::try_from(bytes.div_ceil(PDF_BYTES_PER_PAGE)).unwrap_or(u32::MAX)),
        }
    } else if ty.starts_with("audio/") {
        Media::Audio { bytes }
    } else {
        Media::File { bytes }
    }
}

/// `v` as compact JSON with its media strings emptied: what a counter
/// reads as text beside the media's own costs.
fn without_media(v: &mut Value) {
    match v {
        Value::Object(m) => {
            let hint = media_hint(m);
            for (k, x) in m.iter_mut() {
                match x {
                    Value::String(s) if is_media(k, s, hint.as_deref()) => s.clear(),
                    other => without_media(other),
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(without_media),
        _ => {}
    }
}

/// Pages of a base64 PDF: its `/Type /Page` objects (not `/Pages`), at
/// least 1. A compressed object stream can hide them; then the count is
/// low, which the per-byte floor in the counter makes up for.
fn pdf_pages(b64: &str) -> u32 {
    use base64::Engine;
    let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(b64.trim()) else {
        return 1;
    };
    let needle = b"/Type";
    let mut pages = 0u32;
    let mut i = 0;
    while let Some(at) = find(&bytes[i..], needle) {
        let mut j = i + at + needle.len();
        while bytes.get(j).is_some_and(|b| b.is_ascii_whitespace()) {
            j += 1;
        }
        if bytes[j..].starts_with(b"/Page") && !bytes[j..].starts_with(b"/Pages") {
            pages += 1;
        }
        i = j;
    }
    pages.max(1)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    /// One data URL is a blob; text that only starts like one (several
    /// pasted together, prose after it) is text, counted as text, as a
    /// body sends it (a long property run found one counted as an image
    /// and sent as 2,929 tokens of text against 1,484 budgeted).
    #[test]
    fn only_a_whole_data_url_is_a_blob() {
        let one = "data:image/png;base64,iVBORw0KGgo=";
        assert!(super::is_blob(one));
        assert!(super::is_media("text", one, None));
        for text in [
            format!("{one}{one}"),
            format!("{one} "),
            format!("{one} is the logo"),
            "data:image png;base64,iVBORw0KGgo=".to_string(),
        ] {
            assert!(!super::is_blob(&text), "{text}");
            assert!(!super::is_media("text", &text, None), "{text}");
        }
    }

    use super::*;
    use serde_json::json;

    #[test]
    fn readable_text_skips_ids_state_and_blobs() {
        let blob = "A".repeat(300);
        let p = ProviderPart::new(
            Dialect::AnthropicMessages,
            "web_search_tool_result",
            &json!({"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1",
                "content": [{"type": "web_search_result", "title": "Zürich 天気",
                    "url": "https://x.example/a", "encrypted_content": blob}]}),
        );
        assert_eq!(p.readable_text(), "Zürich 天気\nhttps://x.example/a");
        assert!(p.media().is_empty(), "{:?}", p.media());
    }

    #[test]
    fn media_is_found_by_type_and_data_url() {
        use base64::Engine;
        let pdf = b"%PDF-1.4 1 0 obj << /Type /Pages /Kids [2 0 R 3 0 R] >> 2 0 obj << /Type /Page >> 3 0 obj <</Type/Page>>";
        let b64 = base64::engine::general_purpose::STANDARD.encode(pdf);
        let doc = ProviderPart::new(
            Dialect::AnthropicMessages,
            "document",
            &json!({"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": b64}}),
        );
        assert_eq!(doc.media(), vec![Media::Pdf { pages: 2 }]);
        let audio = ProviderPart::new(
            Dialect::OpenAiChat,
            "input_audio",
            &json!({"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}),
        );
        assert_eq!(audio.media(), vec![Media::Audio { bytes: 6 }]);
        let file = ProviderPart::new(
            Dialect::OpenAiResponses,
            "input_file",
            &json!({"type": "input_file", "file_data": "data:application/pdf;base64,JVBERg==", "filename": "a.pdf"}),
        );
        assert_eq!(file.media(), vec![Media::Pdf { pages: 1 }]);
        assert_eq!(file.readable_text(), "a.pdf");
    }

    #[test]
    fn answers_and_ids() {
        let call = ProviderPart::new(
            Dialect::OpenAiResponses,
            "computer_call",
            &json!({"type": "computer_call", "id": "cu_1", "call_id": "call_1"}),
        );
        let out = ProviderPart::new(
            Dialect::OpenAiResponses,
            "computer_call_output",
            &json!({"type": "computer_call_output", "call_id": "call_1"}),
        );
        let approval = ProviderPart::new(
            Dialect::OpenAiResponses,
            "mcp_approval_response",
            &json!({"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": true}),
        );
        assert_eq!(call.ids(), vec!["call_1", "cu_1"]);
        assert_eq!(call.answers(), None);
        assert_eq!(out.answers().as_deref(), Some("call_1"));
        assert_eq!(approval.answers().as_deref(), Some("mcpr_1"));
    }

    #[test]
    fn text_equivalents_only_for_text() {
        let t = ProviderPart::new(
            Dialect::AnthropicMessages,
            "text",
            &json!({"type": "text", "text": "hé", "cache_control": {"type": "ephemeral"}}),
        );
        assert_eq!(t.text_equivalent().as_deref(), Some("hé"));
        let m = ProviderPart::new(
            Dialect::OpenAiResponses,
            "message",
            &json!({"type": "message", "role": "assistant", "id": "msg_1", "content": [
                {"type": "output_text", "text": "a", "annotations": []},
                {"type": "refusal", "refusal": "no"}]}),
        );
        assert_eq!(m.text_equivalent().as_deref(), Some("a\nno"));
        let d = ProviderPart::new(
            Dialect::AnthropicMessages,
            "document",
            &json!({"type": "document"}),
        );
        assert_eq!(d.text_equivalent(), None);
    }
}
