//! The terminal view: one row per span in thread order, then the totals,
//! the budget line and the warnings. Plain text in aligned columns; the
//! fate column is coloured only when stdout is a terminal (and `NO_COLOR`
//! is unset).

use std::fmt::Write as _;
use std::io::IsTerminal as _;

use super::view::Fate;
use super::View;

/// Whether to colour what goes to stdout.
pub fn colour_stdout() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// The ANSI colour of a fate.
fn ansi(fate: Fate) -> &'static str {
    match fate {
        Fate::Kept => "32",
        Fate::Cleared => "33",
        Fate::Summarized => "34",
        Fate::Externalized => "35",
        Fate::Dropped => "31",
        Fate::Recalled => "36",
    }
}

const HEADER: [&str; 8] = [
    "SPAN", "MSGS", "TURNS", "ROLES", "FATE", "BEFORE", "AFTER", "DETAIL",
];
/// Right-aligned columns.
const NUMERIC: [bool; 8] = [false, true, false, false, false, true, true, false];
/// Columns before the token counts (where a totals row puts its label).
const LABEL_COLUMNS: usize = 5;
const GAP: &str = "  ";

/// Text from the thread or a plan as the terminal shows it: control
/// characters (escape sequences could move the cursor, retitle the window
/// or write the clipboard) as visible `\u{..}` escapes.
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A row per span, with its fate (for the colour).
fn rows(view: &View) -> Vec<([String; 8], Fate)> {
    view.spans
        .spans
        .iter()
        .map(|s| {
            (
                [
                    printable(&s.key()),
                    s.message_ids.len().to_string(),
                    s.turns(),
                    s.roles.join(","),
                    s.fate.as_str().to_string(),
                    s.tokens_before.to_string(),
                    s.tokens_after.to_string(),
                    printable(&s.detail),
                ],
                s.fate,
            )
        })
        .collect()
}

/// The totals rows: label, tokens before, tokens after.
fn footer(view: &View) -> Vec<(String, String, String)> {
    let (span_before, span_after) = view.span_totals();
    let (total_before, total_after) = view.totals();
    let per_turn = &view.per_turn;
    let mut footer: Vec<(String, String, String)> = vec![
        (
            format!(
                "messages ({}, {})",
                plural(view.spans.spans.len(), "span", "spans"),
                plural(view.spans.messages.len(), "message", "messages")
            ),
            span_before.to_string(),
            span_after.to_string(),
        ),
        (
            "system, tools, framing".to_string(),
            view.fixed.total().to_string(),
            view.fixed.total().to_string(),
        ),
    ];
    if per_turn.recall_tokens > 0 {
        footer.push((
            format!(
                "recall block ({})",
                plural(per_turn.recall_passages as usize, "passage", "passages")
            ),
            "0".to_string(),
            per_turn.recall_tokens.to_string(),
        ));
    }
    if per_turn.rehydrated_tokens > 0 {
        footer.push((
            "read back this turn".to_string(),
            "0".to_string(),
            per_turn.rehydrated_tokens.to_string(),
        ));
    }
    footer.push((
        "total".to_string(),
        total_before.to_string(),
        total_after.to_string(),
    ));
    footer
}

/// Column widths (the header, every row, the totals' counts), the first
/// columns widened to hold the longest totals label; and the width the
/// labels span.
fn widths(
    rows: &[([String; 8], Fate)],
    footer: &[(String, String, String)],
) -> ([usize; 8], usize) {
    let mut width: [usize; 8] = HEADER.map(|h| h.chars().count());
    for (row, _) in rows {
        for (w, cell) in width.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for (_, b, a) in footer {
        width[5] = width[5].max(b.len());
        width[6] = width[6].max(a.len());
    }
    let label_width =
        |w: &[usize; 8]| w[..LABEL_COLUMNS].iter().sum::<usize>() + GAP.len() * (LABEL_COLUMNS - 1);
    let longest_label = footer
        .iter()
        .map(|(l, _, _)| l.chars().count())
        .max()
        .unwrap_or(0);
    let short = longest_label.saturating_sub(label_width(&width));
    width[LABEL_COLUMNS - 1] += short;
    let label = label_width(&width);
    (width, label)
}

/// The budget line and the warnings.
fn budget_and_warnings(view: &View, out: &mut String) {
    let b = &view.budget;
    let _ = writeln!(
        out,
        "budget: max input {} · hard limit {} · trigger {} · target {} · tokens {} before, {} after ({})",
        b.max_input_tokens,
        b.hard_limit,
        b.trigger,
        b.target,
        b.tokens_before,
        b.tokens_after,
        if b.triggered {
            "over the trigger: compacted"
        } else {
            "under the trigger"
        }
    );
    if view.warnings.is_empty() {
        out.push_str("warnings: none");
    } else {
        let _ = write!(out, "warnings ({}):", view.warnings.len());
        for w in &view.warnings {
            let _ = write!(out, "\n  - {}", printable(w));
        }
    }
    out.push('\n');
}

/// The table for `view`.
pub fn table(view: &View, colour: bool) -> String {
    let rows = rows(view);
    let footer = footer(view);
    let (width, label_width) = widths(&rows, &footer);
    let line = |cells: &[String; 8], fate: Option<Fate>| -> String {
        let mut s = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i > 0 {
                s.push_str(GAP);
            }
            let pad = width[i].saturating_sub(cell.chars().count());
            let text = match fate {
                Some(f) if colour && i == 4 => format!("\x1b[{}m{cell}\x1b[0m", ansi(f)),
                _ => cell.clone(),
            };
            if NUMERIC[i] {
                s.push_str(&" ".repeat(pad));
                s.push_str(&text);
            } else {
                s.push_str(&text);
                s.push_str(&" ".repeat(pad));
            }
        }
        s.trim_end().to_string()
    };

    let mut out = String::new();
    let _ = writeln!(
        out,
        "thread {} · model {} ({}) · format {} · plan v{}, {}",
        printable(&view.thread_id),
        printable(&view.model),
        view.tokenizer,
        view.format,
        view.plan_version,
        view.plan_source
    );
    out.push('\n');
    let _ = writeln!(out, "{}", line(&HEADER.map(str::to_string), None));
    for (row, fate) in &rows {
        let _ = writeln!(out, "{}", line(row, Some(*fate)));
    }
    let label = label_width;
    let rule = label + GAP.len() * 3 + width[5] + width[6];
    let _ = writeln!(out, "{}", "-".repeat(rule));
    for (l, b, a) in &footer {
        let _ = writeln!(
            out,
            "{l}{}{GAP}{b:>wb$}{GAP}{a:>wa$}",
            " ".repeat(label.saturating_sub(l.chars().count())),
            wb = width[5],
            wa = width[6],
        );
    }
    out.push('\n');
    budget_and_warnings(view, &mut out);
    out.push_str(&super::memory::lines(&view.remembers, printable).join("\n"));
    out
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::view::tests::demo;
    use super::super::{Budget, Fixed, PerTurn, View};
    use super::*;

    /// The demo thread and plan with a budget around them.
    pub(in super::super) fn demo_view() -> View {
        let (t, plan, spans) = demo();
        let pinned = compactd::reduce::pinned_messages(&t, &compactd::reduce::Policy::default());
        let remembers = super::super::memory::of(&t, &plan, &spans, &pinned);
        let mut view = View {
            thread_id: t.id.clone(),
            model: "gpt-4o".into(),
            tokenizer: "o200k_base".into(),
            format: "neutral",
            plan_version: 1,
            plan_source: "a hand-built plan".into(),
            spans,
            fixed: Fixed {
                system: 0,
                tools: 0,
                framing: 3,
            },
            per_turn: PerTurn {
                recall_tokens: 40,
                recall_passages: 1,
                rehydrated_tokens: 0,
                recall_text: Some(
                    "[Recalled context: …]\nTicket OPS-1142 tracks the rollback".into(),
                ),
            },
            budget: Budget {
                max_input_tokens: 600,
                hard_limit: 560,
                trigger: 510,
                target: 360,
                tokens_before: 0,
                tokens_after: 0,
                triggered: true,
            },
            warnings: vec!["message m6 is in both Clear and Drop; Drop takes precedence".into()],
            remembers,
        };
        let (b, a) = view.totals();
        view.budget.tokens_before = b;
        view.budget.tokens_after = a;
        view
    }

    #[test]
    fn table_snapshot() {
        insta::assert_snapshot!("inspect_table", table(&demo_view(), false));
    }

    #[test]
    fn control_characters_from_the_thread_are_shown_not_sent() {
        let mut view = demo_view();
        view.thread_id = "t\u{1b}]52;c;aGk=\u{7}".to_string();
        view.warnings.push("bad\u{1b}[2Jwarning".to_string());
        let out = table(&view, false);
        assert!(!out.contains('\u{1b}') && !out.contains('\u{7}'), "{out}");
        assert!(out.contains("\\u{1b}"), "{out}");
    }

    #[test]
    fn columns_align_and_colour_only_the_fate() {
        let view = demo_view();
        let plain = table(&view, false);
        assert!(!plain.contains('\x1b'));
        let lines: Vec<&str> = plain.lines().collect();
        let header = lines
            .iter()
            .position(|l| l.starts_with("SPAN"))
            .expect("a header row");
        // Every span row's counts end where the header's AFTER ends.
        let after_end = lines[header].find("AFTER").expect("AFTER") + "AFTER".len();
        for (row, span) in lines[header + 1..].iter().zip(&view.spans.spans) {
            assert!(row.starts_with(&span.key()), "{row}");
            let cell = &row[..after_end];
            assert!(
                cell.ends_with(&span.tokens_after.to_string()),
                "{row:?} does not end {} at column {after_end}",
                span.tokens_after
            );
        }
        let coloured = table(&view, true);
        assert!(coloured.contains("\x1b[36mrecalled\x1b[0m"));
        assert!(coloured.contains("\x1b[31mdropped\x1b[0m"));
        // Only the fate cells are coloured: stripped, the tables are equal.
        let stripped = coloured
            .replace("\x1b[0m", "")
            .replace("\x1b[31m", "")
            .replace("\x1b[32m", "")
            .replace("\x1b[33m", "")
            .replace("\x1b[34m", "")
            .replace("\x1b[35m", "")
            .replace("\x1b[36m", "");
        assert_eq!(stripped, plain);
    }
}
