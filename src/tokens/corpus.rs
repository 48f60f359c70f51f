//! Deterministic text corpus for tokenizer tests and benchmarks: English prose,
//! code, JSON, non-Latin scripts and edge cases. Self-contained (no `crate::`
//! paths) so `benches/tokens.rs` can include this file with `#[path]`.
#![allow(dead_code)]

/// SplitMix64: tiny, seedable, good enough to vary generated text.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    pub fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

const WORDS: &[&str] = &[
    "the",
    "of",
    "and",
    "to",
    "in",
    "a",
    "is",
    "that",
    "for",
    "it",
    "as",
    "was",
    "with",
    "be",
    "by",
    "on",
    "not",
    "he",
    "this",
    "are",
    "or",
    "his",
    "from",
    "at",
    "which",
    "but",
    "have",
    "an",
    "had",
    "they",
    "you",
    "were",
    "their",
    "one",
    "all",
    "we",
    "can",
    "her",
    "has",
    "there",
    "been",
    "if",
    "more",
    "when",
    "will",
    "would",
    "who",
    "so",
    "no",
    "customer",
    "order",
    "deployment",
    "configuration",
    "service",
    "latency",
    "throughput",
    "request",
    "response",
    "database",
    "migration",
    "rollback",
    "incident",
    "investigation",
    "analysis",
    "summary",
    "conversation",
    "context",
    "window",
    "budget",
    "token",
    "compaction",
    "agent",
    "thread",
    "message",
    "assistant",
    "policy",
    "security",
    "encryption",
    "tenant",
    "artifact",
    "quarterly",
    "revenue",
    "forecast",
    "approximately",
    "nevertheless",
    "infrastructure",
    "observability",
    "reproducibility",
    "idempotent",
    "serialization",
    "deterministic",
    "hypothesis",
    "experiment",
    "measurement",
    "Kubernetes",
    "PostgreSQL",
    "OpenTelemetry",
    "Wednesday",
    "September",
    "Antarctica",
    "photosynthesis",
    "electroencephalography",
    "don't",
    "it's",
    "we're",
    "they've",
    "I'll",
    "you'd",
    "can't",
    "O'Brien",
    "re-run",
    "well-known",
    "state-of-the-art",
    "e.g.",
    "i.e.",
    "etc.",
    "vs.",
    "Dr.",
    "U.S.",
];

const PUNCT_END: &[&str] = &[".", ".", ".", "?", "!", ";", ":", "...", "."];

/// English-like prose with sentences, numbers, quotes and paragraphs.
pub fn prose(rng: &mut Rng, target_bytes: usize) -> String {
    let mut s = String::with_capacity(target_bytes + 256);
    while s.len() < target_bytes {
        let words = 5 + rng.below(20);
        for i in 0..words {
            let mut w = rng.pick(WORDS).to_string();
            if i == 0 {
                let mut c = w.chars();
                if let Some(f) = c.next() {
                    w = f.to_uppercase().collect::<String>() + c.as_str();
                }
            } else {
                s.push(' ');
            }
            match rng.below(40) {
                0 => s.push_str(&format!("{}", rng.below(10_000))),
                1 => s.push_str(&format!("\"{w}\"")),
                2 => s.push_str(&format!("({w})")),
                3 => s.push_str(&format!("{w},")),
                4 => s.push_str(&format!("{}.{}%", rng.below(100), rng.below(100))),
                5 => s.push_str(&format!("${},{:03}", rng.below(999), rng.below(1000))),
                _ => s.push_str(&w),
            }
        }
        s.push_str(rng.pick(PUNCT_END));
        s.push_str(if rng.below(6) == 0 { "\n\n" } else { " " });
    }
    s
}

const IDENTS: &[&str] = &[
    "count",
    "tokens",
    "ledger",
    "budget",
    "thread_id",
    "msgIndex",
    "getUserName",
    "HTTPServer",
    "max_entries",
    "self",
    "ctx",
    "request",
    "response",
    "err",
    "buf",
    "i",
    "j",
    "value",
    "parseConfig",
    "__init__",
    "_private",
    "CONSTANT_NAME",
    "x1",
    "y2",
    "DataFrame",
    "Vec",
];

const CODE_TEMPLATES: &[&str] = &[
    "fn {a}(&self, {b}: &str) -> Result<usize, Error> {\n    let {c} = self.{a}.get({b}).ok_or(Error::Missing)?;\n    Ok({c}.len() + {n})\n}\n\n",
    "def {a}({b}, {c}={n}):\n    \"\"\"Return the {a} of {b}.\"\"\"\n    if not {b}:\n        raise ValueError(f\"empty {b}: {{{c}!r}}\")\n    return [{c} * x for x in range({n})]\n\n",
    "    for (int {a} = 0; {a} < {n}; ++{a}) {\n        if ({b}[{a}] != {c}) {\n            return -1;\n        }\n    }\n",
    "const {a} = async ({b}) => {\n  const {c} = await fetch(`/api/v1/{a}/${{b}}`);\n  return {c}.json();\n};\n",
    "SELECT {a}, COUNT(*) AS {c} FROM {b} WHERE created_at > now() - interval '{n} days' GROUP BY {a} ORDER BY {c} DESC;\n",
    "#[derive(Debug, Clone, PartialEq)]\npub struct {a} {\n    pub {b}: u32,\n    pub {c}: Vec<String>,\n}\n\n",
    "\t\tif err != nil {\n\t\t\treturn fmt.Errorf(\"{a}: %w\", err)\n\t\t}\n",
    "diff --git a/src/{a}.rs b/src/{a}.rs\n@@ -{n},7 +{n},9 @@\n-    let {b} = {c}.clone();\n+    let {b} = &{c};\n",
    "  File \"/usr/lib/python3.12/{a}.py\", line {n}, in {b}\n    {c} = {a}({b})\n",
    "{a}:\n  image: registry.example.com/{b}:{n}.0.1\n  env:\n    - name: {c}\n      value: \"{n}\"\n",
];

/// Source code in several languages, with indentation, tabs and diffs.
pub fn code(rng: &mut Rng, target_bytes: usize) -> String {
    let mut s = String::with_capacity(target_bytes + 512);
    while s.len() < target_bytes {
        let t = rng.pick(CODE_TEMPLATES);
        let snippet = t
            .replace("{a}", rng.pick(IDENTS))
            .replace("{b}", rng.pick(IDENTS))
            .replace("{c}", rng.pick(IDENTS))
            .replace("{n}", &rng.below(5000).to_string());
        s.push_str(&snippet);
    }
    s
}

fn hex(rng: &mut Rng, n: usize) -> String {
    let mut s = String::with_capacity(n);
    while s.len() < n {
        s.push_str(&format!("{:016x}", rng.next_u64()));
    }
    s.truncate(n);
    s
}

fn uuid(rng: &mut Rng) -> String {
    let h = hex(rng, 32);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// JSON tool output: ids, hashes, floats, nested arrays; compact and pretty.
pub fn json(rng: &mut Rng, target_bytes: usize) -> String {
    let mut s = String::with_capacity(target_bytes + 512);
    while s.len() < target_bytes {
        let pretty = rng.below(2) == 0;
        let (nl, ind) = if pretty { ("\n", "  ") } else { ("", "") };
        let sep = if pretty { ": " } else { ":" };
        s.push('{');
        s.push_str(nl);
        let fields = 3 + rng.below(8);
        for f in 0..fields {
            s.push_str(ind);
            let key = rng.pick(IDENTS);
            let val = match rng.below(9) {
                0 => format!("\"{}\"", uuid(rng)),
                1 => format!("{}", rng.below(1_000_000)),
                2 => format!("{}.{:04}", rng.below(1000), rng.below(10_000)),
                3 => format!("\"sha256:{}\"", hex(rng, 64)),
                4 => {
                    let n = 1 + rng.below(12);
                    let items: Vec<String> = (0..n).map(|_| rng.below(100).to_string()).collect();
                    format!("[{}]", items.join(","))
                }
                5 => "null".to_string(),
                6 => if rng.below(2) == 0 { "true" } else { "false" }.to_string(),
                7 => format!(
                    "\"2025-{:02}-{:02}T{:02}:{:02}:{:02}Z\"",
                    1 + rng.below(12),
                    1 + rng.below(28),
                    rng.below(24),
                    rng.below(60),
                    rng.below(60)
                ),
                _ => format!(
                    "\"{} {} {}\"",
                    rng.pick(WORDS),
                    rng.pick(WORDS),
                    rng.pick(WORDS)
                ),
            };
            s.push_str(&format!("\"{key}\"{sep}{val}"));
            if f + 1 < fields {
                s.push(',');
            }
            s.push_str(nl);
        }
        s.push('}');
        s.push('\n');
    }
    s
}

const UNICODE_SENTENCES: &[&str] = &[
    "我们需要在下一次部署之前完成数据库迁移，并确认回滚方案可行。",
    "这个服务的延迟在高峰期明显增加，请检查缓存命中率和连接池配置。",
    "用户反馈说订单状态没有及时更新，可能是消息队列积压导致的。",
    "会议纪要：第三季度收入预测上调百分之五，主要来自企业客户。",
    "東京の天気は晴れですが、午後から雨が降るかもしれません。",
    "このリクエストはタイムアウトしました。再試行してください。",
    "데이터베이스 마이그레이션이 완료되었습니다. 로그를 확인하세요.",
    "서비스 지연 시간이 증가했습니다. 원인을 조사하고 있습니다.",
    "Пожалуйста, проверьте конфигурацию сервера перед развертыванием.",
    "Ошибка подключения к базе данных: превышено время ожидания.",
    "Ο διακομιστής επέστρεψε σφάλμα κατά την επεξεργασία του αιτήματος.",
    "مرحبا، هل يمكنك مساعدتي في تحليل هذه البيانات؟",
    "שלום, האם תוכל לבדוק את יומני השרת מאתמול?",
    "कृपया सर्वर लॉग की जाँच करें और त्रुटि का कारण बताएं।",
    "Crème brûlée, façade, naïve, Zürich, São Paulo, Øresund, Łódź.",
    "Deployment finished ✅ — latency ↓ 23% 🚀🎉 (p99 ≈ 120 ms) ★★★☆☆",
    "Family: 👨‍👩‍👧‍👦 flags: 🇯🇵🇺🇸 skin tones: 👍🏽👋🏿 math: ∑∫√∞≠≤≥",
    "Temperatur: 23 °C → 73 °F; Preis: 12,50 € / £10.99 / ¥1,200",
];

/// Non-Latin scripts (CJK, Korean, Cyrillic, Greek, Arabic, Hebrew,
/// Devanagari), accents and emoji, mixed with a little English.
pub fn unicode(rng: &mut Rng, target_bytes: usize) -> String {
    let mut s = String::with_capacity(target_bytes + 256);
    while s.len() < target_bytes {
        s.push_str(rng.pick(UNICODE_SENTENCES));
        s.push_str(match rng.below(5) {
            0 => "\n",
            1 => " ",
            _ => "",
        });
    }
    s
}

/// CJK only (Chinese and Japanese sentences), the densest realistic text.
pub fn cjk(rng: &mut Rng, target_bytes: usize) -> String {
    let mut s = String::with_capacity(target_bytes + 256);
    while s.len() < target_bytes {
        s.push_str(rng.pick(&UNICODE_SENTENCES[..6]));
    }
    s
}

const HOSTS: &[&str] = &[
    "github.com",
    "api.openai.com",
    "localhost:8080",
    "s3.us-east-1.amazonaws.com",
    "registry.npmjs.org",
    "pypi.org",
    "docs.rs",
    "internal.acme-corp.net",
];

const PATHS: &[&str] = &[
    "/usr/local/bin/python3",
    "src/tokens/ledger.rs",
    "node_modules/.bin/webpack",
    "/var/log/nginx/access.log",
    "C:\\Users\\dev\\AppData\\Local\\Temp",
    "~/.cargo/registry/src",
    "openai/tiktoken/blob/main/README.md",
    "/etc/kubernetes/manifests/kube-apiserver.yaml",
];

/// Terminal and log output an agent's tools return: URLs, paths, timestamps,
/// ANSI colors, stack frames, prompt-format markers.
pub fn ops(rng: &mut Rng, target_bytes: usize) -> String {
    let mut s = String::with_capacity(target_bytes + 256);
    while s.len() < target_bytes {
        let line = match rng.below(9) {
            0 => format!("https://{}/{}?page={}&sort=desc", rng.pick(HOSTS), rng.pick(PATHS), rng.below(50)),
            1 => format!("2025-03-{:02}T{:02}:{:02}:{:02}.{:03}Z INFO  [{}] request_id={} status={} latency_ms={}", 1 + rng.below(28), rng.below(24), rng.below(60), rng.below(60), rng.below(1000), rng.pick(IDENTS), uuid(rng), 200 + rng.below(300), rng.below(5000)),
            2 => format!("\x1b[1;31merror\x1b[0m: could not compile `{}` ({} previous errors)", rng.pick(IDENTS), rng.below(20)),
            3 => format!("\u{1b}[32m✓\u{1b}[0m {} ({} ms)", rng.pick(PATHS), rng.below(900)),
            4 => format!("-rw-r--r--  1 root root {:>8} Mar {:2} {:02}:{:02} {}", rng.below(10_000_000), 1 + rng.below(28), rng.below(24), rng.below(60), rng.pick(PATHS)),
            5 => format!("    at {}.{} ({}:{}:{})", rng.pick(IDENTS), rng.pick(IDENTS), rng.pick(PATHS), rng.below(900), rng.below(80)),
            6 => format!("<|im_start|>{}\n{} {}<|im_end|> <|endoftext|>", rng.pick(&["user", "assistant", "system"]), rng.pick(WORDS), rng.pick(WORDS)),
            7 => format!("$ git log --oneline -n 3\n{} {} {} {}", &hex(rng, 7), rng.pick(WORDS), rng.pick(WORDS), rng.pick(WORDS)),
            _ => format!("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.{}.{}", hex(rng, 40), hex(rng, 43)),
        };
        s.push_str(&line);
        s.push('\n');
    }
    s
}

/// A named corpus part.
pub struct Part {
    pub name: &'static str,
    pub text: String,
}

/// The benchmark corpus: about `bytes_per_part` of each kind.
pub fn parts(bytes_per_part: usize) -> Vec<Part> {
    let mut rng = Rng::new(0xC0FFEE);
    vec![
        Part {
            name: "prose",
            text: prose(&mut rng, bytes_per_part),
        },
        Part {
            name: "code",
            text: code(&mut rng, bytes_per_part),
        },
        Part {
            name: "json",
            text: json(&mut rng, bytes_per_part),
        },
        Part {
            name: "unicode",
            text: unicode(&mut rng, bytes_per_part),
        },
        Part {
            name: "ops",
            text: ops(&mut rng, bytes_per_part),
        },
    ]
}

/// Agent-thread-like messages: a mix of prose turns, code, JSON tool output and
/// some unicode, sizes skewed like a real thread (most short, a few large).
pub fn messages(n: usize, seed: u64) -> Vec<String> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|_| {
            let size = match rng.below(10) {
                0..=5 => 36 + rng.below(176),
                6..=8 => 176 + rng.below(528),
                _ => 660 + rng.below(1320),
            };
            match rng.below(12) {
                0..=3 => prose(&mut rng, size),
                4..=5 => code(&mut rng, size),
                6..=8 => json(&mut rng, size),
                9 => ops(&mut rng, size),
                _ => unicode(&mut rng, size),
            }
        })
        .collect()
}

/// Inputs that trip tokenizers: empty, whitespace runs, digit runs, emoji,
/// CJK, special-token look-alikes, control characters.
pub fn edge_cases() -> Vec<String> {
    let mut v: Vec<String> = [
        "",
        " ",
        "  ",
        "\n",
        "\n\n\n",
        "\r\n",
        "\t",
        "a",
        "hello world",
        "Hello, world!",
        "<|endoftext|>",
        "<|im_start|>user\nhi<|im_end|>",
        "<|fim_prefix|><|fim_middle|><|fim_suffix|><|endofprompt|>",
        "text <|endoftext|> more <|start|>assistant<|message|>",
        "🚀",
        "👨‍👩‍👧‍👦",
        "🇯🇵🇺🇸",
        "中文",
        "日本語のテキスト",
        "한국어",
        "\u{0}\u{1}\u{7f}",
        "\u{feff}BOM",
        "e\u{301}",
        "é",
        "ﬁ",
        "'s 're 've 'll 'd 'm 't",
        "DON'T I'LL We'Re",
        "   leading",
        "trailing   ",
        "a  b   c    d",
        "line\n  indented\n\tTabbed\n",
        "0",
        "1234",
        "3.14159265358979323846",
        "1,000,000",
        "x=1;y=22;z=333;w=4444",
        "don't",
        "https://example.com/path?q=1&r=two#frag",
        "a/b/c//d",
        "!!!???...",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.push(" ".repeat(1000));
    v.push("\n".repeat(300));
    v.push(" \n".repeat(200));
    v.push("\t".repeat(257));
    v.push("1234567890".repeat(100));
    v.push("9".repeat(1001));
    v.push("a".repeat(5000));
    v.push("ab".repeat(1500));
    v.push("🚀".repeat(200));
    v.push("中".repeat(500));
    v.push("<|endoftext|>".repeat(50));
    v.push(format!("{}x{}", " ".repeat(64), "\n".repeat(64)));
    v
}
