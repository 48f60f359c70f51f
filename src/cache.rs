//! The one bounded cache for derived results (summaries, compressions,
//! committed plans): weighed in bytes so memory stays within a budget
//! whatever the entry sizes, with quick_cache's S3-FIFO eviction so a burst
//! of one-off entries does not push out the ones every turn reuses.
//!
//! Values report their approximate heap size through [`Weigh`]. The token
//! ledger keeps its own CLOCK cache: it is on the hot path of every call and
//! measured faster for its fixed-size entries.

use std::hash::Hash;

use quick_cache::sync::{Cache, DefaultLifecycle, EntryAction, EntryResult};
use quick_cache::{DefaultHashBuilder, OptionsBuilder, Weighter};

/// Approximate heap bytes of a cached value.
pub(crate) trait Weigh {
    /// The estimate; a few bytes off is fine, orders of magnitude are not.
    fn weight(&self) -> u64;
}

#[derive(Debug, Clone, Copy)]
struct ByWeight;

impl<K, V: Weigh> Weighter<K, V> for ByWeight {
    fn weight(&self, _key: &K, value: &V) -> u64 {
        // Zero-weight entries would never be evicted.
        value.weight().max(1)
    }
}

/// A concurrent cache holding at most about `max_bytes` of values.
pub(crate) struct BoundedCache<K, V> {
    inner: Cache<K, V, ByWeight>,
}

impl<K, V> std::fmt::Debug for BoundedCache<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoundedCache").finish_non_exhaustive()
    }
}

/// Typical entry size the shard layout is planned for.
const TYPICAL_ENTRY_BYTES: u64 = 2048;
/// Shards, fixed rather than derived from the core count: a value larger
/// than about a shard's share of the budget is not cached, so the largest
/// cacheable value must not shrink on bigger machines.
const SHARDS: usize = 8;

impl<K: Eq + Hash + Clone, V: Clone + Weigh> BoundedCache<K, V> {
    /// A cache of at most about `max_bytes`. A value larger than a shard's
    /// share is not cached at all (it would evict everything else).
    pub(crate) fn new(max_bytes: u64) -> Self {
        let items = usize::try_from(max_bytes / TYPICAL_ENTRY_BYTES)
            .unwrap_or(usize::MAX)
            .max(16);
        let options = OptionsBuilder::new()
            .estimated_items_capacity(items)
            .weight_capacity(max_bytes.max(1))
            .shards(SHARDS)
            .build();
        let inner = match options {
            Ok(o) => Cache::with_options(
                o,
                ByWeight,
                DefaultHashBuilder::default(),
                DefaultLifecycle::default(),
            ),
            // Only reachable with a zero capacity, which `max(1)` rules out.
            Err(_) => Cache::with_weighter(items, max_bytes.max(1), ByWeight),
        };
        BoundedCache { inner }
    }

    /// A clone of the cached value.
    pub(crate) fn get(&self, key: &K) -> Option<V> {
        self.inner.get(key)
    }

    /// Inserts or replaces.
    pub(crate) fn insert(&self, key: K, value: V) {
        self.inner.insert(key, value);
    }

    /// Drops an entry (when what it mirrors may have changed).
    pub(crate) fn remove(&self, key: &K) {
        self.inner.remove(key);
    }

    /// Keeps only the entries whose key passes `keep`.
    pub(crate) fn retain(&self, keep: impl Fn(&K) -> bool) {
        self.inner.retain(|k, _| keep(k));
    }

    /// What `f` reads of the entry of `key` (a clone: meant for values
    /// made of shared parts, read one at a time).
    pub(crate) fn read<T>(&self, key: &K, f: impl FnOnce(&V) -> T) -> Option<T> {
        self.inner.get(key).map(|v| f(&v))
    }

    /// Runs `f` on the entry of `key` (a default value when absent) under
    /// its shard's lock, so changes to one entry never interleave, and
    /// weighs it again; a value `empty` calls empty is dropped. A value
    /// that grew is taken out and put back through a guard (other calls
    /// on the key wait for it), so the cache evicts for it, or refuses
    /// it, as for any insert: a change in place would only adjust the
    /// count. `f` must not call back into the cache (the shard is locked).
    pub(crate) fn update<T>(
        &self,
        key: K,
        f: impl FnOnce(&mut V) -> T,
        empty: impl Fn(&V) -> bool,
    ) -> T
    where
        V: Default,
        T: Default,
    {
        let mut f = Some(f);
        let mut out = None;
        let result = self.inner.entry(&key, None, |_, v| {
            let before = v.weight();
            if let Some(f) = f.take() {
                out = Some(f(v));
            }
            if empty(v) {
                EntryAction::Remove
            } else if v.weight() > before {
                EntryAction::ReplaceWithGuard
            } else {
                EntryAction::Retain(())
            }
        });
        let t = match result {
            // Refused only when it weighs more than a shard holds.
            EntryResult::Replaced(guard, v) => {
                let _ = guard.insert(v);
                out
            }
            // Absent: a new value, inserted unless it stays empty.
            EntryResult::Vacant(guard) => {
                let mut v = V::default();
                let t = f.take().map(|f| f(&mut v));
                if !empty(&v) {
                    let _ = guard.insert(v);
                }
                t
            }
            // Kept or removed in place (a wait without timeout never times
            // out).
            _ => out,
        };
        // `f` runs exactly once on every path above.
        t.unwrap_or_default()
    }

    /// Total weight held, for stats.
    pub(crate) fn weight(&self) -> u64 {
        self.inner.weight()
    }
}

/// Values derived from what an `Arc` holds, kept by the allocation's
/// address: state that is shared from call to call (a carried plan's
/// summaries, a session's thread) is worked on once per allocation.
///
/// Each entry keeps a weak pointer, so the address cannot be reused while
/// the entry lives, and a value dropped or moved out by `Arc::make_mut`
/// stops matching. Dead entries are swept whenever the map has doubled.
pub(crate) struct ByAddress<T, V> {
    by_address: std::collections::HashMap<usize, (std::sync::Weak<T>, V)>,
    /// Entries after the last sweep of dead ones.
    swept: usize,
}

impl<T, V> Default for ByAddress<T, V> {
    fn default() -> Self {
        ByAddress {
            by_address: std::collections::HashMap::new(),
            swept: 0,
        }
    }
}

impl<T, V: Copy> ByAddress<T, V> {
    /// The value recorded for `of`'s allocation while it is alive.
    pub(crate) fn get(&self, of: &std::sync::Arc<T>) -> Option<V> {
        let (weak, value) = self
            .by_address
            .get(&(std::sync::Arc::as_ptr(of) as usize))?;
        let live = weak.upgrade()?;
        std::sync::Arc::ptr_eq(&live, of).then_some(*value)
    }
}

impl<T, V> ByAddress<T, V> {
    /// Records `value` for `of`'s allocation.
    pub(crate) fn insert(&mut self, of: &std::sync::Arc<T>, value: V) {
        if self.by_address.len() >= 2 * self.swept.max(256) {
            self.sweep();
        }
        let address = std::sync::Arc::as_ptr(of) as usize;
        self.by_address
            .insert(address, (std::sync::Arc::downgrade(of), value));
    }

    /// Drops the entries whose allocation is gone, with their values.
    fn sweep(&mut self) {
        self.by_address.retain(|_, (w, _)| w.strong_count() > 0);
        self.swept = self.by_address.len();
    }

    /// Entries held, live or not yet swept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.by_address.len()
    }
}

/// Heap bytes of a JSON value (strings, keys and a node overhead).
pub(crate) fn json_weight(v: &serde_json::Value) -> u64 {
    use serde_json::Value;
    const NODE: u64 = 32;
    NODE + match v {
        Value::Null | Value::Bool(_) | Value::Number(_) => 0,
        Value::String(s) => s.len() as u64,
        Value::Array(a) => a.iter().map(json_weight).sum(),
        Value::Object(m) => m.iter().map(|(k, v)| k.len() as u64 + json_weight(v)).sum(),
    }
}

/// Heap bytes of a list of strings.
pub(crate) fn strings_weight<'a>(s: impl IntoIterator<Item = &'a String>) -> u64 {
    s.into_iter().map(|s| 24 + s.len() as u64).sum()
}

/// Heap bytes of a summary's structured entries (a summary's, or what one
/// message adds to one).
pub(crate) fn entries_weight(
    decisions: &[crate::model::Decision],
    open_items: &[crate::model::OpenItem],
    artifacts: &[crate::model::ArtifactReference],
    tool_outcomes: &[crate::model::ToolOutcome],
) -> u64 {
    let decisions: u64 = decisions
        .iter()
        .map(|d| 48 + (d.decision.len() + d.rationale.len()) as u64)
        .sum();
    let open: u64 = open_items
        .iter()
        .map(|o| 48 + (o.description.len() + o.context.len()) as u64)
        .sum();
    let artifacts: u64 = artifacts
        .iter()
        .map(|a| 72 + (a.artifact_id.len() + a.description.len() + a.rehydrate_hint.len()) as u64)
        .sum();
    let tools: u64 = tool_outcomes
        .iter()
        .map(|t| {
            64 + t.tool_name.len() as u64
                + t.error_message.as_ref().map_or(0, |e| e.len() as u64)
                + t.key_fields
                    .iter()
                    .map(|(k, v)| k.len() as u64 + json_weight(v))
                    .sum::<u64>()
        })
        .sum();
    decisions + open + artifacts + tools
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone)]
    struct Blob(usize);

    impl Weigh for Blob {
        fn weight(&self) -> u64 {
            self.0 as u64
        }
    }

    #[test]
    fn stays_within_its_byte_budget() {
        let c: BoundedCache<u32, Blob> = BoundedCache::new(64 * 1024);
        for k in 0..10_000 {
            c.insert(k, Blob(1000));
        }
        assert!(c.weight() <= 64 * 1024, "{}", c.weight());
        assert!(c.get(&9_999).is_some(), "the newest entry is cached");
    }

    #[test]
    fn a_large_value_fits_whatever_the_core_count() {
        // 64 MiB over 8 shards: a 4 MB plan is still cached.
        let c: BoundedCache<u32, Blob> = BoundedCache::new(64 * 1024 * 1024);
        c.insert(1, Blob(4_000_000));
        assert!(c.get(&1).is_some());
    }

    #[test]
    fn only_a_values_own_allocation_matches_and_dropped_ones_are_swept() {
        let mut m: ByAddress<u32, u8> = ByAddress::default();
        let a = std::sync::Arc::new(1);
        let b = std::sync::Arc::new(1);
        m.insert(&a, 7);
        assert_eq!((m.get(&a), m.get(&b)), (Some(7), None));
        m.insert(&b, 8);
        drop(b);
        m.sweep();
        assert_eq!(m.len(), 1, "a value of a dropped allocation is swept");
    }

    /// An entry changed in place is weighed again, what reads it sees the
    /// change, and one left empty is gone.
    #[test]
    fn updates_change_entries_in_place_and_drop_empty_ones() {
        #[derive(Clone, Default)]
        struct Parts(Vec<u64>);
        impl Weigh for Parts {
            fn weight(&self) -> u64 {
                self.0.iter().sum()
            }
        }
        let empty = |p: &Parts| p.0.is_empty();
        let c: BoundedCache<&str, Parts> = BoundedCache::new(1 << 20);
        assert_eq!(c.read(&"a", |p| p.0.len()), None);
        c.update("a", |p| p.0.push(1_000), empty);
        let n = c.update(
            "a",
            |p| {
                p.0.push(2_000);
                p.0.len()
            },
            empty,
        );
        assert_eq!(n, 2);
        assert_eq!(c.read(&"a", |p| p.0.clone()), Some(vec![1_000, 2_000]));
        assert_eq!(c.weight(), 3_000, "weighed after the change");
        c.update("a", |p| p.0.clear(), empty);
        assert_eq!(c.read(&"a", |_| ()), None, "an emptied entry is dropped");
        c.update("b", |_| (), empty);
        assert_eq!(c.read(&"b", |_| ()), None, "nothing made, nothing kept");
        assert_eq!(c.weight(), 0);
    }

    /// Values that grow in place still keep the cache within its budget:
    /// growing one makes room for it as inserting it would.
    #[test]
    fn values_grown_in_place_stay_within_the_budget() {
        #[derive(Clone, Default)]
        struct Parts(u64);
        impl Weigh for Parts {
            fn weight(&self) -> u64 {
                self.0
            }
        }
        let empty = |p: &Parts| p.0 == 0;
        let budget = 256 * 1024;
        let c: BoundedCache<u32, Parts> = BoundedCache::new(budget);
        for key in 0..64 {
            c.update(key, |p| p.0 = 64, empty);
        }
        // Each grows to a few KiB, one step at a time: far past the budget
        // if growth were only counted.
        for step in 1..=16u64 {
            for key in 0..64 {
                c.update(key, |p| p.0 = 512 * step, empty);
            }
        }
        // 64 values of 8 KiB: twice the budget, were growth only counted.
        assert!(c.weight() <= budget, "{} over {budget}", c.weight());
        let kept = (0..64).filter(|k| c.read(k, |_| ()).is_some()).count();
        assert!((16..64).contains(&kept), "{kept} of 64 kept");
    }

    #[test]
    fn entries_are_returned_until_evicted() {
        let c: BoundedCache<&str, Blob> = BoundedCache::new(1 << 20);
        c.insert("a", Blob(10));
        assert_eq!(c.get(&"a").map(|b| b.0), Some(10));
        c.insert("a", Blob(20));
        assert_eq!(c.get(&"a").map(|b| b.0), Some(20));
        assert!(c.get(&"b").is_none());
        c.remove(&"a");
        assert!(c.get(&"a").is_none());
    }
}
