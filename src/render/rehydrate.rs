//! Fitting rehydrated artifacts into the request's rehydration reserve.

use serde::{Deserialize, Serialize};

use crate::tokens::truncate_to_tokens;

use super::renderer::render_rehydrated;
use super::{Rehydrated, RequestCounter};

/// What happened to one artifact asked for this turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RehydrationReport {
    /// The artifact.
    pub artifact_id: String,
    /// Its content was cut to fit.
    pub truncated: bool,
    /// Nothing of it fit; it is not in the request.
    pub omitted: bool,
}

/// Fits artifacts into `reserve` tokens, in request order: each is cut so that
/// its rendered message (framing included) fits what is left; one that does
/// not fit at all is omitted. Returns the content to inject and a report per
/// artifact.
pub fn fit_rehydrated(
    counter: &RequestCounter<'_>,
    fetched: Vec<(String, String)>,
    reserve: u32,
) -> (Vec<Rehydrated>, Vec<RehydrationReport>) {
    let message_tokens = |r: &Rehydrated| counter.message(&render_rehydrated(r));
    let mut remaining = reserve;
    let mut injected = Vec::new();
    let mut report = Vec::new();
    for (artifact_id, content) in fetched {
        let mut r = Rehydrated {
            artifact_id: artifact_id.clone(),
            content,
            truncated: false,
        };
        let mut cost = message_tokens(&r);
        if cost > remaining {
            let overhead = message_tokens(&Rehydrated {
                artifact_id: artifact_id.clone(),
                content: String::new(),
                truncated: true,
            });
            let full = std::mem::take(&mut r.content);
            let mut cap = remaining.saturating_sub(overhead);
            r.truncated = true;
            // Token counts of concatenations are not exactly additive: shrink
            // the cap until the whole rendered message fits.
            loop {
                r.content = truncate_to_tokens(counter.counter, &full, cap).0;
                cost = message_tokens(&r);
                if cost <= remaining || cap == 0 {
                    break;
                }
                cap = cap.saturating_sub((cost - remaining).max(1));
            }
            if cost > remaining || r.content.is_empty() {
                report.push(RehydrationReport {
                    artifact_id,
                    truncated: true,
                    omitted: true,
                });
                continue;
            }
        }
        remaining -= cost;
        report.push(RehydrationReport {
            artifact_id,
            truncated: r.truncated,
            omitted: false,
        });
        injected.push(r);
    }
    (injected, report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{CompactionPlan, Thread};
    use crate::render::{render, RenderInput, RenderOptions};
    use crate::tokens::{o200k, TokenLedger};

    #[test]
    fn artifacts_are_cut_to_the_reserve_in_order_and_the_rest_omitted() {
        let counter = o200k();
        let ledger = TokenLedger::new(1000);
        let rc = RequestCounter::new(counter.as_ref(), &ledger);
        let long = "line of the stored log with some detail\n".repeat(400);
        let fetched = vec![
            ("art_a".to_string(), "short note".to_string()),
            ("art_b".to_string(), long),
            ("art_c".to_string(), "never fits".to_string()),
        ];
        let (injected, report) = fit_rehydrated(&rc, fetched, 300);
        assert_eq!(injected.len(), 2);
        assert!(!report[0].truncated && !report[0].omitted);
        assert!(report[1].truncated && !report[1].omitted);
        assert!(report[2].omitted, "{report:?}");
        let used: u32 = injected
            .iter()
            .map(|r| {
                let req = render(
                    &Thread {
                        id: String::new(),
                        messages: Vec::new(),
                    },
                    &CompactionPlan::default(),
                    &RenderInput {
                        system: None,
                        tools: &[],
                        rehydrated: std::slice::from_ref(r),
                        options: &RenderOptions::default(),
                        omit_pending_calls: false,
                    },
                );
                req.messages.iter().map(|m| rc.message(m)).sum::<u32>()
            })
            .sum();
        assert!(used <= 300, "{used}");
    }
}
