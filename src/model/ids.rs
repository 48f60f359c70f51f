//! Hash maps keyed by message and call ids. Ids come from callers, so the
//! hash is seeded per process (no precomputed collisions). It is one-shot
//! xxh3 per key rather than SipHash or a streaming hasher: these maps are
//! rebuilt on every request, and hashing thousands of short ids was a
//! visible part of a warm call.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// A per-process seeded builder of [`IdHasher`].
#[derive(Clone, Copy, Debug)]
pub struct IdHash(u64);

/// A random seed drawn once per process and never logged: for hashes of
/// caller-chosen input (id maps, cache keys), so nobody can precompute
/// collisions.
pub(crate) fn process_seed() -> u64 {
    static SEED: OnceLock<u64> = OnceLock::new();
    *SEED.get_or_init(|| std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64))
}

impl Default for IdHash {
    fn default() -> Self {
        IdHash(process_seed())
    }
}

impl BuildHasher for IdHash {
    type Hasher = IdHasher;
    fn build_hasher(&self) -> IdHasher {
        IdHasher(self.0)
    }
}

/// Folds every written chunk through one-shot xxh3, chained by the state.
#[derive(Clone, Copy, Debug)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0 = xxh3_64_with_seed(bytes, self.0);
    }

    fn write_u8(&mut self, i: u8) {
        // `str`'s Hash writes a 0xff terminator after the bytes; fold it cheaply.
        self.0 = self.0.rotate_left(5) ^ u64::from(i);
    }

    fn write_usize(&mut self, i: usize) {
        self.0 = xxh3_64_with_seed(&i.to_le_bytes(), self.0);
    }
}

/// A map keyed by ids.
pub type IdMap<K, V> = HashMap<K, V, IdHash>;
/// A set of ids.
pub type IdSet<K> = HashSet<K, IdHash>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_ids_hash_apart_and_equal_ids_together() {
        let b = IdHash::default();
        assert_eq!(b.hash_one("msg-1"), b.hash_one("msg-1"));
        assert_ne!(b.hash_one("msg-1"), b.hash_one("msg-2"));
        assert_ne!(b.hash_one("ab"), b.hash_one("a"));
        let mut m: IdMap<&str, usize> = IdMap::default();
        for i in 0..1000 {
            m.insert(Box::leak(format!("id-{i}").into_boxed_str()), i);
        }
        assert_eq!(m.len(), 1000);
        assert_eq!(m.get("id-500"), Some(&500));
    }
}
