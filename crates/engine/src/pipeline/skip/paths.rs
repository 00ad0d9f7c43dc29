//! A table of values keyed by byte paths, made for the destination's index of a re-sync,
//! which holds one entry per file of the destination (millions, on the trees sprat is for).
//!
//! The paths lie end to end in one buffer, the values in one vector, and a hash table holds
//! only their 4-byte positions: per entry, the path's bytes, 8 bytes for where it ends, the
//! value, and about 5 bytes of table. A `HashMap<Vec<u8>, V>` costs the path's own
//! allocation, a 24-byte `Vec`, and the value again in every empty slot of its table (a power
//! of two, one to two times the entries): a no-op local re-sync of 1,000,000 files peaked at
//! 450 MB with one, 164 MB with this table.
//!
//! Paths are hashed with the standard library's randomly keyed SipHash: a peer's listing
//! fills this table, and paths chosen to collide must not make it slow.

use hashbrown::HashTable;
use std::hash::{BuildHasher, RandomState};

/// Values of type `V` by path.
pub(crate) struct PathTable<V> {
    hasher: RandomState,
    /// Positions in `values` (and `ends`), found by the hash of their path.
    slots: HashTable<u32>,
    /// Where each value's path ends in `paths` (it starts where the one before ends).
    ends: Vec<u64>,
    values: Vec<V>,
    paths: Vec<u8>,
}

impl<V> Default for PathTable<V> {
    fn default() -> Self {
        PathTable {
            hasher: RandomState::new(),
            slots: HashTable::new(),
            ends: Vec::new(),
            values: Vec::new(),
            paths: Vec::new(),
        }
    }
}

impl<V> PathTable<V> {
    /// The number of paths in the table.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.values.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Bytes the table holds in memory (its vectors and slots at their capacity).
    #[cfg(test)]
    pub(crate) fn footprint(&self) -> usize {
        self.slots.allocation_size()
            + self.ends.capacity() * std::mem::size_of::<u64>()
            + self.values.capacity() * std::mem::size_of::<V>()
            + self.paths.capacity()
    }

    /// The path at position `at`.
    fn path<'p>(ends: &[u64], paths: &'p [u8], at: u32) -> &'p [u8] {
        let at = at as usize;
        let start = if at == 0 { 0 } else { ends[at - 1] as usize };
        &paths[start..ends[at] as usize]
    }

    /// The position of `path` and its value, if the table has it.
    pub(crate) fn get(&self, path: &[u8]) -> Option<(u32, &V)> {
        let hash = self.hasher.hash_one(path);
        let at = *self
            .slots
            .find(hash, |&at| Self::path(&self.ends, &self.paths, at) == path)?;
        Some((at, &self.values[at as usize]))
    }

    /// Sets the value of `path`, replacing the one it had; returns its position. `None` if the
    /// table is full (4,294,967,295 paths, far more than memory holds): the path is not kept.
    pub(crate) fn insert(&mut self, path: &[u8], value: V) -> Option<u32> {
        let hash = self.hasher.hash_one(path);
        let PathTable {
            hasher,
            slots,
            ends,
            values,
            paths,
        } = self;
        if let Some(&at) = slots.find(hash, |&at| Self::path(ends, paths, at) == path) {
            values[at as usize] = value;
            return Some(at);
        }
        let at = u32::try_from(values.len())
            .ok()
            .filter(|&at| at < u32::MAX)?;
        paths.extend_from_slice(path);
        ends.push(paths.len() as u64);
        values.push(value);
        slots.insert_unique(hash, at, |&at| hasher.hash_one(Self::path(ends, paths, at)));
        Some(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_what_was_inserted_and_replaces_a_value_set_again() {
        let mut t = PathTable::default();
        assert!(t.is_empty());
        assert_eq!(t.get(b"a"), None);
        let paths: Vec<Vec<u8>> = (0..10_000u32)
            .map(|i| format!("d{}/f{i}", i % 97).into_bytes())
            .collect();
        for (i, p) in paths.iter().enumerate() {
            assert_eq!(t.insert(p, i), Some(i as u32));
        }
        // The empty path and a path that is a prefix of another are paths like any other.
        let empty = t.insert(b"", 1_000_000);
        let prefix = t.insert(b"d1", 1_000_001);
        assert_eq!(t.len(), 10_002);
        for (i, p) in paths.iter().enumerate() {
            assert_eq!(t.get(p), Some((i as u32, &i)), "{p:?}");
        }
        assert_eq!(
            t.get(b"").map(|(at, v)| (Some(at), *v)),
            Some((empty, 1_000_000))
        );
        assert_eq!(
            t.get(b"d1").map(|(at, v)| (Some(at), *v)),
            Some((prefix, 1_000_001))
        );
        assert_eq!(t.get(b"d1/"), None);
        assert_eq!(t.get(b"d1/f1x"), None);

        assert_eq!(t.insert(b"d5/f5", 7), Some(5));
        assert_eq!(t.get(b"d5/f5"), Some((5, &7)));
        assert_eq!(t.len(), 10_002, "a path set again is not added");
    }
}
