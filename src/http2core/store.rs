//! The streams one connection holds, as both engines keep them: a slab (a stream's key stays put
//! while it lives, and its handles hold the key) and an index by stream id for the frames coming
//! in. The ids a client chooses are hashed with a seed of the connection's own, as h2's store
//! hashes them, so that no client picks ids that collide.

use std::collections::HashMap;

/// The streams of one connection, by slab key and by stream id.
pub(crate) struct Store<S> {
    slab: slab::Slab<S>,
    ids: HashMap<u32, usize, foldhash::fast::RandomState>,
}

impl<S> Default for Store<S> {
    fn default() -> Self {
        Store {
            slab: slab::Slab::new(),
            ids: HashMap::default(),
        }
    }
}

impl<S> Store<S> {
    /// Holds `stream`, opened as `id`; its key.
    pub(crate) fn insert(&mut self, id: u32, stream: S) -> usize {
        let key = self.slab.insert(stream);
        self.ids.insert(id, key);
        key
    }

    /// The stream `id` names, with its key, if it is held.
    pub(crate) fn find(&mut self, id: u32) -> Option<(usize, &mut S)> {
        let key = *self.ids.get(&id)?;
        self.slab.get_mut(key).map(|s| (key, s))
    }

    /// The key of the stream `id` names, if it is held.
    pub(crate) fn key(&self, id: u32) -> Option<usize> {
        self.ids.get(&id).copied()
    }

    /// Lets go of stream `key`, opened as `id`.
    pub(crate) fn remove(&mut self, key: usize, id: u32) -> Option<S> {
        let stream = self.slab.try_remove(key)?;
        self.ids.remove(&id);
        Some(stream)
    }

    pub(crate) fn get_mut(&mut self, key: usize) -> Option<&mut S> {
        self.slab.get_mut(key)
    }

    pub(crate) fn iter(&self) -> slab::Iter<'_, S> {
        self.slab.iter()
    }

    pub(crate) fn iter_mut(&mut self) -> slab::IterMut<'_, S> {
        self.slab.iter_mut()
    }

    /// The keys of the streams held, to go through while changing them.
    pub(crate) fn keys(&self) -> Vec<usize> {
        self.slab.iter().map(|(key, _)| key).collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.slab.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.slab.is_empty()
    }

    /// With no stream left, the memory streams took is given back: a kubelet fleet holds thousands
    /// of connections idle between bursts (the allocations come back with the next burst).
    /// Whether there was any to give back.
    pub(crate) fn release_if_idle(&mut self) -> bool {
        if !self.slab.is_empty() || self.slab.capacity() == 0 {
            return false;
        }
        *self = Store::default();
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_found_by_id_until_let_go_and_memory_is_given_back_when_none_is_left() {
        let mut store = Store::default();
        let one = store.insert(1, "one");
        let three = store.insert(3, "three");
        assert_eq!(store.find(3).map(|(k, s)| (k, *s)), Some((three, "three")));
        assert_eq!(store.remove(one, 1), Some("one"));
        assert!(store.find(1).is_none() && store.key(1).is_none());
        assert!(!store.release_if_idle(), "a stream is still held");
        assert_eq!(store.remove(three, 3), Some("three"));
        assert_eq!(store.remove(three, 3), None);
        assert!(store.release_if_idle());
        assert!(!store.release_if_idle(), "nothing left to give back");
    }
}
