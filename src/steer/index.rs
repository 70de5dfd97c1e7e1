//! An index over an ordered rule list, so that first-match over a thousand rules costs a few hash
//! lookups plus the rules that cannot be indexed, not a scan of all of them.
//!
//! Each rule is filed under one selector that every request it matches must satisfy exactly: its plain
//! namespace names, else its plain resource names, else its plain client names. A rule with none of
//! those (no such selector, or one with a regex, glob, `*` or `!` item) is checked for every request.

use foldhash::HashMap;

use crate::config::{Part, Selector, Selectors};

/// Which rules of an ordered list can match a request.
#[derive(Debug, Default)]
pub(crate) struct RuleIndex {
    by_namespace: HashMap<Box<str>, Vec<u32>>,
    by_resource: HashMap<Box<str>, Vec<u32>>,
    by_client: HashMap<Box<str>, Vec<u32>>,
    always: Vec<u32>,
}

/// The keys a request is looked up by.
pub(crate) struct Keys<'a> {
    pub namespace: &'a str,
    pub resource: &'a str,
    pub client: &'a str,
}

/// The plain names of a selector whose every match must be one of them, if it is such a selector.
fn plain_names<I>(
    sel: Option<&Selector<I>>,
    name: impl Fn(&I) -> Option<&str>,
) -> Option<Vec<&str>> {
    let sel = sel?;
    if !sel.exclude.is_empty() || sel.include.is_empty() {
        return None;
    }
    sel.include.iter().map(name).collect()
}

fn file_under(map: &mut HashMap<Box<str>, Vec<u32>>, names: Vec<&str>, id: u32) {
    for name in names {
        let list = map.entry(name.into()).or_default();
        if list.last() != Some(&id) {
            list.push(id);
        }
    }
}

impl RuleIndex {
    /// Indexes the rules `ids` (ascending) whose selectors `selectors(id)` gives.
    pub(super) fn build<'s>(
        ids: impl Iterator<Item = usize>,
        selectors: impl Fn(usize) -> &'s Selectors,
    ) -> RuleIndex {
        let mut index = RuleIndex::default();
        for id in ids {
            let s = selectors(id);
            let id = u32::try_from(id).unwrap_or(u32::MAX);
            if let Some(names) = plain_names(s.namespaces.as_ref(), |p| p.as_exact()) {
                file_under(&mut index.by_namespace, names, id);
            } else if let Some(names) = plain_names(s.resources.as_ref(), |p| match &p.resource {
                Part::Exact(r) => Some(r.as_str()),
                Part::Any => None,
            }) {
                file_under(&mut index.by_resource, names, id);
            } else if let Some(names) = plain_names(s.clients.as_ref(), |p| {
                (!p.name.is_empty()).then_some(p.name.as_str())
            }) {
                file_under(&mut index.by_client, names, id);
            } else {
                index.always.push(id);
            }
        }
        index
    }

    /// The rules that may match a request with these keys, in file order.
    pub(super) fn candidates(&self, keys: &Keys<'_>) -> Candidates<'_> {
        Candidates {
            lists: [
                lookup(&self.by_namespace, keys.namespace),
                lookup(&self.by_resource, keys.resource),
                lookup(&self.by_client, keys.client),
                &self.always,
            ],
        }
    }
}

fn lookup<'m>(map: &'m HashMap<Box<str>, Vec<u32>>, key: &str) -> &'m [u32] {
    if key.is_empty() || map.is_empty() {
        return &[];
    }
    map.get(key).map_or(&[], Vec::as_slice)
}

/// The merge of four ascending lists of rule ids (a rule is filed in at most one of them).
pub(crate) struct Candidates<'a> {
    lists: [&'a [u32]; 4],
}

impl Iterator for Candidates<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        let (which, _) = self
            .lists
            .iter()
            .enumerate()
            .filter_map(|(i, l)| l.first().map(|first| (i, *first)))
            .min_by_key(|(_, first)| *first)?;
        let (first, rest) = self.lists[which].split_first()?;
        self.lists[which] = rest;
        Some(*first as usize)
    }
}
