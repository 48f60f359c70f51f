//! Carried plans: the per-turn call of an agent that only appended messages.
//!
//! Below the trigger the pipeline changes nothing: it starts from the
//! committed plan, finds the request under the trigger and hands the plan
//! back with new counts. When a request holds exactly the messages the
//! committed plan was counted for, followed by new ones, and its settings
//! are the same, that outcome is known without running it: the plan's
//! counts plus what the new messages cost, compared with the same trigger.
//! The turn then answers from the committed plan — no pipeline over the
//! whole thread, no artifact, no new version written — and costs the new
//! messages (plus one comparison of the thread with the one kept here).
//! Anything else (another version committed, other settings, an edited
//! history, the trigger crossed) runs the pipeline as before.

use std::sync::{Arc, Weak};

use crate::cache::Weigh;
use crate::model::{CompactionPlan, Thread};
use crate::reduce::{settings_fingerprint, Report};
use crate::render::RequestCounter;
use crate::runtime::blocking;

use super::compact::{CompactOutcome, Resolved};
use super::{App, Result};

/// Appended messages up to this weight ([`crate::model::memory_weight`])
/// are counted on the calling task, as requests up to 64 KiB are converted
/// there.
const INLINE_CHECK_BYTES: u64 = 64 * 1024;

/// What a committed plan was counted for.
pub(in crate::app) struct Carry {
    /// The thread as the pipeline saw it (settled).
    thread: Arc<Thread>,
    /// The committed version the counts belong to, and its fingerprint
    /// (a thread deleted and compacted anew can reach the same version).
    plan_version: u64,
    plan_fingerprint: String,
    /// [`settings_fingerprint`] of the request, with the plugins' setup.
    settings: String,
    /// Request tokens without the plan.
    tokens_before: u32,
    /// Request tokens with it.
    tokens_after: u32,
    /// Above this the pipeline compacts.
    trigger: u32,
    /// Tool results' tokens with the plan, and above what (the per-tier
    /// cap, when one is set) the pipeline reduces them.
    tool_results: Option<(u32, u32)>,
    /// What `thread` weighs in memory (kept: weighing walks every message).
    bytes: u64,
    /// The thread the check found `thread` to extend, while something else
    /// (the recall index) holds it: what a render may skip there.
    extends: Option<Weak<Thread>>,
}

impl Weigh for Arc<Carry> {
    fn weight(&self) -> u64 {
        256 + self.bytes
    }
}

impl App {
    /// A thread `thread` is known to extend: the one the carry check
    /// compared it with, if it is still held elsewhere.
    pub(super) fn carry_extends(&self, tenant: &str, thread: &Arc<Thread>) -> Option<Arc<Thread>> {
        let carry = self
            .inner
            .threads
            .read(tenant, &thread.id, |s| s.carry.clone())?;
        if !Arc::ptr_eq(&carry.thread, thread) {
            return None;
        }
        carry.extends.as_ref()?.upgrade()
    }
}

impl App {
    /// The settings fingerprint of `r`, as [`Carry::settings`] holds it.
    fn settings_of(&self, r: &Resolved) -> String {
        self.fingerprint(settings_fingerprint(
            &r.request(None, self),
            &r.parts.engine(),
        ))
    }

    /// Keeps what the plan just committed for `r` was counted for.
    pub(super) fn carry(
        &self,
        tenant: &str,
        r: &Arc<Resolved>,
        plan: &CompactionPlan,
        report: &Report,
    ) {
        let carry = Carry {
            thread: Arc::clone(&r.cmd.thread),
            plan_version: plan.version,
            plan_fingerprint: plan.fingerprint.clone(),
            settings: self.settings_of(r),
            tokens_before: plan.original_token_count,
            tokens_after: plan.compacted_token_count,
            trigger: report.budget.trigger,
            tool_results: report.budget.tool_results.map(|t| (t.tokens_after, t.cap)),
            bytes: crate::model::memory_weight(&r.cmd.thread.messages),
            extends: None,
        };
        let carry = Arc::new(carry);
        self.inner
            .threads
            .update(tenant, &r.cmd.thread.id, |s| s.carry = Some(carry));
    }

    /// The committed plan `committed` as the outcome of `r`, when `r` only
    /// appends to the thread it was counted for and stays under the
    /// trigger; else the plan back: run the pipeline.
    pub(super) async fn carried(
        &self,
        tenant: &str,
        r: &Arc<Resolved>,
        committed: CompactionPlan,
    ) -> Result<std::result::Result<CompactOutcome, CompactionPlan>> {
        let id = &r.cmd.thread.id;
        let Some(carry) = self.inner.threads.read(tenant, id, |s| s.carry.clone()) else {
            return Ok(Err(committed));
        };
        let have = carry.thread.messages.len();
        // The session, or the edge that shared a thread sent in full with
        // the last one, says what the thread extends; else the messages
        // are compared.
        let known_start = r
            .cmd
            .extends
            .as_ref()
            .is_some_and(|e| Arc::ptr_eq(e, &carry.thread));
        // Nothing appended to a thread not known to be this one: the
        // fingerprint check answers that for less than comparing them.
        let sent = r.cmd.thread.messages.len();
        if carry.plan_version != committed.version
            || carry.plan_fingerprint != committed.fingerprint
            || sent < have
            || (sent == have && !known_start)
        {
            return Ok(Err(committed));
        }
        let (app, r2, c) = (self.clone(), Arc::clone(r), Arc::clone(&carry));
        let check = move || {
            let thread = &r2.cmd.thread;
            let same_start = known_start || thread.messages[..have] == c.thread.messages[..];
            if !same_start || app.settings_of(&r2) != c.settings {
                return None;
            }
            let parts = &r2.parts;
            let rc = RequestCounter::for_target(parts.counter.as_ref(), &parts.ledger, r2.target);
            let (mut added, mut tools) = (0u64, 0u64);
            for m in &thread.messages[have..] {
                let n = u64::from(rc.verbatim(m, &r2.cmd.policy.render));
                added += n;
                if m.tool_result.is_some() {
                    tools += n;
                }
            }
            Some((u32::try_from(added).ok()?, u32::try_from(tools).ok()?))
        };
        // The few new messages of a thread known to extend the kept one
        // (an append session's, or one the edge shared) are checked on the
        // calling task: the trip to the blocking pool and back cost more
        // than counting them. Otherwise the thread is compared message by
        // message, off the async workers.
        let small =
            crate::model::memory_weight(&r.cmd.thread.messages[have..]) <= INLINE_CHECK_BYTES;
        let added = if known_start && small {
            check()
        } else {
            blocking(check).await?
        };
        let Some((added, added_tools)) = added else {
            return Ok(Err(committed));
        };
        let after = carry.tokens_after.saturating_add(added);
        if after > carry.trigger {
            return Ok(Err(committed));
        }
        // A per-tier cap triggers on its own, far below the total's trigger.
        let tool_results = carry
            .tool_results
            .map(|(tokens, cap)| (tokens.saturating_add(added_tools), cap));
        if tool_results.is_some_and(|(tokens, cap)| tokens > cap) {
            return Ok(Err(committed));
        }
        let mut plan = committed;
        plan.original_token_count = carry.tokens_before.saturating_add(added);
        plan.compacted_token_count = after;
        let next = Arc::new(Carry {
            thread: Arc::clone(&r.cmd.thread),
            plan_version: carry.plan_version,
            plan_fingerprint: carry.plan_fingerprint.clone(),
            settings: carry.settings.clone(),
            tokens_before: plan.original_token_count,
            tokens_after: after,
            trigger: carry.trigger,
            tool_results,
            bytes: carry.bytes + crate::model::memory_weight(&r.cmd.thread.messages[have..]),
            extends: Some(Arc::downgrade(&carry.thread)),
        });
        self.inner
            .threads
            .update(tenant, id, |s| s.carry = Some(next));
        let tokenizer = r.parts.counter.name().to_string();
        Ok(Ok(CompactOutcome::reused(plan, tokenizer, &r.cmd)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::compact::tests::long_result_command;
    use crate::app::{CompactCommand, Defaults};
    use crate::model::{Content, Message, Role};
    use crate::security::SecurityContext;

    fn with(cmd: &CompactCommand, messages: Vec<Message>) -> CompactCommand {
        let mut thread = (*cmd.thread).clone();
        thread.messages.extend(messages.into_iter().map(Arc::new));
        CompactCommand {
            thread: Arc::new(thread),
            ..cmd.clone()
        }
    }

    fn said(thread: &Thread, role: Role, text: &str) -> Message {
        let last = thread.messages.last().expect("a message");
        let mut m = (**last).clone();
        m.id = format!("m{}", thread.messages.len());
        m.role = role;
        m.content = Content::Text(text.into());
        m.tool_calls = Vec::new();
        m.tool_result = None;
        m
    }

    fn records(p: &CompactionPlan) -> impl PartialEq + std::fmt::Debug + '_ {
        (
            &p.clearings,
            &p.summarizations,
            &p.externalizations,
            &p.drops,
        )
    }

    /// Every carried turn answers what the pipeline would: the same
    /// records and the same counts, checked by running it (the carry
    /// forgotten) on the same thread.
    #[tokio::test]
    async fn a_carried_turn_is_what_the_pipeline_makes() {
        let app = App::offline(Defaults::default());
        let ctx = SecurityContext::dev();
        let first = app
            .compact(&ctx, long_result_command())
            .await
            .expect("first");
        assert!(!first.reused && first.report.as_ref().is_some_and(|r| r.triggered));
        let mut cmd = long_result_command();
        let mut committed = first.plan;
        for (carried, turn) in (0..200).enumerate() {
            let q = said(
                &cmd.thread,
                Role::User,
                &format!("Question {turn}: and worker {turn}?"),
            );
            cmd = with(&cmd, vec![q]);
            let a = said(
                &cmd.thread,
                Role::Assistant,
                &format!("Worker {turn} took {} ms.", turn * 7),
            );
            cmd = with(&cmd, vec![a]);
            let out = app.compact(&ctx, cmd.clone()).await.expect("turn");
            if !out.reused {
                // The trigger was crossed: the pipeline compacted.
                assert!(out.report.as_ref().is_some_and(|r| r.triggered));
                assert!(carried >= 3, "only {carried} turns carried");
                return;
            }
            assert_eq!(out.plan.version, committed.version);
            app.inner
                .threads
                .update(&ctx.tenant_id, &cmd.thread.id, |s| s.carry = None);
            let pipeline = app.compact(&ctx, cmd.clone()).await.expect("pipeline");
            assert!(!pipeline.reused);
            assert!(!pipeline.report.as_ref().is_some_and(|r| r.triggered));
            assert_eq!(records(&pipeline.plan), records(&out.plan));
            assert_eq!(pipeline.tokens_before(), out.tokens_before());
            assert_eq!(pipeline.tokens_after(), out.tokens_after());
            committed = pipeline.plan;
        }
        panic!("200 turns never crossed the trigger");
    }

    /// The thread of a carried turn sent again, known to be the same
    /// messages (as the edge knows a thread sent in full again), is
    /// answered from the carry with the same counts and no new version;
    /// what the pipeline makes of it is the same.
    #[tokio::test]
    async fn a_carried_thread_sent_again_is_carried() {
        let app = App::offline(Defaults::default());
        let ctx = SecurityContext::dev();
        let base = long_result_command();
        let first = app.compact(&ctx, base.clone()).await.expect("first");
        let q = said(&base.thread, Role::User, "And the fastest?");
        let grown = with(&base, vec![q]);
        let turn = app.compact(&ctx, grown.clone()).await.expect("grown");
        assert!(turn.reused);
        let again = CompactCommand {
            extends: Some(Arc::clone(&grown.thread)),
            ..grown.clone()
        };
        let out = app.compact(&ctx, again).await.expect("again");
        assert!(
            out.reused && out.report.is_none(),
            "carried, no pipeline run"
        );
        assert_eq!(out.plan.version, first.plan.version);
        assert_eq!(records(&out.plan), records(&turn.plan));
        assert_eq!(
            (out.tokens_before(), out.tokens_after()),
            (turn.tokens_before(), turn.tokens_after())
        );
        app.inner
            .threads
            .update(&ctx.tenant_id, &grown.thread.id, |s| s.carry = None);
        let pipeline = app.compact(&ctx, grown).await.expect("pipeline");
        assert_eq!(records(&pipeline.plan), records(&out.plan));
        assert_eq!(pipeline.tokens_before(), out.tokens_before());
        assert_eq!(pipeline.tokens_after(), out.tokens_after());
    }

    /// Anything but an append under the same settings runs the pipeline.
    #[tokio::test]
    async fn only_an_append_under_the_same_settings_is_carried() {
        let app = App::offline(Defaults::default());
        let ctx = SecurityContext::dev();
        let base = long_result_command();
        app.compact(&ctx, base.clone()).await.expect("first");
        let q = said(&base.thread, Role::User, "And the fastest?");
        let grown = with(&base, vec![q]);
        // Another window.
        let mut other = grown.clone();
        other.max_input_tokens = Some(2_100);
        assert!(!app.compact(&ctx, other).await.expect("other").reused);
        app.compact(&ctx, base.clone()).await.expect("back");
        // History edited under the same ids.
        let mut edited = (*grown.thread).clone();
        std::sync::Arc::make_mut(&mut edited.messages[0]).content =
            Content::Text("Run the other batch job.".into());
        let edited = CompactCommand {
            thread: Arc::new(edited),
            ..grown.clone()
        };
        assert!(!app.compact(&ctx, edited).await.expect("edited").reused);
        app.compact(&ctx, base.clone()).await.expect("back");
        // The plain append is carried.
        assert!(app.compact(&ctx, grown).await.expect("grown").reused);
    }
}
