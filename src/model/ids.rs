//! Hash maps keyed by message and call ids. Ids come from callers, so the
//! hash is seeded per process (no precomputed collisions), but it is xxh3
//! rather than SipHash: these maps are rebuilt on every request and SipHash
//! over thousands of ids showed up in warm-call profiles.

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;
use std::sync::OnceLock;

use xxhash_rust::xxh3::{Xxh3, Xxh3Builder};

/// A per-process seeded xxh3 hasher builder.
#[derive(Clone, Copy)]
pub struct IdHash(Xxh3Builder);

impl std::fmt::Debug for IdHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IdHash")
    }
}

impl Default for IdHash {
    fn default() -> Self {
        static SEED: OnceLock<u64> = OnceLock::new();
        let seed = *SEED
            .get_or_init(|| std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64));
        IdHash(Xxh3Builder::new().with_seed(seed))
    }
}

impl BuildHasher for IdHash {
    type Hasher = Xxh3;
    fn build_hasher(&self) -> Xxh3 {
        self.0.build_hasher()
    }
}

/// A map keyed by ids.
pub type IdMap<K, V> = HashMap<K, V, IdHash>;
/// A set of ids.
pub type IdSet<K> = HashSet<K, IdHash>;
