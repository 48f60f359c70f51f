//! The per-text token count cache at the core of the hot path.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::Serialize;
use xxhash_rust::xxh3::{xxh3_128_with_seed, xxh3_64, xxh3_64_with_seed};

use super::TokenCounter;

/// Texts shorter than this are counted directly; only the empty text is.
/// Measured (`cargo bench --bench tokens -- small`): a warm hit costs 20–30 ns
/// at any size up to 128 bytes, an o200k count 75 ns at 1 byte, ~240 ns at 8,
/// ~2 µs at 64; a miss adds ~50 ns. Caching even tiny texts (tool names, ids)
/// pays as soon as a quarter of lookups hit, and agents resend every turn.
pub const MIN_CACHED_BYTES: usize = 1;

/// Default capacity: 917,504 entries (16 shards × 57,344, which is 7/8 of
/// 2^16, the hash table's maximum load, so no shard's table doubles for a
/// last few entries). Each entry holds a 16-byte hash, a 4-byte count and a
/// slot index: ~46 bytes with table and ring overhead, ~40 MiB when full. A
/// 128k-token thread of 1000 messages needs 1000–3000 entries (messages,
/// tool-call names, ids and arguments), so this keeps a few hundred such
/// threads warm per replica.
pub const DEFAULT_MAX_ENTRIES: usize = 16 * 57_344;

/// Below this many entries one shard is enough (and eviction order is exact).
const ENTRIES_PER_SHARD_MIN: usize = 4096;
const MAX_SHARDS: usize = 16;

/// Counters of a [`TokenLedger`], summed over its shards.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct LedgerStats {
    /// Counts answered from the cache.
    pub hits: u64,
    /// Counts computed and then cached.
    pub misses: u64,
    /// Entries held now.
    pub entries: u64,
    /// Entries dropped to stay within the bound.
    pub evictions: u64,
    /// Texts counted directly, never cached (see [`MIN_CACHED_BYTES`]).
    pub bypassed: u64,
}

/// A 128-bit content hash of (seed, counter name, text). Stored as two u64 to
/// keep 8-byte alignment (a u128 would pad every entry to 16).
#[derive(Clone, Copy, PartialEq, Eq)]
struct Key([u64; 2]);

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.0[0]);
    }
}

/// The key is already a uniform hash: use its low half as the table hash
/// instead of running SipHash over it again.
#[derive(Default)]
pub(crate) struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used by `Key`; fold anything else anyway.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// One shard: a CLOCK (second-chance) cache. Lookups set a reference bit;
/// eviction sweeps a hand over the ring, clearing bits, and evicts the first
/// entry not referenced since the last sweep. New entries start unreferenced,
/// so a text seen once is evicted before one that agents keep resending.
struct Shard {
    map: HashMap<Key, (u32, u32), BuildHasherDefault<PassThrough>>,
    ring: Vec<Key>,
    referenced: Vec<bool>,
    hand: usize,
    cap: usize,
    hits: u64,
    misses: u64,
    evictions: u64,
}

impl Shard {
    fn new(cap: usize) -> Self {
        Shard {
            map: HashMap::default(),
            ring: Vec::new(),
            referenced: Vec::new(),
            hand: 0,
            cap,
            hits: 0,
            misses: 0,
            evictions: 0,
        }
    }

    fn get(&mut self, key: Key) -> Option<u32> {
        match self.map.get(&key) {
            Some(&(count, slot)) => {
                self.referenced[slot as usize] = true;
                self.hits += 1;
                Some(count)
            }
            None => {
                self.misses += 1;
                None
            }
        }
    }

    fn insert(&mut self, key: Key, count: u32) {
        if self.cap == 0 {
            return;
        }
        if let Some(entry) = self.map.get_mut(&key) {
            // Another thread counted the same text meanwhile.
            entry.0 = count;
            return;
        }
        if self.ring.len() < self.cap {
            let slot = self.ring.len();
            if slot == self.ring.capacity() {
                // Double, but never past the bound.
                let more = slot.max(16).min(self.cap - slot);
                self.ring.reserve_exact(more);
                self.referenced.reserve_exact(more);
            }
            self.ring.push(key);
            self.referenced.push(false);
            self.map.insert(key, (count, slot as u32));
            return;
        }
        // Terminates within two sweeps: each step clears a bit.
        while self.referenced[self.hand] {
            self.referenced[self.hand] = false;
            self.hand = (self.hand + 1) % self.cap;
        }
        let slot = self.hand;
        self.map.remove(&self.ring[slot]);
        self.ring[slot] = key;
        self.map.insert(key, (count, slot as u32));
        self.hand = (self.hand + 1) % self.cap;
        self.evictions += 1;
    }

    fn clear(&mut self) {
        self.map = HashMap::default();
        self.ring = Vec::new();
        self.referenced = Vec::new();
        self.hand = 0;
    }
}

/// Caches per-text counts keyed by a content hash, because agents resend the
/// same thread every turn and tokenization costs ~40× the transport.
///
/// Bounded by entry count (CLOCK eviction), shared through `&self` (sharded
/// mutexes; counting happens outside any lock), and keyed by xxh3-128 of the
/// counter's name and the text, so two encodings never share entries. The hash
/// seed is random per ledger: a tenant cannot precompute a collision that would
/// hand another tenant's text a wrong count.
///
/// Tenants share the entries but not the keys: [`TokenLedger::scoped`] gives
/// a view whose seed mixes in the scope, so a hit for one tenant is a miss
/// for every other and timing reveals nothing about what another counted.
pub struct TokenLedger {
    shards: Arc<[Mutex<Shard>]>,
    seed: u64,
    max_entries: usize,
    bypassed: Arc<AtomicU64>,
}

impl TokenLedger {
    /// A ledger holding at most `max_entries` counts (0 disables caching).
    pub fn new(max_entries: usize) -> Self {
        let n = (max_entries / ENTRIES_PER_SHARD_MIN).clamp(1, MAX_SHARDS);
        let shards = (0..n)
            .map(|i| {
                let cap = max_entries / n + usize::from(i < max_entries % n);
                Mutex::new(Shard::new(cap))
            })
            .collect();
        TokenLedger {
            shards,
            seed: RandomState::new().hash_one(0x5EED_u64),
            max_entries,
            bypassed: Arc::new(AtomicU64::new(0)),
        }
    }

    /// A view of the same entries keyed for `scope` (the tenant) only.
    pub fn scoped(&self, scope: &str) -> TokenLedger {
        TokenLedger {
            shards: Arc::clone(&self.shards),
            seed: xxh3_64_with_seed(scope.as_bytes(), self.seed),
            max_entries: self.max_entries,
            bypassed: Arc::clone(&self.bypassed),
        }
    }

    /// The bound given at construction.
    pub fn max_entries(&self) -> usize {
        self.max_entries
    }

    /// Tokens of `text` under `counter`: exactly `counter.count(text)`
    /// (saturated to `u32`), computed once per distinct text while cached.
    pub fn count(&self, counter: &dyn TokenCounter, text: &str) -> u32 {
        if text.len() < MIN_CACHED_BYTES {
            self.bypassed.fetch_add(1, Ordering::Relaxed);
            return to_u32(counter.count(text));
        }
        let key = self.key(counter.name(), text);
        let shard = &self.shards[(key.0[1] % self.shards.len() as u64) as usize];
        if let Some(n) = lock(shard).get(key) {
            return n;
        }
        let n = to_u32(counter.count(text));
        lock(shard).insert(key, n);
        n
    }

    /// Hits, misses, entries, evictions and bypasses so far.
    pub fn stats(&self) -> LedgerStats {
        let mut s = LedgerStats {
            bypassed: self.bypassed.load(Ordering::Relaxed),
            ..LedgerStats::default()
        };
        for shard in self.shards.iter() {
            let g = lock(shard);
            s.hits += g.hits;
            s.misses += g.misses;
            s.evictions += g.evictions;
            s.entries += g.map.len() as u64;
        }
        s
    }

    /// Drops every entry and frees its memory. The counters in
    /// [`LedgerStats`] keep running (they are lifetime totals for metrics).
    pub fn clear(&self) {
        for shard in self.shards.iter() {
            lock(shard).clear();
        }
    }

    fn key(&self, name: &str, text: &str) -> Key {
        let seed = self.seed ^ xxh3_64(name.as_bytes());
        let h = xxh3_128_with_seed(text.as_bytes(), seed);
        Key([h as u64, (h >> 64) as u64])
    }

    /// Approximate heap bytes held (table slots, ring and reference bits).
    #[cfg(test)]
    fn heap_bytes(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let g = lock(s);
                let entry = std::mem::size_of::<(Key, (u32, u32))>() + 1;
                g.map.capacity() * entry
                    + g.ring.capacity() * std::mem::size_of::<Key>()
                    + g.referenced.capacity()
            })
            .sum()
    }
}

impl Default for TokenLedger {
    /// [`DEFAULT_MAX_ENTRIES`] entries.
    fn default() -> Self {
        TokenLedger::new(DEFAULT_MAX_ENTRIES)
    }
}

impl fmt::Debug for TokenLedger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenLedger")
            .field("max_entries", &self.max_entries)
            .field("shards", &self.shards.len())
            .field("stats", &self.stats())
            .finish()
    }
}

fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// No code that can panic runs under a shard lock, so a poisoned lock still
/// guards a consistent shard.
fn lock(m: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::{cl100k, corpus, o200k, Estimator};

    fn long(i: usize) -> String {
        format!(
            "message number {i}: {}",
            "lorem ipsum dolor sit amet ".repeat(4)
        )
    }

    #[test]
    fn scoped_views_share_capacity_but_not_entries() {
        let l = TokenLedger::new(1000);
        let (a, b) = (l.scoped("acme"), l.scoped("globex"));
        let c = o200k();
        let text = "a text both tenants send";
        let n = a.count(c.as_ref(), text);
        assert_eq!(b.count(c.as_ref(), text), n);
        // Two misses (one per scope), then a hit for each.
        assert_eq!(l.stats().misses, 2);
        a.count(c.as_ref(), text);
        l.scoped("acme").count(c.as_ref(), text);
        assert_eq!(l.stats().hits, 2);
        assert_eq!(l.stats().entries, 2);
    }

    #[test]
    fn counts_equal_counter() {
        let ledger = TokenLedger::new(10_000);
        let o = o200k();
        for m in corpus::messages(300, 1).iter().chain(&corpus::edge_cases()) {
            let want = o.count(m) as u32;
            assert_eq!(ledger.count(o.as_ref(), m), want);
            assert_eq!(ledger.count(o.as_ref(), m), want);
        }
    }

    #[test]
    fn hit_and_miss() {
        let ledger = TokenLedger::new(100);
        let o = o200k();
        let t = long(1);
        ledger.count(o.as_ref(), &t);
        assert_eq!(
            ledger.stats(),
            LedgerStats {
                misses: 1,
                entries: 1,
                ..Default::default()
            }
        );
        ledger.count(o.as_ref(), &t);
        ledger.count(o.as_ref(), &t);
        let s = ledger.stats();
        assert_eq!((s.hits, s.misses, s.entries), (2, 1, 1));
    }

    #[test]
    fn short_texts_bypass() {
        let ledger = TokenLedger::new(100);
        assert_eq!(ledger.count(o200k().as_ref(), ""), 0);
        assert_eq!(ledger.count(&Estimator::default(), ""), 0);
        let s = ledger.stats();
        assert_eq!((s.bypassed, s.entries, s.hits, s.misses), (2, 0, 0, 0));
        // Anything longer is cached, however short.
        assert_eq!(ledger.count(o200k().as_ref(), "hi"), 1);
        assert_eq!(ledger.count(o200k().as_ref(), "hi"), 1);
        let s = ledger.stats();
        assert_eq!((s.entries, s.hits, s.misses), (1, 1, 1));
    }

    #[test]
    fn names_never_share_entries() {
        let ledger = TokenLedger::new(100);
        let t = corpus::unicode(&mut corpus::Rng::new(2), 2000);
        let (o, c) = (o200k(), cl100k());
        let e = Estimator::default();
        let (no, nc, ne) = (o.count(&t), c.count(&t), e.count(&t));
        assert!(no != nc && nc != ne, "corpus must tell the encodings apart");
        for _ in 0..2 {
            assert_eq!(ledger.count(o.as_ref(), &t) as usize, no);
            assert_eq!(ledger.count(c.as_ref(), &t) as usize, nc);
            assert_eq!(ledger.count(&e, &t) as usize, ne);
        }
        let s = ledger.stats();
        assert_eq!((s.entries, s.misses, s.hits), (3, 3, 3));
    }

    #[test]
    fn bounded_with_evictions() {
        let ledger = TokenLedger::new(50);
        let o = o200k();
        for i in 0..500 {
            ledger.count(o.as_ref(), &long(i));
            assert!(ledger.stats().entries <= 50);
        }
        let s = ledger.stats();
        assert_eq!(s.entries, 50);
        assert_eq!(s.evictions, 450);
        assert_eq!(s.misses, 500);
    }

    #[test]
    fn bounded_across_shards() {
        let ledger = TokenLedger::new(20_000);
        assert_eq!(ledger.shards.len(), 4);
        let e = Estimator::default();
        for i in 0..30_000 {
            ledger.count(&e, &long(i));
        }
        let s = ledger.stats();
        assert_eq!(s.entries, 20_000);
        assert_eq!(s.evictions, 10_000);
    }

    #[test]
    fn clock_keeps_recently_used() {
        let ledger = TokenLedger::new(10);
        let o = o200k();
        let hot = long(1000);
        ledger.count(o.as_ref(), &hot);
        for i in 0..100 {
            ledger.count(o.as_ref(), &hot);
            ledger.count(o.as_ref(), &long(i));
        }
        let before = ledger.stats().misses;
        ledger.count(o.as_ref(), &hot);
        assert_eq!(ledger.stats().misses, before, "hot entry was evicted");
    }

    #[test]
    fn zero_capacity_disables_cache() {
        let ledger = TokenLedger::new(0);
        let t = long(1);
        let want = o200k().count(&t) as u32;
        assert_eq!(ledger.count(o200k().as_ref(), &t), want);
        assert_eq!(ledger.count(o200k().as_ref(), &t), want);
        let s = ledger.stats();
        assert_eq!((s.entries, s.hits, s.misses), (0, 0, 2));
    }

    #[test]
    fn clear_drops_entries_keeps_totals() {
        let ledger = TokenLedger::new(100);
        let o = o200k();
        ledger.count(o.as_ref(), &long(1));
        ledger.count(o.as_ref(), &long(1));
        ledger.clear();
        let s = ledger.stats();
        assert_eq!((s.entries, s.hits, s.misses), (0, 1, 1));
        ledger.count(o.as_ref(), &long(1));
        assert_eq!(ledger.stats().misses, 2);
    }

    #[test]
    fn concurrent_counts_agree() {
        let ledger = Arc::new(TokenLedger::new(500));
        let msgs = Arc::new(corpus::messages(400, 9));
        let want: Vec<u32> = msgs.iter().map(|m| o200k().count(m) as u32).collect();
        let want = Arc::new(want);
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let (ledger, msgs, want) = (ledger.clone(), msgs.clone(), want.clone());
                std::thread::spawn(move || {
                    let o = o200k();
                    for round in 0..3 {
                        for k in 0..msgs.len() {
                            // Different orders per thread so shards contend.
                            let i = (k * (2 * t + 1) + round) % msgs.len();
                            let got = ledger.count(o.as_ref(), &msgs[i]);
                            assert_eq!(got, want[i]);
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().expect("worker panicked");
        }
        let s = ledger.stats();
        assert!(s.entries <= 500);
        assert_eq!(s.hits + s.misses + s.bypassed, 4 * 3 * 400);
    }

    #[test]
    fn default_layout() {
        let ledger = TokenLedger::default();
        assert_eq!(ledger.max_entries(), DEFAULT_MAX_ENTRIES);
        assert_eq!(ledger.shards.len(), 16);
        for s in ledger.shards.iter() {
            assert_eq!(lock(s).cap, 57_344);
        }
    }

    #[test]
    fn memory_per_entry() {
        let n = 100_000;
        let ledger = TokenLedger::new(n);
        let e = Estimator::default();
        for i in 0..n {
            ledger.count(&e, &long(i));
        }
        let per_entry = ledger.heap_bytes() as f64 / n as f64;
        eprintln!("ledger heap: {per_entry:.1} bytes/entry at {n} entries");
        assert!(per_entry < 100.0, "{per_entry}");
    }
}
