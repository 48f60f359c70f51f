//! Thread files from bytes: a conversation (turns, tool calls and results,
//! thinking, images) with arbitrary Unicode in every text field, written in
//! one of the four import formats.

use serde_json::{json, Map, Value};

use super::oracle::{Knobs, WireJson, TRICKY_JSON_COUNT};
use super::source::Source;

/// Characters the generated text never holds, replaced in the serialized
/// document by what serde_json would never write: lone and reversed
/// surrogate escapes, a valid escaped pair, an escaped backslash before
/// `u` (a surrogate escape inside embedded JSON text), and 10,000 levels of
/// nesting. Plane 16's last private-use characters; generated text maps
/// them away (see [`scalar`]).
pub const MARKERS: [(char, &str); 5] = [
    ('\u{10FFF0}', "\\ud800"),
    ('\u{10FFF1}', "\\udfff"),
    ('\u{10FFF2}', "\\ude00\\ud83d"),
    ('\u{10FFF3}', "\\ud83d\\ude00"),
    ('\u{10FFF4}', "\\\\ud800"),
];

/// A whole string value that becomes a 10,000-deep array (see [`finish`]).
pub const DEEP_MARKER: char = '\u{10FFF5}';

/// Text that real tool output and conversations hold, and that compactd's
/// reducers look for: the issue's four crashing strings first.
pub const PIECES: &[&str] = &[
    "70→-",
    "│ 9f86d081 │",
    "résumé_id: ABC123X9",
    "注文ID: 4f1c2a9e7b",
    "é",
    "e\u{301}",
    "a\u{300}\u{316}\u{35c}\u{36f}",
    "ß",
    "İ",
    "\u{212a}",
    "ﬃ",
    "ǅ",
    "ΐ",
    "注文",
    "日本語のテキストです。",
    "한국어 텍스트",
    "中文（全角）：",
    "０１２３",
    "😀",
    "👨\u{200d}👩\u{200d}👧\u{200d}👦",
    "🏳\u{fe0f}\u{200d}🌈",
    "🇯🇵",
    "👍🏽",
    "❤\u{fe0f}",
    "\u{fe0f}",
    "\u{200d}",
    "مرحبا بالعالم",
    "שלום עולם",
    "\u{202e}txt.exe\u{202c}",
    "\u{2066}x\u{2069}",
    "\u{200f}",
    "\u{200e}",
    "\u{0}",
    "\u{7}",
    "\u{1b}[31m",
    "\u{7f}",
    "\u{85}",
    "\u{2028}",
    "\u{2029}",
    "\u{feff}",
    "\r\n",
    "\r",
    "\t",
    "\u{b}",
    "\u{c}",
    "\u{fffd}",
    "\u{ffff}",
    "\u{10ffff}",
    "\u{e000}",
    "\u{e0041}",
    "𝕳𝖊𝖑𝖑𝖔",
    "½²",
    "Error: ",
    "error[E0308]: mismatched types",
    "Traceback (most recent call last):",
    "FATAL ",
    "ValueError: ",
    "thread 'main' panicked at src/main.rs:3:5",
    "HTTP 503",
    "status 429",
    "exit code 1",
    "order_id: ",
    "\"refund_id\": \"re_k476bjcps24gf5\"",
    "orderId=",
    "ref: ",
    "id=",
    "src/main.rs:42:7",
    "/var/log/app.log",
    "C:\\Users\\x\\a.txt",
    "https://example.com/a?b=c&d=é",
    "~/x/y.txt",
    "CORE-8187",
    "sha256:",
    "0x87BDCF",
    "1,204 rows",
    "(3 rows)",
    "$1000",
    "€ 5",
    "300 USD",
    "PR #88431",
    "2024-04-27T10:16:00Z",
    "[2024-04-27 10:16:00]",
    "INFO",
    "WARN",
    "ERROR",
    "art_0123456789abcdef0123456789abcdef",
    "art_pending_",
    "read_artifact(\"art_",
    "[Context Summary - Turns 1-4]",
    "[Summary v1]",
    "[result expired] ",
    "[Externalized Content - artifact:",
    "<user_context source=\"x\">",
    "# Heading",
    "## ",
    "fn main() {",
    "def f(x):",
    "class A:",
    "| a | b |",
    "|---|---|",
    "+----+",
    "- [ ] todo",
    "1. step",
    "• ",
    "because ",
    ", since ",
    "Please ",
    "Could you ",
    "We decided to ",
    "never ",
    "must ",
    "don't ",
    "TODO: ",
    "?",
    ". ",
    "!",
    "…",
    "...",
    ":",
    "=",
    ",",
    ";",
    "\"",
    "'",
    "’",
    "”",
    "`",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    "<",
    ">",
    "|",
    "#",
    "\\",
    "\\u0000",
    "\\ud800",
    "data:image/png;base64,iVBORw0KGgo=",
    "data:image/svg+xml;base64,PHN2Zz4=",
    "https://img.example/x.heic",
];

const SEPARATORS: &[&str] = &[
    " ", " ", " ", "\n", "\n", "", ": ", " │ ", "→", "\t", ", ", "=", "\r\n", "\u{3000}",
];

/// Starts of Unicode blocks worth drawing runs of characters from.
const BLOCKS: &[u32] = &[
    0x0000, 0x0080, 0x00C0, 0x0300, 0x0370, 0x0400, 0x0590, 0x0600, 0x0900, 0x0E00, 0x1100, 0x2000,
    0x2060, 0x2190, 0x2500, 0x3000, 0x4E00, 0xAC00, 0xD7F0, 0xE000, 0xFE00, 0xFF00, 0xFFF0,
    0x1D400, 0x1F300, 0x1F600, 0x1F900, 0xE0000, 0x10FF80,
];

/// Tool names: file, query, search and shell tools get output of their shape.
pub const TOOLS: &[&str] = &[
    "read_file",
    "search",
    "sql_query",
    "http_get",
    "bash",
    "grep",
    "get_order",
    "検索",
    "a b",
];

/// The generator's state: the bytes, whether invalid escapes may be
/// written, and how many more bytes of text it may produce (so an input
/// stays fast to run).
struct Gen<'a> {
    src: Source<'a>,
    escapes: bool,
    room: usize,
    /// Whether the thread may break the rules validation enforces (empty
    /// ids and names, turns going back, duplicate ids): rare, so that most
    /// inputs get past validation.
    sloppy: bool,
}

/// A thread file and the request knobs decoded from `bytes`.
pub fn generate(bytes: &[u8]) -> (Vec<u8>, Knobs) {
    let mut g = Gen {
        src: Source::new(bytes),
        escapes: false,
        room: 0,
        sloppy: false,
    };
    g.escapes = g.src.chance(15);
    g.sloppy = g.src.chance(5);
    g.room = if g.src.chance(5) { 400_000 } else { 40_000 };
    let conv = conversation(&mut g);
    let format = g.src.below(4);
    let doc = conv.write_with(format, &mut g);
    let mut bytes = document(&doc);
    if g.src.chance(4) {
        corrupt(&mut g.src, &mut bytes);
    }
    let knobs = knobs(&mut g);
    (bytes, knobs)
}

/// `doc` as JSON text with the [`MARKERS`] expanded: how a thread file
/// gets what serde_json never writes (lone surrogate escapes, a
/// 10,000-deep array where a string holds only U+10FFF5).
pub fn document(doc: &Value) -> Vec<u8> {
    let mut text = doc.to_string();
    if text.contains(DEEP_MARKER) {
        let deep = format!("{}0{}", "[".repeat(10_000), "]".repeat(10_000));
        text = text.replace(&format!("\"{DEEP_MARKER}\""), &deep);
    }
    for (c, escape) in MARKERS {
        if text.contains(c) {
            text = text.replace(c, escape);
        }
    }
    text.into_bytes()
}

/// Malformed JSON: cut short, a byte changed, a range removed.
pub(super) fn corrupt(src: &mut Source<'_>, bytes: &mut Vec<u8>) {
    if bytes.is_empty() {
        return;
    }
    let at = src.below(bytes.len());
    match src.below(3) {
        0 => bytes.truncate(at),
        1 => bytes[at] = src.byte(),
        _ => {
            let end = (at + src.below(64)).min(bytes.len());
            bytes.drain(at..end);
        }
    }
}

impl Gen<'_> {
    fn text(&mut self, max_pieces: usize) -> String {
        let n = self.src.below(max_pieces + 1);
        let mut s = String::new();
        for _ in 0..n {
            if self.room == 0 {
                break;
            }
            let before = s.len();
            self.piece(&mut s);
            if self.src.chance(60) {
                s.push_str(self.src.pick(SEPARATORS));
            }
            self.room = self.room.saturating_sub(s.len() - before);
        }
        s
    }

    /// Short text: names, ids, keys.
    fn short(&mut self) -> String {
        let room = self.room;
        self.room = room.min(64);
        let s = self.text(3);
        self.room = room.saturating_sub(s.len());
        s
    }

    fn piece(&mut self, out: &mut String) {
        match self.src.below(17) {
            0..=4 => out.push_str(self.src.pick(PIECES)),
            5 => {
                let n = 1 + self.src.below(12);
                for _ in 0..n {
                    out.push(char::from(b'a' + (self.src.byte() % 26)));
                }
            }
            6 => {
                let forms: [&dyn Fn(u64) -> String; 5] = [
                    &|n| n.to_string(),
                    &|n| format!("-{n}"),
                    &|n| format!("{}.{}", n / 7, n % 1000),
                    &|n| format!("{n:x}"),
                    &|n| format!("{},{:03}", n / 1000, n % 1000),
                ];
                let n = u64::from_le_bytes(std::array::from_fn(|_| self.src.byte()));
                let f = self.src.below(forms.len());
                out.push_str(&forms[f](n >> self.src.below(64)));
            }
            7 => {
                let n = 4 + self.src.below(61);
                for _ in 0..n {
                    out.push(char::from(b"0123456789abcdef"[self.src.below(16)]));
                }
            }
            8 => {
                let c = scalar(self.src.below(0x11_0000) as u32);
                out.push(c);
            }
            9 => {
                let base = self.src.pick(BLOCKS);
                let n = 1 + self.src.below(24);
                for _ in 0..n {
                    out.push(scalar(base + self.src.below(128) as u32));
                }
            }
            10 => {
                // One very long token: no whitespace to split at.
                let unit = self.src.pick(PIECES);
                let times = self.src.below(4_000).min(self.room / unit.len().max(1));
                out.push_str(&unit.repeat(times));
            }
            11 => {
                let depth = self.src.below(12_000).min(self.room / 2);
                out.push_str(&"[".repeat(depth));
                out.push_str(&"]".repeat(depth));
            }
            12 => {
                let (h, m, s) = (self.src.below(24), self.src.below(60), self.src.below(60));
                let level = self.src.pick(&["INFO", "DEBUG", "WARN", "ERROR", "FATAL"]);
                out.push_str(&format!("2024-04-27T{h:02}:{m:02}:{s:02}Z {level} "));
            }
            13 => {
                let v = self.value(3);
                out.push_str(&v.to_string());
            }
            14 if self.escapes => out.push(self.src.pick(&MARKERS).0),
            15 => {
                let n = 1 + self.src.below(6);
                out.push_str(&format!("{:>6}→", self.src.below(100_000)));
                for _ in 0..n {
                    out.push_str(self.src.pick(PIECES));
                }
            }
            _ => out.push_str(self.src.pick(PIECES)),
        }
    }

    /// A JSON value: scalars of every kind (big numbers included), arrays,
    /// objects with Unicode keys, and now and then a long chain of nesting
    /// (within serde_json's limit of 128 once inside a document, or just
    /// beyond it).
    fn value(&mut self, depth: u32) -> Value {
        let kinds = match depth {
            0 => 5,
            1 | 2 => 7,
            _ => 8,
        };
        match self.src.below(kinds) {
            0 => Value::Null,
            1 => Value::Bool(self.src.chance(50)),
            2 => match self.src.below(8) {
                0 => json!(0),
                1 => json!(-1),
                2 => json!(u64::MAX),
                3 => json!(i64::MIN),
                4 => json!(1e308),
                5 => json!(-0.0),
                6 => json!(0.1),
                _ => json!(42),
            },
            3 => Value::String(self.text(4)),
            4 => Value::String(self.src.pick(PIECES).to_string()),
            5 => Value::Array(
                (0..self.src.below(5))
                    .map(|_| self.value(depth - 1))
                    .collect(),
            ),
            6 => {
                let mut m = Map::new();
                for _ in 0..self.src.below(5) {
                    let k = self.short();
                    let v = self.value(depth - 1);
                    m.insert(k, v);
                }
                Value::Object(m)
            }
            _ => {
                let levels = if self.src.chance(10) {
                    self.src.below(130)
                } else {
                    self.src.below(20)
                };
                let mut v = Value::String(self.short());
                for i in 0..levels {
                    v = if i % 2 == 0 {
                        Value::Array(vec![v])
                    } else {
                        json!({ "k": v })
                    };
                }
                v
            }
        }
    }

    fn call_args(&mut self, tool: &str) -> Value {
        match self.src.below(6) {
            0 => Value::Null,
            1 => self.value(3),
            2 if self.escapes && self.src.chance(30) => Value::String(DEEP_MARKER.to_string()),
            _ => {
                let mut m = Map::new();
                let key = match tool {
                    "read_file" | "grep" => "path",
                    "sql_query" => "sql",
                    "search" => "query",
                    "http_get" => "url",
                    _ => "input",
                };
                m.insert(key.into(), Value::String(self.text(4)));
                if self.src.chance(30) {
                    let k = self.short();
                    let v = self.value(2);
                    m.insert(k, v);
                }
                Value::Object(m)
            }
        }
    }

    /// Tool output shaped like the tool's: numbered file lines, query rows,
    /// search results, logs; or anything.
    fn output(&mut self, tool: &str) -> Out {
        if self.src.chance(20) {
            return if self.src.chance(50) {
                Out::Json(self.value(4))
            } else {
                Out::Text(self.text(20))
            };
        }
        match tool {
            "read_file" | "grep" => {
                let lines = self.src.below(400);
                let mut s = String::new();
                for i in 0..lines {
                    if self.room == 0 {
                        break;
                    }
                    let line = self.text(5);
                    s.push_str(&format!("{:>6}→{line}\n", i + 1));
                }
                Out::Text(s)
            }
            "sql_query" => {
                let rows = self.src.below(300);
                let cols: Vec<String> = (0..1 + self.src.below(4)).map(|_| self.short()).collect();
                let mut out = Vec::new();
                for _ in 0..rows {
                    if self.room == 0 {
                        break;
                    }
                    let mut m = Map::new();
                    for c in &cols {
                        let v = self.value(1);
                        m.insert(c.clone(), v);
                    }
                    out.push(Value::Object(m));
                }
                if self.src.chance(50) {
                    Out::Json(Value::Array(out))
                } else {
                    let mut s = format!("│ {} │\n", cols.join(" │ "));
                    for r in &out {
                        s.push_str(&format!("│ {r} │\n"));
                    }
                    s.push_str(&format!("({} rows)", out.len()));
                    Out::Text(s)
                }
            }
            "search" => {
                let n = self.src.below(30);
                let results: Vec<Value> = (0..n)
                    .map(|_| {
                        json!({
                            "title": self.text(3),
                            "url": format!("https://example.com/{}", self.short()),
                            "snippet": self.text(8),
                        })
                    })
                    .collect();
                Out::Json(json!({ "results": results, "total": n }))
            }
            "http_get" | "get_order" => {
                let status = self.src.pick(&[200, 201, 404, 500, 503]);
                let mut m = Map::new();
                m.insert("status".into(), json!(status));
                m.insert(self.short(), Value::String(self.text(3)));
                if status >= 400 {
                    m.insert("error".into(), Value::String(self.text(4)));
                }
                Out::Json(Value::Object(m))
            }
            _ => {
                let lines = self.src.below(120);
                let mut s = String::new();
                for _ in 0..lines {
                    if self.room == 0 {
                        break;
                    }
                    s.push_str(&self.text(6));
                    s.push('\n');
                }
                Out::Text(s)
            }
        }
    }
}

/// A valid Unicode scalar for `n` (surrogates and the markers become
/// U+FFFD).
fn scalar(n: u32) -> char {
    match char::from_u32(n) {
        Some(c) if !(0x10_FFF0..=0x10_FFF5).contains(&n) => c,
        _ => '\u{fffd}',
    }
}

/// A tool's output.
#[derive(Debug, Clone)]
pub enum Out {
    /// Text.
    Text(String),
    /// JSON (text in the formats whose tool output is text).
    Json(Value),
}

/// A tool call.
#[derive(Debug, Clone)]
pub struct Call {
    /// Its id.
    pub id: String,
    /// The tool.
    pub name: String,
    /// Its arguments.
    pub args: Value,
}

/// A part of a message.
#[derive(Debug, Clone)]
pub enum Part {
    /// Text.
    Text(String),
    /// An image URL (or data URL).
    Image(String),
    /// Anthropic thinking and its signature.
    Thinking(String, String),
    /// Anthropic redacted thinking.
    Redacted(String),
    /// A Responses reasoning item: id, summary, encrypted content.
    Reasoning(String, Vec<String>, Option<String>),
    /// A type of the provider's own vocabulary (web search, documents,
    /// MCP, computer and custom calls with their outputs, a block with
    /// `cache_control`, a type from the future), written in the format's
    /// own form: which one, a number unique in the conversation, its text.
    Carried(u8, u32, String),
}

/// One entry of a conversation.
#[derive(Debug, Clone)]
pub enum Item {
    /// A system message (mid-thread too).
    System(String),
    /// A developer message.
    Developer(String),
    /// What the user said.
    User(Vec<Part>),
    /// What the model said and called.
    Assistant(Vec<Part>, Vec<Call>),
    /// A tool result.
    Result {
        /// The call it answers.
        call_id: String,
        /// The tool.
        name: String,
        /// The output.
        out: Out,
        /// Whether the log says it failed.
        error: bool,
    },
}

/// A conversation in no format yet: [`Conversation::write`] puts it in one.
#[derive(Debug, Clone)]
pub struct Conversation {
    /// The thread id (canonical format; the others name the thread `fuzz`).
    pub id: String,
    /// The system prompt.
    pub system: Option<String>,
    /// Tool schemas: name, description, parameters.
    pub tools: Vec<(String, String, Value)>,
    /// The messages.
    pub items: Vec<Item>,
}

fn conversation(g: &mut Gen<'_>) -> Conversation {
    let id = match g.src.below(10) {
        0 if g.sloppy => g.short(),
        1 => format!("t{}", g.short()),
        _ => "fuzz".to_string(),
    };
    let system = g.src.chance(60).then(|| g.text(8));
    let tools = (0..g.src.below(4))
        .map(|_| {
            let name = g.src.pick(TOOLS).to_string();
            let params = if g.src.chance(50) {
                json!({"type": "object", "properties": {"path": {"type": "string"}}})
            } else {
                g.value(3)
            };
            (name, g.text(4), params)
        })
        .collect();
    let mut items = Vec::new();
    if g.src.chance(15) {
        items.push(Item::System(g.text(6)));
    }
    let mut calls_made = 0u32;
    // Now and then a long session: summaries roll up, windows drop.
    let turns = 1 + if g.src.chance(10) {
        g.src.below(60)
    } else {
        g.src.below(8)
    };
    for _ in 0..turns {
        items.push(Item::User(user_parts(g)));
        if g.src.chance(8) {
            items.push(Item::Developer(g.text(4)));
        }
        for _ in 0..g.src.below(4) {
            let calls: Vec<Call> = (0..g.src.below(4))
                .map(|_| {
                    calls_made += 1;
                    let id = match g.src.below(20) {
                        0 => "call_0".to_string(),
                        1 => format!("{}{calls_made}", g.short()),
                        2 if g.sloppy => String::new(),
                        _ => format!("call_{calls_made}"),
                    };
                    let name = match g.src.below(20) {
                        0 => format!("t{}", g.short()),
                        1 if g.sloppy => String::new(),
                        _ => g.src.pick(TOOLS).to_string(),
                    };
                    let args = g.call_args(&name);
                    Call { id, name, args }
                })
                .collect();
            let mut results: Vec<Item> = Vec::new();
            for c in &calls {
                // Now and then a call is left pending.
                if g.src.chance(6) {
                    continue;
                }
                results.push(Item::Result {
                    call_id: c.id.clone(),
                    name: c.name.clone(),
                    out: g.output(&c.name),
                    error: g.src.chance(10),
                });
            }
            if results.len() > 1 && g.src.chance(15) {
                results.swap(0, 1);
            }
            items.push(Item::Assistant(assistant_parts(g), calls));
            if g.src.chance(5) {
                items.push(Item::User(vec![Part::Text(g.text(3))]));
            }
            items.extend(results);
        }
        if g.src.chance(80) {
            items.push(Item::Assistant(vec![Part::Text(g.text(10))], Vec::new()));
        }
    }
    Conversation {
        id,
        system,
        tools,
        items,
    }
}

/// A carried part now and then, numbered from `n`.
fn carried(g: &mut Gen<'_>, parts: &mut Vec<Part>) {
    if g.src.chance(12) {
        let n = u32::from(g.src.byte()) << 8 | u32::from(g.src.byte());
        parts.push(Part::Carried(g.src.byte(), n, g.text(6)));
    }
}

fn user_parts(g: &mut Gen<'_>) -> Vec<Part> {
    let mut parts = vec![Part::Text(g.text(12))];
    carried(g, &mut parts);
    if g.src.chance(10) {
        let url = if g.src.chance(50) {
            g.src.pick(PIECES).to_string()
        } else {
            format!("https://img.example/{}.png", g.short())
        };
        parts.push(Part::Image(url));
    }
    if g.src.chance(10) {
        parts.push(Part::Text(g.text(3)));
    }
    parts
}

fn assistant_parts(g: &mut Gen<'_>) -> Vec<Part> {
    let mut parts = Vec::new();
    match g.src.below(10) {
        0 => parts.push(Part::Thinking(g.text(6), g.short())),
        1 => parts.push(Part::Redacted(g.short())),
        2 => parts.push(Part::Reasoning(
            format!("rs_{}", g.short()),
            (0..g.src.below(3)).map(|_| g.text(4)).collect(),
            g.src.chance(50).then(|| g.short()),
        )),
        _ => {}
    }
    carried(g, &mut parts);
    if g.src.chance(60) {
        parts.push(Part::Text(g.text(6)));
    }
    parts
}

impl Conversation {
    /// The conversation as a thread file in import format `format` (0:
    /// canonical, 1: OpenAI Chat, 2: Anthropic Messages, 3: OpenAI
    /// Responses), the formats' own choices (plain or parts content, a body
    /// or a bare array, explicit turns, metadata) read from `style`.
    pub fn write(&self, format: usize, style: &[u8]) -> Value {
        let mut g = Gen {
            src: Source::new(style),
            escapes: false,
            room: 4_000,
            sloppy: false,
        };
        self.write_with(format, &mut g)
    }

    fn write_with(&self, format: usize, g: &mut Gen<'_>) -> Value {
        match format % 4 {
            0 => self.canonical(g),
            1 => self.openai(g),
            2 => self.anthropic(g),
            _ => self.responses(g),
        }
    }

    fn canonical(&self, g: &mut Gen<'_>) -> Value {
        let mut messages = Vec::new();
        let explicit_turns = g.src.chance(20);
        let mut turn: u32 = match g.src.below(4) {
            0 => u32::MAX - 3,
            1 => g.src.below(1 << 20) as u32,
            _ => 0,
        };
        for (i, item) in self.items.iter().enumerate() {
            let mut m = Map::new();
            let id = match g.src.below(50) {
                0 => format!("{}{i}", g.short()),
                1 if g.sloppy => "m0".to_string(),
                2 if g.sloppy => g.short(),
                _ => format!("m{i}"),
            };
            m.insert("id".into(), json!(id));
            let (role, content) = match item {
                Item::System(t) => ("system", json!(t)),
                Item::Developer(t) => ("developer", json!(t)),
                Item::User(parts) => {
                    turn = turn.saturating_add(u32::from(g.src.below(3) > 0));
                    ("user", canonical_content(parts))
                }
                Item::Assistant(parts, calls) => {
                    if !calls.is_empty() {
                        m.insert(
                            "tool_calls".into(),
                            Value::Array(
                                calls
                                    .iter()
                                    .map(|c| json!({"id": c.id, "name": c.name, "arguments": c.args}))
                                    .collect(),
                            ),
                        );
                    }
                    ("assistant", canonical_content(parts))
                }
                Item::Result {
                    call_id,
                    name,
                    out,
                    error,
                } => {
                    let mut env = Map::new();
                    env.insert("tool_name".into(), json!(name));
                    env.insert("tool_call_id".into(), json!(call_id));
                    env.insert(
                        "content".into(),
                        match out {
                            Out::Text(t) => json!(t),
                            Out::Json(v) => v.clone(),
                        },
                    );
                    if *error || g.src.chance(20) {
                        let o = g.src.pick(&["success", "failure", "partial"]);
                        env.insert("outcome".into(), json!(if *error { "failure" } else { o }));
                    }
                    if g.src.chance(20) {
                        let mut kf = Map::new();
                        for _ in 0..1 + g.src.below(3) {
                            let k = g.short();
                            let v = g.value(2);
                            kf.insert(k, v);
                        }
                        env.insert("key_fields".into(), Value::Object(kf));
                    }
                    if g.src.chance(30) {
                        let d =
                            g.src
                                .pick(&["ephemeral", "anchoring", "replayable", "non_replayable"]);
                        env.insert("durability".into(), json!(d));
                    }
                    if g.src.chance(10) {
                        env.insert(
                            "determinism".into(),
                            json!({"content_hash": g.short(), "mtime": 1.5}),
                        );
                    }
                    m.insert("tool_result".into(), Value::Object(env));
                    ("tool", Value::Null)
                }
            };
            m.insert("role".into(), json!(role));
            if !content.is_null() {
                m.insert("content".into(), content);
            }
            if explicit_turns {
                if g.sloppy && g.src.chance(10) {
                    turn = turn.saturating_sub(2);
                }
                m.insert("turn".into(), json!(turn));
            }
            if g.src.chance(6) {
                let mut meta = Map::new();
                meta.insert("protected".into(), json!(g.src.chance(70)));
                if g.src.chance(30) {
                    meta.insert("label".into(), json!(g.short()));
                }
                if g.src.chance(30) {
                    let s = g
                        .src
                        .pick(&["public", "internal", "confidential", "restricted"]);
                    meta.insert("sensitivity".into(), json!(s));
                }
                if g.src.chance(30) {
                    meta.insert("source".into(), json!(g.short()));
                }
                m.insert("metadata".into(), Value::Object(meta));
            }
            messages.push(Value::Object(m));
        }
        let mut doc = Map::new();
        doc.insert("id".into(), json!(self.id));
        if let Some(s) = &self.system {
            doc.insert("system".into(), json!(s));
        }
        if !self.tools.is_empty() {
            let tools = self
                .tools
                .iter()
                .map(|(n, d, p)| json!({"name": n, "description": d, "parameters": p}))
                .collect();
            doc.insert("tools".into(), Value::Array(tools));
        }
        doc.insert("messages".into(), Value::Array(messages));
        Value::Object(doc)
    }

    fn openai(&self, g: &mut Gen<'_>) -> Value {
        let mut messages = Vec::new();
        if let Some(s) = &self.system {
            messages.push(json!({"role": "system", "content": s}));
        }
        for item in &self.items {
            messages.push(match item {
                Item::System(t) => json!({"role": "system", "content": t}),
                Item::Developer(t) => json!({"role": "developer", "content": t}),
                Item::User(parts) => {
                    let content = if parts.len() == 1 && g.src.chance(70) {
                        json!(plain(parts))
                    } else {
                        Value::Array(
                            parts
                                .iter()
                                .filter_map(|p| match p {
                                    Part::Text(t) => Some(json!({"type": "text", "text": t})),
                                    Part::Image(u) => {
                                        Some(json!({"type": "image_url", "image_url": {"url": u}}))
                                    }
                                    Part::Carried(k, n, t) => Some(chat_part(*k, *n, t)),
                                    _ => None,
                                })
                                .collect(),
                        )
                    };
                    json!({"role": "user", "content": content})
                }
                Item::Assistant(parts, calls) => {
                    let text = plain(parts);
                    let mut m = json!({
                        "role": "assistant",
                        "content": if text.is_empty() && !calls.is_empty() { Value::Null } else { json!(text) },
                    });
                    if calls.is_empty() {
                        if let Some(Part::Carried(_, _, t)) =
                            parts.iter().find(|p| matches!(p, Part::Carried(..)))
                        {
                            // A refusal: the message is carried whole.
                            m["refusal"] = json!(t);
                        }
                    }
                    if !calls.is_empty() {
                        m["tool_calls"] = Value::Array(
                            calls
                                .iter()
                                .map(|c| {
                                    let args = match &c.args {
                                        Value::String(s) if g.src.chance(50) => s.clone(),
                                        v => v.to_string(),
                                    };
                                    json!({"id": c.id, "type": "function",
                                           "function": {"name": c.name, "arguments": args}})
                                })
                                .collect(),
                        );
                    }
                    m
                }
                Item::Result {
                    call_id,
                    out,
                    error,
                    ..
                } => {
                    let mut m = json!({"role": "tool", "tool_call_id": call_id, "content": out.text()});
                    if *error {
                        m["is_error"] = json!(true);
                    }
                    m
                }
            });
        }
        if g.src.chance(50) {
            return Value::Array(messages);
        }
        let mut body = json!({"model": "gpt-4o", "messages": messages});
        if !self.tools.is_empty() {
            body["tools"] = Value::Array(
                self.tools
                    .iter()
                    .map(|(n, d, p)| {
                        json!({"type": "function",
                               "function": {"name": n, "description": d, "parameters": p}})
                    })
                    .collect(),
            );
        }
        body
    }

    fn anthropic(&self, g: &mut Gen<'_>) -> Value {
        let mut messages: Vec<Value> = Vec::new();
        // Consecutive tool results share one user message.
        let mut results: Vec<Value> = Vec::new();
        let flush = |messages: &mut Vec<Value>, results: &mut Vec<Value>| {
            if !results.is_empty() {
                messages.push(json!({"role": "user", "content": std::mem::take(results)}));
            }
        };
        for item in &self.items {
            match item {
                Item::Result {
                    call_id,
                    out,
                    error,
                    ..
                } => {
                    let content = if g.src.chance(70) {
                        json!(out.text())
                    } else {
                        json!([{"type": "text", "text": out.text()}])
                    };
                    results.push(json!({"type": "tool_result", "tool_use_id": call_id,
                                        "content": content, "is_error": error}));
                    continue;
                }
                _ => flush(&mut messages, &mut results),
            }
            messages.push(match item {
                Item::System(t) | Item::Developer(t) => json!({"role": "user", "content": t}),
                Item::User(parts) => {
                    let blocks: Vec<Value> = parts
                        .iter()
                        .flat_map(|p| anthropic_blocks(p, false))
                        .collect();
                    json!({"role": "user", "content": blocks})
                }
                Item::Assistant(parts, calls) => {
                    let mut blocks: Vec<Value> = parts
                        .iter()
                        .flat_map(|p| anthropic_blocks(p, true))
                        .collect();
                    for c in calls {
                        blocks.push(json!({"type": "tool_use", "id": c.id, "name": c.name,
                                           "input": c.args}));
                    }
                    json!({"role": "assistant", "content": blocks})
                }
                Item::Result { .. } => continue,
            });
        }
        flush(&mut messages, &mut results);
        let mut body =
            json!({"model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": messages});
        if let Some(s) = &self.system {
            body["system"] = if g.src.chance(50) {
                json!(s)
            } else {
                json!([{"type": "text", "text": s}])
            };
        }
        if !self.tools.is_empty() {
            body["tools"] = Value::Array(
                self.tools
                    .iter()
                    .map(|(n, d, p)| json!({"name": n, "description": d, "input_schema": p}))
                    .collect(),
            );
        }
        body
    }

    fn responses(&self, g: &mut Gen<'_>) -> Value {
        let mut input = Vec::new();
        for item in &self.items {
            match item {
                Item::System(t) | Item::Developer(t) => input.push(json!({
                    "type": "message", "role": if matches!(item, Item::System(_)) { "system" } else { "developer" },
                    "content": [{"type": "input_text", "text": t}]})),
                Item::User(parts) => {
                    if g.src.chance(30) {
                        input.push(json!({"role": "user", "content": plain(parts)}));
                    } else {
                        let content: Vec<Value> = parts
                            .iter()
                            .filter_map(|p| match p {
                                Part::Text(t) => Some(json!({"type": "input_text", "text": t})),
                                Part::Image(u) => {
                                    Some(json!({"type": "input_image", "image_url": u}))
                                }
                                Part::Carried(_, n, t) => Some(json!({"type": "input_file",
                                    "filename": format!("f{n}.txt"), "file_data": t})),
                                _ => None,
                            })
                            .collect();
                        input.push(json!({"type": "message", "role": "user", "content": content}));
                    }
                }
                Item::Assistant(parts, calls) => {
                    for p in parts {
                        match p {
                            Part::Reasoning(id, summary, enc) => {
                                let summary: Vec<Value> = summary
                                    .iter()
                                    .map(|s| json!({"type": "summary_text", "text": s}))
                                    .collect();
                                let mut r = json!({"type": "reasoning", "id": id, "summary": summary});
                                if let Some(e) = enc {
                                    r["encrypted_content"] = json!(e);
                                }
                                input.push(r);
                            }
                            Part::Text(t) => input.push(json!({"type": "message", "role": "assistant",
                                "content": [{"type": "output_text", "text": t}]})),
                            Part::Carried(k, n, t) => input.extend(responses_items(*k, *n, t)),
                            _ => {}
                        }
                    }
                    for c in calls {
                        input.push(json!({"type": "function_call", "call_id": c.id,
                                          "name": c.name, "arguments": c.args.to_string()}));
                    }
                }
                Item::Result { call_id, out, .. } => input.push(json!({
                    "type": "function_call_output", "call_id": call_id, "output": out.text()})),
            }
        }
        let mut body = json!({"model": "gpt-4o", "input": input});
        if let Some(s) = &self.system {
            body["instructions"] = json!(s);
        }
        if !self.tools.is_empty() {
            body["tools"] = Value::Array(
                self.tools
                    .iter()
                    .map(|(n, d, p)| {
                        json!({"type": "function", "name": n, "description": d,
                                            "parameters": p})
                    })
                    .collect(),
            );
        }
        body
    }
}

impl Out {
    fn text(&self) -> String {
        match self {
            Out::Text(t) => t.clone(),
            Out::Json(v) => v.to_string(),
        }
    }
}

/// The text parts joined (what a text-only field gets).
fn plain(parts: &[Part]) -> String {
    parts
        .iter()
        .filter_map(|p| match p {
            Part::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn canonical_content(parts: &[Part]) -> Value {
    if let [Part::Text(t)] = parts {
        return json!(t);
    }
    Value::Array(
        parts
            .iter()
            .map(|p| match p {
                Part::Text(t) => json!({"type": "text", "text": t}),
                Part::Image(u) => json!({"type": "image", "url": u}),
                Part::Thinking(t, s) => json!({"type": "thinking", "thinking": t, "signature": s}),
                Part::Redacted(d) => json!({"type": "redacted_thinking", "data": d}),
                Part::Reasoning(id, summary, enc) => {
                    json!({"type": "reasoning", "id": id, "summary": summary, "encrypted_content": enc})
                }
                Part::Carried(k, n, t) => json!({"type": "provider", "dialect": "openai_responses",
                    "kind": "web_search_call",
                    "json": {"type": "web_search_call", "id": format!("ws_{k}_{n}"), "status": "completed",
                             "action": {"type": "search", "query": t}}}),
            })
            .collect(),
    )
}

/// A Chat user part of the provider's own vocabulary.
fn chat_part(k: u8, n: u32, t: &str) -> Value {
    match k % 3 {
        0 => {
            json!({"type": "input_audio", "input_audio": {"data": "UklGRiQAAABXQVZF", "format": "wav"}})
        }
        1 => json!({"type": "file", "file": {"filename": format!("f{n}.txt"), "file_data": t}}),
        _ => json!({"type": "future_part", "note": t}),
    }
}

/// Anthropic blocks of its own vocabulary: user-side documents, search
/// results, a `cache_control` text, an upload; assistant-side server tool
/// and MCP uses with their results in the same message; a future type.
fn anthropic_carried(k: u8, n: u32, t: &str, assistant: bool) -> Vec<Value> {
    let id = format!("srvtoolu_{k}_{n}");
    if assistant {
        return match k % 3 {
            0 => vec![
                json!({"type": "server_tool_use", "id": id, "name": "web_search", "input": {"query": t}}),
                json!({"type": "web_search_tool_result", "tool_use_id": id, "content": [
                    {"type": "web_search_result", "url": "https://e.example/a", "title": t,
                     "encrypted_content": "RW5jcnlwdGVk"}]}),
            ],
            1 => vec![
                json!({"type": "mcp_tool_use", "id": id, "name": "lookup", "server_name": "ops", "input": {"q": t}}),
                json!({"type": "mcp_tool_result", "tool_use_id": id, "content": t, "is_error": false}),
            ],
            _ => vec![json!({"type": "future_block", "text": t})],
        };
    }
    vec![match k % 4 {
        0 => json!({"type": "document", "title": format!("doc {n}"),
                    "source": {"type": "text", "media_type": "text/plain", "data": t}}),
        1 => {
            json!({"type": "search_result", "source": "https://e.example/s", "title": format!("r{n}"),
                    "content": [{"type": "text", "text": t}]})
        }
        2 => json!({"type": "text", "text": t, "cache_control": {"type": "ephemeral"}}),
        _ => json!({"type": "container_upload", "file_id": format!("file_{n}")}),
    }]
}

/// Responses items of its own vocabulary, pairs together.
fn responses_items(k: u8, n: u32, t: &str) -> Vec<Value> {
    let call_id = format!("carried_{k}_{n}");
    match k % 5 {
        0 => vec![
            json!({"type": "web_search_call", "id": format!("ws_{n}"), "status": "completed",
                         "action": {"type": "search", "query": t}}),
        ],
        1 => vec![
            json!({"type": "computer_call", "id": format!("cu_{n}"), "call_id": call_id, "status": "completed",
                   "pending_safety_checks": [], "action": {"type": "screenshot"}}),
            json!({"type": "computer_call_output", "call_id": call_id,
                   "output": {"type": "computer_screenshot", "image_url": "https://e.example/s.png"}}),
        ],
        2 => vec![
            json!({"type": "custom_tool_call", "call_id": call_id, "name": "apply", "input": t}),
            json!({"type": "custom_tool_call_output", "call_id": call_id, "output": t}),
        ],
        3 => vec![
            json!({"type": "mcp_call", "id": format!("mcp_{n}"), "server_label": "ops",
                         "name": "lookup", "arguments": "{}", "output": t, "status": "completed"}),
        ],
        _ => vec![json!({"type": "future_item", "id": format!("fi_{n}"), "note": t})],
    }
}

fn anthropic_blocks(p: &Part, assistant: bool) -> Vec<Value> {
    match p {
        Part::Carried(k, n, t) => anthropic_carried(*k, *n, t, assistant),
        other => anthropic_block(other).into_iter().collect(),
    }
}

fn anthropic_block(p: &Part) -> Option<Value> {
    Some(match p {
        Part::Text(t) => json!({"type": "text", "text": t}),
        Part::Image(u) if u.starts_with("data:") => {
            let (media, data) = u
                .trim_start_matches("data:")
                .split_once(";base64,")
                .unwrap_or(("image/png", ""));
            json!({"type": "image", "source": {"type": "base64", "media_type": media, "data": data}})
        }
        Part::Image(u) => json!({"type": "image", "source": {"type": "url", "url": u}}),
        Part::Thinking(t, s) => json!({"type": "thinking", "thinking": t, "signature": s}),
        Part::Redacted(d) => json!({"type": "redacted_thinking", "data": d}),
        Part::Reasoning(..) | Part::Carried(..) => return None,
    })
}

/// Request knobs alone from `bytes` (for a mutated thread file).
pub fn knobs_from(bytes: &[u8]) -> Knobs {
    let mut g = Gen {
        src: Source::new(bytes),
        escapes: false,
        room: 4_000,
        sloppy: false,
    };
    g.escapes = g.src.chance(15);
    knobs(&mut g)
}

/// The request around the thread: budget, model, output cap, policy
/// overrides, JSON text sent over the wire, a second turn, an Explain text.
fn knobs(g: &mut Gen<'_>) -> Knobs {
    let mut k = Knobs {
        budget_per_mille: 0,
        max_input_tokens: 0,
        model: String::new(),
        max_output_tokens: None,
        omit_pending_calls: g.src.chance(40),
        auto_rehydrate: g.src.pick(&[None, Some(true), Some(false)]),
        read_artifact_tool: g.src.chance(20),
        policy: Map::new(),
        wire_json: Vec::new(),
        next_turn: None,
        explain: String::new(),
    };
    if g.src.chance(70) {
        k.budget_per_mille = g.src.pick(&[60, 150, 300, 500, 900, 2000]);
    } else {
        k.max_input_tokens = g.src.pick(&[
            0,
            1,
            64,
            300,
            1_000,
            4_000,
            16_000,
            128_000,
            u32::MAX / 2,
            u32::MAX,
        ]);
    }
    if g.src.chance(30) {
        k.model = match g.src.below(4) {
            0 => "claude-sonnet-4-5".into(),
            1 => "gpt-4".into(),
            2 => "o3".into(),
            _ => g.short(),
        };
    }
    if g.src.chance(30) {
        k.max_output_tokens = Some(g.src.pick(&[0, 1, 1024, u32::MAX]));
    }
    if g.src.chance(35) {
        let ints = [
            "safety_buffer_tokens",
            "response_reserve_tokens",
            "rehydration_reserve_tokens",
            "injection_reserve_tokens",
            "keep_recent_turns",
            "keep_tool_io_pairs",
            "externalize_threshold_tokens",
            "summary_chunk_tokens",
            "summary_max_tokens",
            "max_summaries",
            "tool_result_max_chars",
            "keep_recent_tokens",
        ];
        let bools = [
            "enable_retention",
            "enable_compress",
            "enable_clear",
            "enable_externalize",
            "enable_summarize",
            "enable_drop",
            "delimit_user_content",
            "enable_archive",
        ];
        for _ in 0..1 + g.src.below(5) {
            match g.src.below(5) {
                0 => {
                    // Mostly a valid pair; now and then one out of range.
                    let ratios: [f64; 6] = [1e-9, 0.1, 0.5, 0.7, 0.9, 1.0];
                    let (a, b) = (g.src.pick(&ratios), g.src.pick(&ratios));
                    k.policy.insert("trigger_ratio".into(), json!(a.max(b)));
                    k.policy.insert("target_ratio".into(), json!(a.min(b)));
                    if g.src.chance(10) {
                        let name = g.src.pick(&["trigger_ratio", "target_ratio"]);
                        let v = g.src.pick(&[0.0, 1.5, -1.0]);
                        k.policy.insert(name.into(), json!(v));
                    }
                }
                1 | 2 => {
                    let name = g.src.pick(&ints);
                    let v = g
                        .src
                        .pick(&[0, 1, 2, 3, 8, 64, 1_000, 50_000, u32::MAX / 2, u32::MAX]);
                    k.policy.insert(name.into(), json!(v));
                }
                3 => {
                    let name = g.src.pick(&bools);
                    k.policy.insert(name.into(), json!(g.src.chance(50)));
                }
                _ => {
                    let tool = g.src.pick(TOOLS);
                    let r = json!({
                        "keep_turns": g.src.pick(&[0, 1, 3, u32::MAX]),
                        "keep_last": g.src.pick(&[0, 1, 2, u32::MAX]),
                        "never_evict": g.src.chance(20),
                    });
                    let d = g.src.below(5);
                    k.policy.insert(format!("retention.{tool}"), r);
                    k.policy.insert(format!("durability.{tool}"), json!(d));
                }
            }
        }
    }
    if g.src.chance(25) {
        for _ in 0..1 + g.src.below(3) {
            k.wire_json.push(WireJson {
                field: g.src.below(4) as u8,
                index: g.src.below(16) as u16,
                text: g.src.below(TRICKY_JSON_COUNT) as u8,
            });
        }
    }
    if g.src.chance(30) {
        k.next_turn = Some(g.text(6));
    }
    k.explain = if g.src.chance(80) {
        format!("{} {}", g.src.pick(PIECES), g.short())
    } else {
        g.short()
    };
    k
}

/// Generated text for the mutator: up to `max_pieces` pieces, markers only
/// when `escapes`.
pub(super) fn text(src: &mut Source<'_>, max_pieces: usize, escapes: bool) -> String {
    let mut g = Gen {
        src: src.clone(),
        escapes,
        room: 20_000,
        sloppy: false,
    };
    let s = g.text(max_pieces);
    *src = g.src;
    s
}
