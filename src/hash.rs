//! Hash tables keyed by text on the compaction path: summary entries,
//! words, tool-outcome lines. std's SipHash took about a twentieth of a cold
//! compaction's CPU in these tables; foldhash is several times faster on
//! short keys and, seeded at random per process, still keeps its hashes
//! unpredictable to whoever writes the text.

/// A map keyed by text (or anything hashed often).
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
/// A set of text (or anything hashed often).
pub type FastSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;
