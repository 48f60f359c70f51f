//! The page: one self-contained HTML file (inline CSS and one inline
//! script, nothing fetched, no fonts) with the thread as a timeline of
//! spans coloured by fate, token bars before and after, what stands in for
//! each span, the recall block, the budget and the warnings.
//!
//! Every span is an element with `data-span="first..last"` and
//! `data-fate`, every message one with `data-message-id`. Everything that
//! comes from the thread or the plan is escaped; a Content-Security-Policy
//! admits only the page's own script (by hash) and inline styles, so even
//! markup that slipped through could neither run nor load anything.

use std::fmt::Write as _;

use base64::Engine as _;
use sha2::{Digest, Sha256};

use super::view::{Fate, MessageView, SpanView};
use super::View;

/// Characters of one message shown at most (the rest is counted, not shown).
const MESSAGE_CHARS: usize = 20_000;
/// Characters of a message's one-line preview.
const PREVIEW_CHARS: usize = 120;

/// `s` safe as HTML text and as a quoted attribute value.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + s.len() / 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // NUL is not allowed in HTML text; the parser would replace it anyway.
            '\0' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// At most `max` characters of `s`, and how many were left out.
fn cut(s: &str, max: usize) -> (&str, usize) {
    match s.char_indices().nth(max) {
        Some((at, _)) => (&s[..at], s[at..].chars().count()),
        None => (s, 0),
    }
}

/// The first line of `s`, whitespace squashed, within [`PREVIEW_CHARS`].
fn preview(s: &str) -> String {
    let squashed: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    let (head, rest) = cut(&squashed, PREVIEW_CHARS);
    if rest > 0 {
        format!("{head}…")
    } else {
        head.to_string()
    }
}

/// A width in percent of `max`, at least a sliver for anything non-zero.
fn percent(n: u32, max: u32) -> String {
    if n == 0 || max == 0 {
        return "0".to_string();
    }
    let p = (f64::from(n) * 100.0 / f64::from(max)).clamp(0.5, 100.0);
    format!("{p:.1}")
}

const STYLE: &str = r#"
:root {
  --kept: #2e7d32; --kept-bg: #e8f5e9;
  --cleared: #b26a00; --cleared-bg: #fff8e1;
  --summarized: #1565c0; --summarized-bg: #e3f2fd;
  --externalized: #6a1b9a; --externalized-bg: #f3e5f5;
  --dropped: #c62828; --dropped-bg: #ffebee;
  --recalled: #00838f; --recalled-bg: #e0f7fa;
  --muted: #5f6368; --rule: #dadce0;
}
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1180px; padding: 20px 24px 48px;
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #202124; background: #fff; }
h1 { font-size: 20px; margin: 0 0 4px; }
h2 { font-size: 16px; margin: 24px 0 8px; }
.meta, .muted { color: var(--muted); }
code, pre, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12.5px; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; margin: 6px 0; padding: 8px 10px;
  background: #f8f9fa; border: 1px solid var(--rule); border-radius: 4px; max-height: 480px; overflow: auto; }
[hidden] { display: none !important; }
.legend { list-style: none; padding: 0; margin: 0; display: flex; flex-wrap: wrap; gap: 6px 14px; }
.legend label { cursor: pointer; }
.swatch { display: inline-block; width: 12px; height: 12px; border-radius: 2px; vertical-align: -1px;
  border: 2px solid var(--c); background: var(--bg); }
.tools { margin: 8px 0; }
button { font: inherit; padding: 2px 10px; border: 1px solid var(--rule); background: #fff; border-radius: 4px; cursor: pointer; }
.budget-line { margin: 4px 0; }
.scale { position: relative; height: 46px; margin: 10px 80px 22px 0; border-left: 1px solid var(--rule); }
.scale .fill { position: absolute; left: 0; height: 14px; border-radius: 0 3px 3px 0; }
.scale .fill.before { top: 4px; background: #bdc1c6; }
.scale .fill.after { top: 24px; background: var(--summarized); }
.scale .mark { position: absolute; top: 0; bottom: -16px; border-left: 2px dashed var(--muted); }
.scale .mark span { position: absolute; bottom: 0; left: 3px; font-size: 11px; color: var(--muted); white-space: nowrap; }
.scale .mark.max { border-left: 2px solid #202124; }
table.totals { border-collapse: collapse; }
table.totals td, table.totals th { padding: 2px 12px 2px 0; text-align: right; }
table.totals td:first-child, table.totals th:first-child { text-align: left; }
table.totals tr.total td { border-top: 1px solid var(--rule); font-weight: 600; }
ol.timeline { list-style: none; padding: 0; margin: 0; }
li.span { border-left: 6px solid var(--c); background: var(--bg);
  margin: 0 0 8px; padding: 8px 12px; border-radius: 0 6px 6px 0; }
.fate-kept { --c: var(--kept); --bg: var(--kept-bg); }
.fate-cleared { --c: var(--cleared); --bg: var(--cleared-bg); }
.fate-summarized { --c: var(--summarized); --bg: var(--summarized-bg); }
.fate-externalized { --c: var(--externalized); --bg: var(--externalized-bg); }
.fate-dropped { --c: var(--dropped); --bg: var(--dropped-bg); }
.fate-recalled { --c: var(--recalled); --bg: var(--recalled-bg); }
.span-head { display: flex; flex-wrap: wrap; gap: 4px 12px; align-items: baseline; }
.badge { color: #fff; background: var(--c); border-radius: 3px; padding: 0 6px; font-size: 12px; font-weight: 600; }
.range { font-weight: 600; }
.detail { color: var(--muted); overflow-wrap: anywhere; }
.bars { margin: 6px 0 2px; max-width: 640px; }
.bar-row { display: grid; grid-template-columns: 48px 1fr 64px; gap: 8px; align-items: center; font-size: 12px; color: var(--muted); }
.bar-track { height: 8px; background: rgba(0,0,0,.05); border-radius: 2px; }
.bar { display: block; height: 8px; border-radius: 2px; }
.bar.before { background: #9aa0a6; }
.bar.after { background: var(--c); }
.bar-row .n { text-align: right; font-variant-numeric: tabular-nums; }
details.stand-in > summary, li.message > details > summary { cursor: pointer; }
details.stand-in { margin: 4px 0; }
ol.messages { list-style: none; margin: 4px 0 0; padding: 0 0 0 8px; border-left: 1px dotted var(--c); }
li.message { margin: 2px 0; }
li.message .mid { font-weight: 600; }
li.message .preview { color: var(--muted); }
.warnings li { color: #8a4b00; }
"#;

const SCRIPT: &str = r#"
(function () {
  "use strict";
  var filters = document.querySelectorAll("input[data-filter]");
  function apply() {
    var off = {};
    filters.forEach(function (c) { if (!c.checked) { off[c.getAttribute("data-filter")] = true; } });
    document.querySelectorAll("li[data-span]").forEach(function (s) {
      s.hidden = off[s.getAttribute("data-fate")] === true;
    });
  }
  filters.forEach(function (c) { c.addEventListener("change", apply); });
  function setAll(open) {
    document.querySelectorAll("details").forEach(function (d) { d.open = open; });
  }
  document.getElementById("expand-all").addEventListener("click", function () { setAll(true); });
  document.getElementById("collapse-all").addEventListener("click", function () { setAll(false); });
  apply();
  document.body.setAttribute("data-ready", "true");
})();
"#;

/// The CSP source that admits exactly [`SCRIPT`].
fn script_hash() -> String {
    let digest = Sha256::digest(SCRIPT.as_bytes());
    format!(
        "'sha256-{}'",
        base64::engine::general_purpose::STANDARD.encode(digest)
    )
}

fn message(out: &mut String, m: &MessageView) {
    let (text, left_out) = cut(&m.text, MESSAGE_CHARS);
    let _ = write!(
        out,
        "<li class=\"message\" data-message-id=\"{id}\" data-role=\"{role}\" data-turn=\"{turn}\">\
         <details><summary><span class=\"mid mono\">{id}</span> · turn {turn} · {role} · \
         {before} → {after} tokens · <span class=\"preview\">{preview}</span></summary><pre>{text}",
        id = escape(&m.id),
        role = m.role,
        turn = m.turn,
        before = m.tokens_before,
        after = m.tokens_after,
        preview = escape(&preview(&m.text)),
        text = escape(text),
    );
    if left_out > 0 {
        let _ = write!(
            out,
            "\n<span class=\"muted\">[… {left_out} more characters not shown]</span>"
        );
    }
    out.push_str("</pre></details></li>\n");
}

/// What the request shows in place of the span's messages.
fn stand_in(span: &SpanView, messages: &[&MessageView]) -> Option<String> {
    if span.fate == Fate::Kept {
        return None;
    }
    let texts: Vec<String> = messages
        .iter()
        .filter_map(|m| {
            m.stand_in
                .as_ref()
                .map(|t| format!("[in place of {}]\n{t}", m.id))
        })
        .collect();
    Some(if texts.is_empty() {
        "(nothing: the request leaves this span out)".to_string()
    } else {
        texts.join("\n\n")
    })
}

fn span(out: &mut String, s: &SpanView, messages: &[&MessageView], scale: u32) {
    let _ = write!(
        out,
        "<li class=\"span fate-{fate}\" data-span=\"{key}\" data-fate=\"{fate}\" data-action=\"{action}\" \
         data-tokens-before=\"{before}\" data-tokens-after=\"{after}\">\n\
         <div class=\"span-head\"><span class=\"badge\">{fate}</span>\
         <span class=\"range mono\">{key}</span><span>{turns}</span><span>{n}</span>\
         <span>{roles}</span><span class=\"detail\">{detail}</span></div>\n",
        fate = s.fate.as_str(),
        key = escape(&s.key()),
        action = escape(
            serde_json::to_value(s.action)
                .ok()
                .as_ref()
                .and_then(|v| v.as_str())
                .unwrap_or("")
        ),
        before = s.tokens_before,
        after = s.tokens_after,
        turns = if s.first_turn == s.last_turn {
            format!("turn {}", s.first_turn)
        } else {
            format!("turns {}", s.turns())
        },
        n = match s.message_ids.len() {
            1 => "1 message".to_string(),
            n => format!("{n} messages"),
        },
        roles = escape(&s.roles.join(", ")),
        detail = escape(&s.detail),
    );
    let _ = writeln!(
        out,
        "<div class=\"bars\" title=\"{b} tokens before, {a} after\">\
         <div class=\"bar-row\"><span>before</span><span class=\"bar-track\"><span class=\"bar before\" style=\"width:{wb}%\"></span></span><span class=\"n\">{b}</span></div>\
         <div class=\"bar-row\"><span>after</span><span class=\"bar-track\"><span class=\"bar after\" style=\"width:{wa}%\"></span></span><span class=\"n\">{a}</span></div>\
         </div>",
        b = s.tokens_before,
        a = s.tokens_after,
        wb = percent(s.tokens_before, scale),
        wa = percent(s.tokens_after, scale),
    );
    if let Some(text) = stand_in(s, messages) {
        let _ = writeln!(
            out,
            "<details class=\"stand-in\"><summary>What the request shows instead ({} tokens)</summary><pre>{}</pre></details>",
            s.tokens_after,
            escape(&text)
        );
    }
    if s.recalled_passages > 0 {
        let _ = writeln!(
            out,
            "<div class=\"muted\">{} of this span's passages {} in the <a href=\"#recall\">recall block</a>.</div>",
            s.recalled_passages,
            if s.recalled_passages == 1 { "is" } else { "are" }
        );
    }
    out.push_str("<ol class=\"messages\">\n");
    for m in messages {
        message(out, m);
    }
    out.push_str("</ol>\n</li>\n");
}

fn budget(out: &mut String, view: &View) {
    let b = &view.budget;
    let scale = b.max_input_tokens.max(b.tokens_before).max(b.tokens_after);
    let _ = write!(
        out,
        "<section id=\"budget\"><h2>Budget</h2>\
         <p class=\"budget-line\" data-budget>max input <b>{max}</b> · hard limit {hard} · trigger {trigger} · target {target} · \
         tokens <b>{before}</b> before, <b>{after}</b> after ({state})</p>\n\
         <div class=\"scale\" role=\"img\" aria-label=\"{before} tokens before, {after} after, of {max}\">\
         <div class=\"fill before\" style=\"width:{wb}%\" title=\"before: {before}\"></div>\
         <div class=\"fill after\" style=\"width:{wa}%\" title=\"after: {after}\"></div>",
        max = b.max_input_tokens,
        hard = b.hard_limit,
        trigger = b.trigger,
        target = b.target,
        before = b.tokens_before,
        after = b.tokens_after,
        state = if b.triggered {
            "over the trigger: compacted"
        } else {
            "under the trigger"
        },
        wb = percent(b.tokens_before, scale),
        wa = percent(b.tokens_after, scale),
    );
    for (class, label, n) in [
        ("target", "target", b.target),
        ("trigger", "trigger", b.trigger),
        ("max", "max", b.max_input_tokens),
    ] {
        let _ = write!(
            out,
            "<div class=\"mark {class}\" style=\"left:{}%\"><span>{label} {n}</span></div>",
            percent(n, scale)
        );
    }
    out.push_str("</div>\n");
    let (sb, sa) = view.span_totals();
    let (tb, ta) = view.totals();
    let fixed = view.fixed.total();
    out.push_str("<table class=\"totals\"><tr><th></th><th>before</th><th>after</th></tr>\n");
    let _ = writeln!(
        out,
        "<tr><td>messages</td><td>{sb}</td><td>{sa}</td></tr>\n\
         <tr><td>system, tools, framing</td><td>{fixed}</td><td>{fixed}</td></tr>"
    );
    if view.per_turn.recall_tokens > 0 {
        let _ = writeln!(
            out,
            "<tr><td><a href=\"#recall\">recall block</a></td><td>0</td><td>{}</td></tr>",
            view.per_turn.recall_tokens
        );
    }
    if view.per_turn.rehydrated_tokens > 0 {
        let _ = writeln!(
            out,
            "<tr><td>read back this turn</td><td>0</td><td>{}</td></tr>",
            view.per_turn.rehydrated_tokens
        );
    }
    let _ = writeln!(
        out,
        "<tr class=\"total\"><td>total</td><td>{tb}</td><td>{ta}</td></tr></table></section>"
    );
}

/// The fates with their filters, and the warnings.
fn legend_and_warnings(out: &mut String, view: &View) {
    let count = |f: Fate| view.spans.spans.iter().filter(|s| s.fate == f).count();
    out.push_str("<section id=\"legend\"><h2>Fates</h2><ul class=\"legend\">\n");
    for f in Fate::ALL {
        let n = count(f);
        let _ = writeln!(
            out,
            "<li class=\"fate-{name}\" title=\"{meaning}\"><label><input type=\"checkbox\" data-filter=\"{name}\" checked> \
             <span class=\"swatch\"></span> {name} ({n} {noun})</label> <span class=\"muted\">{meaning}</span></li>",
            name = f.as_str(),
            meaning = escape(f.meaning()),
            noun = if n == 1 { "span" } else { "spans" },
        );
    }
    out.push_str(
        "</ul><div class=\"tools\"><button type=\"button\" id=\"expand-all\">expand all</button> \
         <button type=\"button\" id=\"collapse-all\">collapse all</button></div></section>\n",
    );

    out.push_str("<section id=\"warnings\" class=\"warnings\">");
    if view.warnings.is_empty() {
        out.push_str("<h2>Warnings</h2><p class=\"muted\">none</p>");
    } else {
        let _ = write!(out, "<h2>Warnings ({})</h2><ul>", view.warnings.len());
        for w in &view.warnings {
            let _ = write!(out, "<li>{}</li>", escape(w));
        }
        out.push_str("</ul>");
    }
    out.push_str("</section>\n");
}

/// What compactd remembers now (as the terminal shows it: plain lines,
/// escaped) and the recall block.
fn remembers_and_recall(out: &mut String, view: &View) {
    out.push_str("<section id=\"remembers\"><h2>What compactd remembers now</h2><pre>");
    let lines = super::memory::lines(&view.remembers, |s| s.to_string());
    for line in lines.iter().skip(1) {
        out.push_str(&escape(line));
        out.push('\n');
    }
    out.push_str("</pre></section>\n");

    out.push_str("<section id=\"recall\"><h2>Recall block</h2>");
    match &view.per_turn.recall_text {
        Some(text) => {
            let _ = write!(
                out,
                "<details><summary>{} passages, {} tokens, before the latest user message</summary><pre>{}</pre></details>",
                view.per_turn.recall_passages,
                view.per_turn.recall_tokens,
                escape(text)
            );
        }
        None => out.push_str("<p class=\"muted\">none in this request</p>"),
    }
    out.push_str("</section>\n");
}

/// The whole page.
pub fn page(view: &View) -> String {
    let mut out = String::with_capacity(64 * 1024);
    let title = format!("compactd inspect · {}", view.thread_id);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; \
         script-src {hash}; base-uri 'none'; form-action 'none'\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{title}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n\
         <header><h1>{title}</h1>\
         <div class=\"meta\">model {model} ({tokenizer}) · format {format} · plan v{version}, {source}</div>\
         <p>Which parts of the thread does the request keep, and what stands in for the rest?</p></header>\n",
        hash = script_hash(),
        title = escape(&title),
        model = escape(&view.model),
        tokenizer = escape(&view.tokenizer),
        format = escape(view.format),
        version = view.plan_version,
        source = escape(&view.plan_source),
    );
    budget(&mut out, view);

    legend_and_warnings(&mut out, view);

    let scale = view
        .spans
        .spans
        .iter()
        .map(|s| s.tokens_before.max(s.tokens_after))
        .max()
        .unwrap_or(0);
    let _ = writeln!(
        out,
        "<section id=\"thread\"><h2>Thread ({} spans, {} messages)</h2><ol class=\"timeline\">",
        view.spans.spans.len(),
        view.spans.messages.len()
    );
    let mut by_span: Vec<Vec<&MessageView>> = vec![Vec::new(); view.spans.spans.len()];
    for m in &view.spans.messages {
        if let Some(list) = by_span.get_mut(m.span) {
            list.push(m);
        }
    }
    for (s, messages) in view.spans.spans.iter().zip(&by_span) {
        span(&mut out, s, messages, scale);
    }
    out.push_str("</ol></section>\n");

    remembers_and_recall(&mut out, view);
    let _ = write!(out, "<script>{SCRIPT}</script>\n</body>\n</html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::super::table::tests::demo_view;
    use super::*;

    /// Every `data-<name>="…"` value in `html`, in order.
    fn attrs(html: &str, name: &str) -> Vec<String> {
        let key = format!("data-{name}=\"");
        html.match_indices(&key)
            .map(|(at, _)| {
                let rest = &html[at + key.len()..];
                rest[..rest.find('"').unwrap_or(0)].to_string()
            })
            .collect()
    }

    #[test]
    fn every_span_and_message_has_its_attributes() {
        let view = demo_view();
        let html = page(&view);
        let spans: Vec<String> = view.spans.spans.iter().map(|s| s.key()).collect();
        assert_eq!(attrs(&html, "span"), spans);
        let fates: Vec<&str> = view.spans.spans.iter().map(|s| s.fate.as_str()).collect();
        assert_eq!(attrs(&html, "fate"), fates);
        let ids: Vec<&str> = view.spans.messages.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(attrs(&html, "message-id"), ids);
        for f in Fate::ALL {
            assert!(html.contains(&format!("data-filter=\"{}\"", f.as_str())));
        }
        assert!(html.contains("What the request shows instead"));
        assert!(html.contains("[Context Summary - Turns 1-1]"));
        assert!(html.contains("(nothing: the request leaves this span out)"));
        assert!(html.contains("max input <b>600</b>"));
        assert!(html.contains("message m6 is in both Clear and Drop"));
    }

    #[test]
    fn message_text_is_escaped() {
        let html = page(&demo_view());
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(html.contains("and then &lt;/details&gt; broke it"));
        assert!(!html.contains("<script>alert"));
        // The page's own script is the only one, and the only closing tags
        // of details are the page's own.
        assert_eq!(html.matches("<script").count(), 1);
        assert_eq!(
            html.matches("<details").count(),
            html.matches("</details>").count()
        );
    }

    #[test]
    fn nothing_is_loaded_from_anywhere() {
        let html = page(&demo_view());
        for needle in ["http://", "https://", "src=", "<link", "@import", "url("] {
            assert!(!html.contains(needle), "{needle}");
        }
        assert!(html.contains("default-src 'none'"));
        assert!(html.contains(&script_hash()));
    }

    #[test]
    fn escape_and_cut() {
        assert_eq!(
            escape("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
        assert_eq!(cut("héllo", 2), ("hé", 3));
        assert_eq!(cut("hé", 5), ("hé", 0));
        assert_eq!(preview("  a\n\n b  "), "a b");
    }
}
