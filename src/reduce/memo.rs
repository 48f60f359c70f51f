//! Derived results that are expensive to recompute and fully determined by
//! their inputs: summaries (an LLM call, later) and tool-output compressions
//! (a JSON parse of a large output). Agents resend the same thread every turn,
//! so without this every turn would redo them.
//!
//! Keys hash every input that changes the result (content, summarizer id,
//! schema version, size caps), so a cached value is never stale. Memory is
//! bounded by two generations: when the young one fills, the old one is
//! dropped, which approximates LRU at O(1) cost.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::model::StructuredSummary;
use crate::summarize::Compressed;

type FastMap<V> = HashMap<u128, V, xxhash_rust::xxh3::Xxh3DefaultBuilder>;

#[derive(Debug)]
struct Generations<V> {
    young: FastMap<V>,
    old: FastMap<V>,
    cap: usize,
}

impl<V: Clone> Generations<V> {
    fn new(cap: usize) -> Self {
        Generations {
            young: FastMap::default(),
            old: FastMap::default(),
            cap: cap.max(1),
        }
    }

    fn get(&mut self, k: u128) -> Option<V> {
        if let Some(v) = self.young.get(&k) {
            return Some(v.clone());
        }
        let v = self.old.remove(&k)?;
        self.insert(k, v.clone());
        Some(v)
    }

    fn insert(&mut self, k: u128, v: V) {
        if self.young.len() >= self.cap {
            self.old = std::mem::take(&mut self.young);
        }
        self.young.insert(k, v);
    }
}

/// Process-wide cache of summaries and compressions.
#[derive(Debug)]
pub struct Memo {
    summaries: Mutex<Generations<StructuredSummary>>,
    compressed: Mutex<Generations<Option<Compressed>>>,
}

impl Default for Memo {
    fn default() -> Self {
        Memo::new(50_000)
    }
}

impl Memo {
    /// A memo holding up to about `2 × per_kind` entries of each kind.
    pub fn new(per_kind: usize) -> Self {
        Memo {
            summaries: Mutex::new(Generations::new(per_kind)),
            compressed: Mutex::new(Generations::new(per_kind)),
        }
    }

    /// A cached summary, or `make()` (cached when it succeeds).
    pub fn summary<E>(
        &self,
        key: u128,
        make: impl FnOnce() -> Result<StructuredSummary, E>,
    ) -> Result<StructuredSummary, E> {
        if let Some(s) = lock(&self.summaries).get(key) {
            return Ok(s);
        }
        let s = make()?;
        lock(&self.summaries).insert(key, s.clone());
        Ok(s)
    }

    /// A cached compression result (including "not compressible"), or `make()`.
    pub fn compressed(
        &self,
        key: u128,
        make: impl FnOnce() -> Option<Compressed>,
    ) -> Option<Compressed> {
        if let Some(c) = lock(&self.compressed).get(key) {
            return c;
        }
        let c = make();
        lock(&self.compressed).insert(key, c.clone());
        c
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding the lock cannot leave a half-written map entry.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Streaming key builder: every part is length-prefixed.
#[derive(Default)]
pub struct KeyHasher(xxhash_rust::xxh3::Xxh3Default);

impl KeyHasher {
    /// Adds one part.
    pub fn part(&mut self, bytes: &[u8]) -> &mut Self {
        self.0.update(&(bytes.len() as u64).to_le_bytes());
        self.0.update(bytes);
        self
    }

    /// The key.
    pub fn finish(&self) -> u128 {
        self.0.digest128()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::SpanReference;

    fn summary(n: u32) -> StructuredSummary {
        StructuredSummary::empty(SpanReference {
            message_ids: vec![n.to_string()],
            first_turn: n,
            last_turn: n,
        })
    }

    #[test]
    fn caches_and_stays_bounded() {
        let m = Memo::new(2);
        let mut calls = 0;
        for round in 0..2 {
            for k in 0..2u32 {
                let s = m
                    .summary::<()>(u128::from(k), || {
                        calls += 1;
                        Ok(summary(k))
                    })
                    .unwrap();
                assert_eq!(s, summary(k));
            }
            assert_eq!(calls, 2, "round {round}");
        }
        for k in 2..10u32 {
            m.summary::<()>(u128::from(k), || Ok(summary(k))).unwrap();
        }
        let g = lock(&m.summaries);
        assert!(g.young.len() + g.old.len() <= 4);
    }

    #[test]
    fn failures_are_not_cached() {
        let m = Memo::new(4);
        assert!(m.summary(1, || Err("down")).is_err());
        assert!(m.summary::<&str>(1, || Ok(summary(1))).is_ok());
    }
}
