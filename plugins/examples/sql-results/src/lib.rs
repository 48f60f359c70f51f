//! `sql-results`: database query results collapse to their row count, their
//! column names and a few sample rows. An agent that ran a query rarely
//! needs 5,000 rows again; it needs to know what the query returned and
//! what the rows look like, and it can run the query again.
//!
//! Recognized shapes: a JSON array of row objects, a JSON object with
//! `rows` (objects or arrays) and optionally `columns`, and text tables as
//! psql, MySQL and sqlite print them (`a | b` with a separator line, and
//! `(N rows)` footers). Which results are looked at: tool results of the
//! configured tools (`tools`, default the usual query tool names), or of
//! any tool when the content is a recognized table and `any_tool` is set.
//!
//! Configuration (JSON): `{"tools": [...], "any_tool": false,
//! "min_tokens": 200, "sample_rows": 3, "externalize": false}`.
//! Aggressiveness 80 and above keeps one sample row. With `externalize`,
//! a result is moved to the artifact store instead (the same description
//! as the pointer's summary), for queries that cannot simply be run again:
//! the agent can read every row back.
//!
//! Every proposal carries an estimate of the tokens it frees: the result's
//! tokens less those of the description (about four bytes a token), and for
//! a pointer a little more for its header and hint.

use compactd_plugin_sdk::{export_plugin, pb, Strategy};
use serde_json::Value;

/// The plugin.
#[derive(Debug)]
pub struct SqlResults {
    tools: Vec<String>,
    any_tool: bool,
    min_tokens: u32,
    sample_rows: usize,
    externalize: bool,
}

/// Rough tokens of a pointer's own header, artifact id and hint.
const POINTER_OVERHEAD_TOKENS: u32 = 40;

impl Strategy for SqlResults {
    const NAME: &'static str = "sql-results";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");

    fn create(config: &str) -> Result<Self, String> {
        let v: Value = serde_json::from_str(config).map_err(|e| format!("config: {e}"))?;
        let tools = match v.get("tools") {
            None => [
                "sql_query",
                "run_sql",
                "execute_sql",
                "query",
                "db_query",
                "run_query",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
            Some(Value::Array(a)) => a
                .iter()
                .map(|t| {
                    t.as_str()
                        .map(str::to_string)
                        .ok_or("config: tools must be strings")
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err("config: tools must be a list".into()),
        };
        let num = |k: &str, d: u64| -> Result<u64, String> {
            match v.get(k) {
                None => Ok(d),
                Some(x) => x
                    .as_u64()
                    .ok_or(format!("config: {k} must be a whole number")),
            }
        };
        Ok(SqlResults {
            tools,
            any_tool: v.get("any_tool").and_then(Value::as_bool).unwrap_or(false),
            min_tokens: u32::try_from(num("min_tokens", 200)?).unwrap_or(u32::MAX),
            sample_rows: usize::try_from(num("sample_rows", 3)?).unwrap_or(3).max(1),
            externalize: v
                .get("externalize")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        })
    }

    fn analyze(&self, req: &pb::AnalyzeRequest) -> Result<pb::AnalyzeResponse, String> {
        let Some(thread) = &req.thread else {
            return Ok(pb::AnalyzeResponse::default());
        };
        let samples = if req.aggressiveness >= 80 {
            1
        } else {
            self.sample_rows
        };
        let mut proposals = Vec::new();
        for (i, m) in thread.messages.iter().enumerate() {
            let free = req.states.get(i).copied() == Some(pb::MessageState::Free as i32);
            let tokens = req.message_tokens.get(i).copied().unwrap_or(0);
            let Some(env) = &m.tool_result else { continue };
            if !free || tokens < self.min_tokens {
                continue;
            }
            let named = self.tools.iter().any(|t| t == &env.tool_name);
            if !named && !self.any_tool {
                continue;
            }
            let text = match &env.content {
                Some(pb::api::tool_result_envelope::Content::ContentText(t)) => t.as_str(),
                Some(pb::api::tool_result_envelope::Content::ContentJson(j)) => j.as_str(),
                None => continue,
            };
            let Some(table) = Table::parse(text) else {
                continue;
            };
            let replacement = table.describe(&env.tool_name, samples);
            // Only worth it when it is much smaller.
            if replacement.len() * 2 > text.len() {
                continue;
            }
            let described = u32::try_from(replacement.len() / 4).unwrap_or(u32::MAX);
            let proposal = if self.externalize {
                let summary = pb::api::StructuredSummary {
                    facts: vec![replacement],
                    ..Default::default()
                };
                let hint = format!(
                    "read when you need rows beyond the sample of {}",
                    env.tool_name
                );
                pb::Proposal::externalize(m.id.clone())
                    .with_pointer(Some(summary), hint)
                    .because(format!("query result of {} rows moved out", table.rows))
                    .freeing(tokens.saturating_sub(described + POINTER_OVERHEAD_TOKENS))
            } else {
                pb::Proposal::clear(m.id.clone(), replacement)
                    .preserving("row_count", table.rows.to_string())
                    .because(format!("query result of {} rows collapsed", table.rows))
                    .freeing(tokens.saturating_sub(described))
            };
            proposals.push(proposal);
        }
        Ok(pb::AnalyzeResponse { proposals })
    }
}

export_plugin!(SqlResults);

/// A query result, as far as the summary needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// Rows in the result (the footer's count when the text has one).
    pub rows: usize,
    /// Column names.
    pub columns: Vec<String>,
    /// The first rows, one line each.
    pub sample: Vec<String>,
}

impl Table {
    /// Recognizes a result; `None` when it is not a table.
    pub fn parse(text: &str) -> Option<Table> {
        let t = text.trim();
        if t.starts_with('[') || t.starts_with('{') {
            if let Ok(v) = serde_json::from_str::<Value>(t) {
                return Table::from_json(&v);
            }
        }
        Table::from_text(t)
    }

    fn from_json(v: &Value) -> Option<Table> {
        let (rows, declared): (&Vec<Value>, Option<Vec<String>>) = match v {
            Value::Array(a) => (a, None),
            Value::Object(o) => {
                let rows = o.get("rows").and_then(Value::as_array)?;
                let cols = o.get("columns").and_then(Value::as_array).map(|c| {
                    c.iter()
                        .map(|x| match x {
                            Value::String(s) => s.clone(),
                            Value::Object(m) => m
                                .get("name")
                                .and_then(Value::as_str)
                                .unwrap_or("?")
                                .to_string(),
                            other => other.to_string(),
                        })
                        .collect()
                });
                (rows, cols)
            }
            _ => return None,
        };
        if rows.len() < 2 {
            return None;
        }
        let columns = match declared {
            Some(c) => c,
            None => match rows.first()? {
                Value::Object(m) => m.keys().cloned().collect(),
                _ => return None,
            },
        };
        let all_rows_shaped = rows
            .iter()
            .all(|r| matches!(r, Value::Object(_) | Value::Array(_)));
        if columns.is_empty() || !all_rows_shaped {
            return None;
        }
        Some(Table {
            rows: rows.len(),
            columns,
            sample: rows.iter().take(5).map(|r| r.to_string()).collect(),
        })
    }

    /// psql / sqlite / MySQL text tables: a header line of `|`-separated
    /// names, a separator of dashes (and `+`), then rows.
    fn from_text(t: &str) -> Option<Table> {
        let lines: Vec<&str> = t.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
        let is_sep =
            |l: &str| l.len() >= 3 && l.chars().all(|c| matches!(c, '-' | '+' | '|' | '=' | ' '));
        // The first separator right under a header line (MySQL boxes put
        // another separator above the header too).
        let sep = (1..lines.len())
            .find(|&k| is_sep(lines[k]) && lines[k - 1].contains('|') && !is_sep(lines[k - 1]))?;
        let header_at = sep - 1;
        let columns: Vec<String> = lines[header_at]
            .split('|')
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(str::to_string)
            .collect();
        if columns.len() < 2 {
            return None;
        }
        let body: Vec<&str> = lines[sep + 1..]
            .iter()
            .copied()
            .filter(|l| l.contains('|') && !l.starts_with('+'))
            .collect();
        let footer = lines.iter().rev().find_map(|l| rows_footer(l));
        let rows = footer.unwrap_or(body.len());
        if rows < 2 {
            return None;
        }
        Some(Table {
            rows,
            columns,
            sample: body
                .iter()
                .take(5)
                .map(|l| {
                    l.trim_matches('|')
                        .split('|')
                        .map(str::trim)
                        .collect::<Vec<_>>()
                        .join(" | ")
                })
                .collect(),
        })
    }

    /// The placeholder.
    pub fn describe(&self, tool: &str, samples: usize) -> String {
        let mut out = format!(
            "[{tool} result: {} rows; columns: {}",
            self.rows,
            self.columns.join(", ")
        );
        let shown: Vec<&String> = self.sample.iter().take(samples).collect();
        if !shown.is_empty() {
            out.push_str("; first rows: ");
            out.push_str(
                &shown
                    .iter()
                    .map(|s| cap(s, 200))
                    .collect::<Vec<_>>()
                    .join(" / "),
            );
        }
        out.push_str("; run the query again for the rest]");
        out
    }
}

/// `(1,204 rows)`, `1204 rows in set (0.01 sec)`.
fn rows_footer(line: &str) -> Option<usize> {
    let l = line.trim().trim_start_matches('(');
    let (n, rest) = l.split_once(' ')?;
    let rest = rest.trim_start();
    if !(rest.starts_with("rows") || rest.starts_with("row)") || rest.starts_with("row ")) {
        return None;
    }
    n.replace([',', '_'], "").parse().ok()
}

fn cap(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognizes_json_rows_text_tables_and_footers() {
        let json: String = format!(
            "[{}]",
            (0..50)
                .map(|i| format!("{{\"id\": {i}, \"email\": \"u{i}@example.com\"}}"))
                .collect::<Vec<_>>()
                .join(",")
        );
        let t = Table::parse(&json).expect("json rows");
        assert_eq!(t.rows, 50);
        assert_eq!(t.columns, vec!["email", "id"]);
        let psql = " id | name  \n----+-------\n  1 | alice\n  2 | bob\n  3 | carol\n(3 rows)\n";
        let t = Table::parse(psql).expect("psql");
        assert_eq!(
            (t.rows, t.columns.clone()),
            (3, vec!["id".into(), "name".into()])
        );
        assert_eq!(t.sample[0], "1 | alice");
        let mysql = "+----+-------+\n| id | name  |\n+----+-------+\n|  1 | alice |\n|  2 | bob   |\n+----+-------+\n1,204 rows in set (0.01 sec)";
        let t = Table::parse(mysql).expect("mysql");
        assert_eq!(t.rows, 1204);
        assert!(Table::parse("The deploy finished.\nAll good.").is_none());
        assert!(Table::parse("{\"status\": \"ok\"}").is_none());
    }

    #[test]
    fn collapses_free_query_results_only() {
        use compactd_plugin_sdk::pb::api;
        let rows: String = (0..300)
            .map(|i| format!("{i:5} | customer-{i} | {}.00\n", i * 7))
            .collect();
        let table = format!(" id | name | total\n----+------+------\n{rows}(300 rows)\n");
        let result = |id: &str, tool: &str| api::Message {
            id: id.into(),
            role: api::Role::Tool as i32,
            tool_result: Some(api::ToolResultEnvelope {
                tool_name: tool.into(),
                tool_call_id: format!("c-{id}"),
                content: Some(api::tool_result_envelope::Content::ContentText(
                    table.clone(),
                )),
                ..Default::default()
            }),
            ..Default::default()
        };
        let req = pb::AnalyzeRequest {
            thread: Some(api::Thread {
                id: "t".into(),
                messages: vec![
                    result("a", "sql_query"),
                    result("b", "sql_query"),
                    result("c", "web_search"),
                ],
            }),
            states: vec![
                pb::MessageState::Free as i32,
                pb::MessageState::Tail as i32,
                pb::MessageState::Free as i32,
            ],
            message_tokens: vec![3000, 3000, 3000],
            ..Default::default()
        };
        let out = compactd_plugin_sdk::testing::run::<SqlResults>("{}", &req).expect("runs");
        assert_eq!(out.proposals.len(), 1, "only the free sql result");
        let Some(pb::proposal::Action::Clear(c)) = &out.proposals[0].action else {
            panic!("a clear");
        };
        assert_eq!(c.message_id, "a");
        assert!(c.replacement.contains("300 rows"), "{}", c.replacement);
        assert!(c.replacement.contains("columns: id, name, total"));
        let estimate = out.proposals[0].estimated_tokens_freed;
        assert!(estimate > 2_000 && estimate < 3_000, "{estimate}");
        let moved =
            compactd_plugin_sdk::testing::run::<SqlResults>("{\"externalize\": true}", &req)
                .expect("runs");
        let Some(pb::proposal::Action::Externalize(x)) = &moved.proposals[0].action else {
            panic!("an externalization: {:?}", moved.proposals);
        };
        assert_eq!(x.message_id, "a");
        assert!(x
            .summary
            .as_ref()
            .is_some_and(|s| s.facts[0].contains("300 rows")));
        assert!(x.rehydrate_hint.contains("sql_query"));
        assert!(moved.proposals[0].estimated_tokens_freed < estimate);
        let bad = compactd_plugin_sdk::testing::run::<SqlResults>("{\"tools\": 3}", &req);
        assert!(matches!(bad, Err((1, _))));
    }
}
