//! Persistent tables of a snapshot: consecutive snapshots share every part
//! that did not change, so building the next generation after a small change
//! costs the change, not the size of the tables.
//!
//! * [`IdTable`]: a vector indexed by id, stored as fixed-size chunks of
//!   [`ID_CHUNK`] entries behind `Arc`. A lookup is one extra load over a flat
//!   vector (the chunk pointer); changing an entry copies one chunk (when a
//!   published snapshot still shares it) and the chunk pointer vector.
//! * [`ShardedMap`]: a hash map split into [`MAP_SHARDS`] shards behind `Arc`,
//!   chosen by bits of the key's hash that the shard's own table does not use
//!   (hashbrown indexes buckets by the low bits and tags them by the top 7).
//!   A lookup hashes the key once. Changing an entry copies one shard.
//!
//! Both are immutable once in a [`super::Snapshot`]; the builder keeps its own
//! copy and mutates it with copy-on-write (`Arc::make_mut`), so a published
//! snapshot never changes.

use hashbrown::{DefaultHashBuilder, HashTable};
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;

/// log2 of [`ID_CHUNK`].
const ID_CHUNK_BITS: u32 = 6;
/// Entries per chunk of an [`IdTable`].
pub const ID_CHUNK: usize = 1 << ID_CHUNK_BITS;

type Chunk<T> = [Option<T>; ID_CHUNK];

/// A vector of `Option<T>` indexed by `u32` id, shared chunk-wise between
/// snapshots.
#[derive(Clone)]
pub struct IdTable<T> {
    chunks: Vec<Arc<Chunk<T>>>,
}

impl<T> Default for IdTable<T> {
    fn default() -> Self {
        IdTable { chunks: Vec::new() }
    }
}

impl<T> IdTable<T> {
    pub fn new() -> Self {
        Self::default()
    }

    /// The entry of `id`, if any.
    #[inline]
    pub fn get(&self, id: u32) -> Option<&T> {
        let chunk = self.chunks.get((id >> ID_CHUNK_BITS) as usize)?;
        // The mask keeps the index below ID_CHUNK: no bounds check, no panic.
        chunk[id as usize & (ID_CHUNK - 1)].as_ref()
    }

    /// Number of id slots (a multiple of [`ID_CHUNK`]): every id in use is
    /// below it.
    pub fn len(&self) -> usize {
        self.chunks.len() * ID_CHUNK
    }

    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// Every slot in id order: `Some` for ids in use.
    pub fn iter(&self) -> impl Iterator<Item = Option<&T>> + '_ {
        self.chunks
            .iter()
            .flat_map(|c| c.iter().map(Option::as_ref))
    }

    /// Whether the chunk holding `id` is the same allocation in both tables
    /// (then every entry of it is the same). For cheap comparisons of
    /// consecutive snapshots.
    pub fn same_chunk(&self, other: &IdTable<T>, id: u32) -> bool {
        let i = (id >> ID_CHUNK_BITS) as usize;
        match (self.chunks.get(i), other.chunks.get(i)) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl<T: Clone> IdTable<T> {
    /// Set (or with `None` clear) the entry of `id`; copies its chunk if a
    /// snapshot shares it.
    pub fn set(&mut self, id: u32, value: Option<T>) {
        let i = (id >> ID_CHUNK_BITS) as usize;
        if i >= self.chunks.len() {
            if value.is_none() {
                return;
            }
            self.chunks
                .resize_with(i + 1, || Arc::new(std::array::from_fn(|_| None)));
        }
        if let Some(chunk) = self.chunks.get_mut(i) {
            Arc::make_mut(chunk)[id as usize & (ID_CHUNK - 1)] = value;
        }
    }
}

impl<T: fmt::Debug> fmt::Debug for IdTable<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.iter().enumerate().filter_map(|(i, e)| Some((i, e?))))
            .finish()
    }
}

/// log2 of [`MAP_SHARDS`].
const MAP_SHARD_BITS: u32 = 8;
/// Shards of a [`ShardedMap`].
pub const MAP_SHARDS: usize = 1 << MAP_SHARD_BITS;
/// The shard is chosen by hash bits 40..48: above the bucket index bits of
/// any shard smaller than 2^40 buckets, below hashbrown's 7 tag bits.
const MAP_SHARD_SHIFT: u32 = 40;

type Shard<K, V> = HashTable<(K, V)>;

/// A hash map shared shard-wise between snapshots.
#[derive(Clone)]
pub struct ShardedMap<K, V> {
    hasher: DefaultHashBuilder,
    shards: Box<[Arc<Shard<K, V>>; MAP_SHARDS]>,
    len: usize,
}

impl<K, V> Default for ShardedMap<K, V> {
    fn default() -> Self {
        let empty = Arc::new(HashTable::new());
        ShardedMap {
            hasher: DefaultHashBuilder::default(),
            shards: Box::new(std::array::from_fn(|_| Arc::clone(&empty))),
            len: 0,
        }
    }
}

#[inline]
fn shard_of(hash: u64) -> usize {
    (hash >> MAP_SHARD_SHIFT) as usize & (MAP_SHARDS - 1)
}

impl<K: Hash + Eq, V> ShardedMap<K, V> {
    pub fn new() -> Self {
        Self::default()
    }

    #[inline]
    pub fn get(&self, key: &K) -> Option<&V> {
        let hash = self.hasher.hash_one(key);
        // `shard_of` is below MAP_SHARDS: the index cannot fail.
        self.shards[shard_of(hash)]
            .find(hash, |(k, _)| k == key)
            .map(|(_, v)| v)
    }

    pub fn contains_key(&self, key: &K) -> bool {
        self.get(key).is_some()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every entry, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> + '_ {
        self.shards
            .iter()
            .flat_map(|s| s.iter().map(|(k, v)| (k, v)))
    }
}

impl<K: Hash + Eq + Clone, V: Clone> ShardedMap<K, V> {
    /// Insert or replace; returns the previous value.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        let hasher = &self.hasher;
        let hash = hasher.hash_one(&key);
        let shard = Arc::make_mut(&mut self.shards[shard_of(hash)]);
        match shard.entry(hash, |(k, _)| *k == key, |(k, _)| hasher.hash_one(k)) {
            hashbrown::hash_table::Entry::Occupied(mut e) => {
                Some(std::mem::replace(&mut e.get_mut().1, value))
            }
            hashbrown::hash_table::Entry::Vacant(e) => {
                e.insert((key, value));
                self.len += 1;
                None
            }
        }
    }

    /// Remove; returns the value it had.
    pub fn remove(&mut self, key: &K) -> Option<V> {
        let hash = self.hasher.hash_one(key);
        let slot = &mut self.shards[shard_of(hash)];
        // Look first so an absent key does not copy a shared shard.
        slot.find(hash, |(k, _)| k == key)?;
        let shard = Arc::make_mut(slot);
        let ((_, v), _) = shard.find_entry(hash, |(k, _)| k == key).ok()?.remove();
        self.len -= 1;
        Some(v)
    }
}

impl<K: Hash + Eq + Clone, V: Clone> FromIterator<(K, V)> for ShardedMap<K, V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut map = ShardedMap::new();
        for (k, v) in iter {
            map.insert(k, v);
        }
        map
    }
}

impl<K: fmt::Debug, V: fmt::Debug> fmt::Debug for ShardedMap<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(
                self.shards
                    .iter()
                    .flat_map(|s| s.iter().map(|(k, v)| (k, v))),
            )
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_table_copies_on_write_and_shares_the_rest() {
        let mut t: IdTable<u32> = IdTable::new();
        for id in 0..1000 {
            t.set(id, Some(id * 2));
        }
        let published = t.clone();
        t.set(5, None);
        t.set(700, Some(1));
        assert_eq!(
            published.get(5),
            Some(&10),
            "a published table never changes"
        );
        assert_eq!(published.get(700), Some(&1400));
        assert_eq!(
            (t.get(5), t.get(700), t.get(999)),
            (None, Some(&1), Some(&1998))
        );
        assert!(!t.same_chunk(&published, 5) && !t.same_chunk(&published, 700));
        assert!(t.same_chunk(&published, 300), "untouched chunks are shared");
        assert_eq!(t.get(1_000_000), None);
        assert_eq!(t.iter().flatten().count(), 999);
        assert_eq!(t.iter().nth(700), Some(Some(&1)));
    }

    #[test]
    fn sharded_map_behaves_like_a_map_and_never_changes_once_cloned() {
        let mut m: ShardedMap<u32, u32> = ShardedMap::new();
        let mut reference = std::collections::HashMap::new();
        for i in 0..5000u32 {
            let k = i.wrapping_mul(2_654_435_761) % 3000;
            if i % 3 == 0 {
                assert_eq!(m.remove(&k), reference.remove(&k));
            } else {
                assert_eq!(m.insert(k, i), reference.insert(k, i));
            }
        }
        let published = m.clone();
        let before: std::collections::HashMap<u32, u32> =
            published.iter().map(|(k, v)| (*k, *v)).collect();
        assert_eq!(before, reference);
        assert_eq!(m.len(), reference.len());
        for k in 0..3000 {
            assert_eq!(m.get(&k), reference.get(&k));
            m.remove(&k);
        }
        assert!(m.is_empty());
        let after: std::collections::HashMap<u32, u32> =
            published.iter().map(|(k, v)| (*k, *v)).collect();
        assert_eq!(after, before);
    }
}
