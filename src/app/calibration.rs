//! The count calibration of each tenant's model families (see
//! [`crate::tokens::calibration`]): learned from the provider's usage
//! reports, kept beside the tenant's threads so that every replica counts
//! with it, and read again at most every [`REFRESH`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::render::cache::{body_digest, ProviderUsage};
use crate::render::prefix::PrefixTrace;
use crate::runtime::lock;
use crate::store::{StoreError, ThreadStore};
use crate::tokens::calibration::{model_family, Applied, Calibration, Refused};

/// How long a replica counts with what it last read of a calibration
/// before reading it again (what it learns itself applies at once).
pub const REFRESH: Duration = Duration::from_secs(5);

/// Conditional writes tried before a report is kept on this replica only
/// (and written with the next).
const WRITE_TRIES: usize = 4;

/// How often a replica writes what it learned when the scale did not move.
pub const PERSIST: Duration = Duration::from_secs(10);

/// Calibrations remembered per process; past this the memory is cleared
/// (each is read again on its next use).
const MAX_KNOWN: usize = 10_000;

/// What a replica knows of one calibration.
#[derive(Debug, Clone)]
struct Known {
    calibration: Calibration,
    /// Its store tag (`None`: none stored).
    tag: Option<String>,
    read: Instant,
    /// Reports learned here and not yet written: (input, raw, digest, when).
    pending: Vec<(u32, f64, u64, u64)>,
    /// When this replica last wrote it.
    written: Option<Instant>,
}

impl Known {
    fn fresh(calibration: Calibration, tag: Option<String>) -> Self {
        Known {
            calibration,
            tag,
            read: Instant::now(),
            pending: Vec::new(),
            written: None,
        }
    }

    /// The reports learned here, applied again on top of what was read.
    fn reapply(&mut self, pending: &[(u32, f64, u64, u64)]) {
        for &(input, raw, digest, at) in pending {
            // Refused ones were refused when learned, or are there already.
            let _ = self.calibration.observe(input, raw, digest, at);
        }
        self.pending = pending.to_vec();
    }
}

/// The calibrations of the process, over the tenant's store.
pub(super) struct Calibrations {
    store: Arc<ThreadStore>,
    known: Mutex<HashMap<(String, String), Known>>,
}

fn object(family: &str) -> String {
    format!("calibration-{family}.json")
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Calibrations {
    /// Calibrations kept in `store`.
    pub(super) fn new(store: Arc<ThreadStore>) -> Self {
        Calibrations {
            store,
            known: Mutex::default(),
        }
    }

    /// What counts for `model` of `tenant` are based on, as last read or
    /// learned here; `None` before any report.
    pub(super) fn applied(&self, tenant: &str, model: &str) -> Option<Applied> {
        let key = (tenant.to_owned(), model_family(model));
        let known = lock(&self.known);
        let k = known.get(&key)?;
        let applied = k.calibration.applied(now_ms());
        (applied.reports > 0).then_some(applied)
    }

    /// Reads the calibration again when what this replica knows is older
    /// than [`REFRESH`], keeping what it learned and has not written yet. A
    /// store that cannot be read leaves what is known (the estimate, at
    /// worst): counting never fails on it.
    pub(super) async fn refresh(&self, tenant: &str, model: &str) {
        let key = (tenant.to_owned(), model_family(model));
        let fresh = lock(&self.known)
            .get(&key)
            .is_some_and(|k| k.read.elapsed() < REFRESH);
        if fresh {
            return;
        }
        match self.read(&key).await {
            Ok(mut read) => {
                let mut all = lock(&self.known);
                if let Some(k) = all.get(&key) {
                    read.written = k.written;
                    read.reapply(&k.pending.clone());
                }
                remember(&mut all, key, read);
            }
            Err(e) => {
                tracing::warn!(error = %e, family = %key.1, "count calibration not read; counting with what is known")
            }
        }
    }

    /// Learns from the provider's reports on `previous`, the body the last
    /// render of the thread sent; returns warnings for reports not learned
    /// from. Applied here at once; written to the store (a conditional
    /// write, merged with what other replicas wrote) when the scale
    /// changed, else at most every [`PERSIST`], so that one tenant's
    /// agents reporting every turn do not all write one object.
    pub(super) async fn learn(
        &self,
        tenant: &str,
        model: &str,
        reports: &[ProviderUsage],
        previous: Option<&PrefixTrace>,
    ) -> Vec<String> {
        let Some(previous) = previous.filter(|p| p.body_tokens > 0) else {
            return Vec::new();
        };
        let digest = body_digest(previous);
        let mine: Vec<(usize, u32)> = reports
            .iter()
            .enumerate()
            .filter(|(_, r)| r.body_digest == digest)
            .map(|(i, r)| (i, r.input_tokens))
            .collect();
        if mine.is_empty() {
            return Vec::new();
        }
        self.refresh(tenant, model).await;
        let scale = if previous.count_scale > 0.0 {
            previous.count_scale
        } else {
            1.0
        };
        let raw = f64::from(previous.body_tokens) / scale;
        let key = (tenant.to_owned(), model_family(model));
        let (warnings, write) = {
            let mut all = lock(&self.known);
            let k = all
                .entry(key.clone())
                .or_insert_with(|| Known::fresh(Calibration::default(), None));
            let (now, before) = (now_ms(), k.calibration.applied(now_ms()).scale);
            let mut warnings = Vec::new();
            for &(i, input) in &mine {
                match k.calibration.observe(input, raw, digest, now) {
                    Ok(()) => k.pending.push((input, raw, digest, now)),
                    // Said once, or too small to tell: nothing to report.
                    Err(Refused::Duplicate | Refused::Small) => {}
                    Err(e) => warnings.push(format!("usage[{i}]: not learned from: {e}")),
                }
            }
            let moved = k.calibration.applied(now).scale != before;
            let due = k.written.is_none_or(|w| w.elapsed() >= PERSIST);
            (warnings, !k.pending.is_empty() && (moved || due))
        };
        if write {
            self.persist(&key).await;
        }
        warnings
    }

    /// Writes what this replica learned, merged with the stored state.
    async fn persist(&self, key: &(String, String)) {
        for attempt in 0..WRITE_TRIES {
            let pending = match lock(&self.known).get(key) {
                Some(k) => k.pending.clone(),
                None => return,
            };
            let mut merged = match self.read(key).await {
                Ok(k) => k,
                Err(e) => {
                    tracing::warn!(error = %e, family = %key.1, "count calibration not read; kept on this replica");
                    return;
                }
            };
            merged.reapply(&pending);
            match self.write(key, &merged).await {
                Ok(tag) => {
                    merged.tag = Some(tag);
                    merged.written = Some(Instant::now());
                    let mut all = lock(&self.known);
                    // What was learned meanwhile stays pending.
                    let later: Vec<_> = all
                        .get(key)
                        .map(|k| k.pending[pending.len().min(k.pending.len())..].to_vec())
                        .unwrap_or_default();
                    merged.reapply(&later);
                    remember(&mut all, key.clone(), merged);
                    return;
                }
                Err(StoreError::Conflict { .. }) if attempt + 1 < WRITE_TRIES => continue,
                Err(e) => {
                    tracing::warn!(error = %e, family = %key.1, "count calibration not written; kept on this replica");
                    return;
                }
            }
        }
    }

    async fn read(&self, key: &(String, String)) -> Result<Known, StoreError> {
        let found = self.store.shared(&key.0, &object(&key.1)).await?;
        let (calibration, tag) = match found {
            None => (Calibration::default(), None),
            Some((bytes, tag)) => match serde_json::from_slice(&bytes) {
                Ok(c) => (c, Some(tag)),
                // Replaced by the next report (the tag is kept for that).
                Err(e) => {
                    tracing::warn!(error = %e, family = %key.1, "count calibration does not parse; counting with the estimate");
                    (Calibration::default(), Some(tag))
                }
            },
        };
        Ok(Known::fresh(calibration, tag))
    }

    /// Writes `known` where its tag says it was read; the new tag.
    async fn write(&self, key: &(String, String), known: &Known) -> Result<String, StoreError> {
        let bytes = serde_json::to_vec(&known.calibration)
            .map_err(|e| StoreError::Corrupt(format!("calibration does not serialize: {e}")))?;
        let name = object(&key.1);
        let tag = self
            .store
            .put_shared(&key.0, &name, bytes, known.tag.clone())
            .await?;
        match tag {
            Some(tag) => Ok(tag),
            // A backend that does not say: read back.
            None => Ok(self
                .store
                .shared(&key.0, &name)
                .await?
                .map(|(_, tag)| tag)
                .unwrap_or_default()),
        }
    }
}

/// Keeps `known` as what this replica knows of `key`.
fn remember(all: &mut HashMap<(String, String), Known>, key: (String, String), known: Known) {
    if all.len() >= MAX_KNOWN && !all.contains_key(&key) {
        all.clear();
    }
    all.insert(key, known);
}
