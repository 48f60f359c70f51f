//! What a turn reads back: the artifacts the agent named (automatic
//! rehydration) and those asked for, fitted into the rehydration reserve.

use crate::model::Sensitivity;
use crate::render::{fit_rehydrated, RehydrationReport, RequestCounter};
use crate::render::{
    hinted, named_recently, named_this_turn, request_identifiers, AutoRehydrate, RehydrationBlocked,
};
use crate::security::{Permission, SecurityContext};
use crate::store::StoreError;
use crate::tokens::truncate_to_tokens;

use super::super::App;

use super::*;

/// What the agent named this turn: content to inject, and what was refused.
#[derive(Debug, Default, Clone)]
pub(super) struct AutoRehydration {
    pub(super) fetched: Vec<(String, String)>,
    pub(super) blocked: Vec<RehydrationReport>,
}

/// A store error as a reason not to inject (never a reason to fail the turn).
pub(super) fn store_block(artifact_id: &str, e: StoreError) -> RehydrationBlocked {
    match e {
        StoreError::NotFound | StoreError::InvalidId(_) | StoreError::KeyDeleted(_) => {
            RehydrationBlocked::NotFound
        }
        e => {
            tracing::warn!(artifact_id, error = %e, "automatic rehydration: artifact store error");
            RehydrationBlocked::Unavailable
        }
    }
}

pub(super) fn blocked(artifact_id: &str, why: RehydrationBlocked) -> RehydrationReport {
    RehydrationReport {
        artifact_id: artifact_id.to_string(),
        truncated: false,
        omitted: true,
        auto: true,
        blocked: Some(why),
    }
}

impl App {
    /// Artifacts the agent named in its latest turn, then those whose hint
    /// or summary names an identifier the latest request names, that may be
    /// injected: public or internal, readable by the caller, not named
    /// within the cooldown, at most `max_per_turn`. Best effort: a store that does not
    /// answer blocks the injection, never the turn. Every refusal is
    /// reported and logged as an event (ids and reasons, never content).
    pub(super) async fn auto_rehydration(
        &self,
        ctx: &SecurityContext,
        cmd: &RenderCommand,
        limits: AutoRehydrate,
    ) -> AutoRehydration {
        let thread = &cmd.request.thread;
        let mut out = AutoRehydration::default();
        let recent = named_recently(thread, limits.cooldown_turns);
        let mut candidates = named_this_turn(thread);
        // Then what the latest request asks for by the identifiers of an
        // artifact's hint or summary, under the same limits (best effort:
        // a plan store that does not answer matches nothing).
        let wanted = request_identifiers(thread);
        if !wanted.is_empty() && candidates.len() < limits.max_per_turn as usize {
            if let Ok(Some(plan)) = self.current_plan(&ctx.tenant_id, &thread.id).await {
                // Only as many as may be injected: a hint is a guess, and
                // a guess over the limit is not worth a refusal report.
                let room = limits.max_per_turn as usize - candidates.len();
                let extra: Vec<String> = hinted(&plan, &wanted)
                    .into_iter()
                    .filter(|id| !candidates.contains(id))
                    .take(room)
                    .collect();
                candidates.extend(extra);
            }
        }
        for id in candidates {
            if cmd.rehydrate_artifact_ids.contains(&id) {
                continue;
            }
            let why = if recent.contains(&id) {
                Some(RehydrationBlocked::Cooldown)
            } else if !ctx.permissions.contains(&Permission::Rehydrate) {
                Some(RehydrationBlocked::Permission)
            } else if out.fetched.len() >= limits.max_per_turn as usize {
                Some(RehydrationBlocked::TurnLimit)
            } else {
                // The metadata first: confidential content is never even
                // decrypted on this path.
                let store = &self.inner.artifacts;
                let read = match store.get_metadata(&ctx.tenant_id, &thread.id, &id).await {
                    Ok(meta) if meta.sensitivity > Sensitivity::Internal => {
                        Err(RehydrationBlocked::Sensitivity)
                    }
                    Ok(meta) if !ctx.can_read(meta.sensitivity) => {
                        Err(RehydrationBlocked::Permission)
                    }
                    Ok(_) => store
                        .get(&ctx.tenant_id, &thread.id, &id)
                        .await
                        .map_err(|e| store_block(&id, e)),
                    Err(e) => Err(store_block(&id, e)),
                };
                match read {
                    Ok((_, bytes)) => {
                        out.fetched
                            .push((id.clone(), String::from_utf8_lossy(&bytes).into_owned()));
                        None
                    }
                    Err(why) => Some(why),
                }
            };
            if let Some(why) = why {
                out.blocked.push(blocked(&id, why));
            }
        }
        out
    }
}

/// What is read back, fitted into `room` tokens: explicit requests first
/// (they share the reserve with what the agent named, and an explicit
/// request is the stronger signal), then what the agent named, each cut to
/// `auto_cap` tokens. Returns what goes in and a report per artifact,
/// refusals included.
pub(super) fn fit_read_backs(
    rc: &RequestCounter<'_>,
    mut fetched: Vec<(String, String)>,
    auto: AutoRehydration,
    auto_cap: u32,
    room: u32,
    options: &crate::render::RenderOptions,
) -> (Vec<crate::render::Rehydrated>, Vec<RehydrationReport>) {
    let explicit = fetched.len();
    let mut cut = Vec::with_capacity(auto.fetched.len());
    for (id, text) in auto.fetched {
        let (text, truncated) = truncate_to_tokens(rc.counter, &text, auto_cap);
        cut.push(truncated);
        fetched.push((id, text));
    }
    let (injected, mut report) = fit_rehydrated(rc, fetched, room, options);
    for (r, truncated) in report[explicit..].iter_mut().zip(cut) {
        r.auto = true;
        r.truncated |= truncated;
    }
    report.extend(auto.blocked);
    (injected, report)
}
