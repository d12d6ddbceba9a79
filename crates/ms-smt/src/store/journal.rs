//! The change journal: what each commit of a namespace changed (version,
//! key, old leaf, new leaf), kept so that a follower holding an older
//! version can be given exactly the changes since then.
//!
//! A namespace keeps a journal once it is switched on
//! ([`JournalStore::enable_journal`]); from then every commit writes its
//! leaf changes and its new root in the same transaction as its rows (in
//! the same statement on Postgres), so the journal never disagrees with
//! the tree. [`JournalStore::changes`] pages it in version order, whole
//! versions at a time; [`JournalStore::prune_journal`] drops what a
//! [`Retention`] no longer keeps, never a version a pin still holds.
//! Operations that replace a tree wholesale (clear, copy into) restart the
//! journal at their version: followers from before it fall back to a
//! diff walk.

use std::future::Future;
use std::time::Duration;

use crate::hash::Hash;
use crate::key::Key;
use crate::leaf::Leaf;
use crate::node::ComputedNode;
use crate::store::TreeStore;

/// One key's change in one version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The version (commit) that made it.
    pub version: u64,
    /// The key.
    pub key: Key,
    /// Its leaf before that commit (empty: absent).
    pub old: Leaf,
    /// Its leaf after it (empty: deleted).
    pub new: Leaf,
}

/// A page of the journal: every change of the versions after
/// `from_version` up to and including `to_version`, in version order (by
/// key bytes within a version).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangePage {
    /// The version the page starts after (the follower's).
    pub from_version: u64,
    /// The root at `from_version`.
    pub from_root: ComputedNode,
    /// The last version the page covers.
    pub to_version: u64,
    /// The root at `to_version`.
    pub to_root: ComputedNode,
    /// The changes, in version order.
    pub changes: Vec<Change>,
    /// The namespace's version when the page was read: more pages follow
    /// while `to_version` is below it.
    pub head_version: u64,
    /// The root at `head_version`.
    pub head_root: ComputedNode,
    /// For each key changed after `to_version` (up to the head) that the
    /// page does not change, its leaf at `to_version`, in tree order: what
    /// a proof of the page built at the head root needs besides the page
    /// (see [`ProvenPage`](crate::ProvenPage)). Read only by
    /// [`JournalStore::changes_with_later`]; empty from
    /// [`JournalStore::changes`].
    pub later: Vec<(Key, Leaf)>,
}

impl ChangePage {
    /// True when more versions follow this page.
    pub fn has_more(&self) -> bool {
        self.to_version < self.head_version
    }

    /// The page's net effect: each changed key once, in tree order, with
    /// its leaf at `from_version` and at `to_version`; keys that came back
    /// to their first leaf are left out.
    pub fn net(&self) -> Vec<(Key, Leaf, Leaf)> {
        let mut by_key: std::collections::BTreeMap<Key, (Leaf, Leaf)> = Default::default();
        for c in &self.changes {
            by_key
                .entry(c.key)
                .and_modify(|(_, new)| *new = c.new.clone())
                .or_insert_with(|| (c.old.clone(), c.new.clone()));
        }
        by_key
            .into_iter()
            .filter(|(_, (old, new))| old != new)
            .map(|(key, (old, new))| (key, old, new))
            .collect()
    }
}

/// What the journal keeps when pruned ([`JournalStore::prune_journal`]).
/// Each bound that is set drops what falls outside it; versions a pin
/// holds (and every version after the oldest pin) are always kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Retention {
    /// Keep the last this many versions.
    pub versions: Option<u64>,
    /// Keep the versions committed within this age.
    pub age: Option<Duration>,
    /// Keep at most this many change rows (whole versions, newest first).
    pub changes: Option<u64>,
}

/// Where a namespace's journal stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalState {
    /// The journal covers the versions after this one.
    pub from_version: u64,
    /// The namespace's current version.
    pub head_version: u64,
}

/// A store that keeps a change journal per namespace (the SQL stores).
pub trait JournalStore: TreeStore {
    /// Starts the journal at the current version (nothing changes if it
    /// is on already); returns where it stands.
    fn enable_journal(&self) -> impl Future<Output = Result<JournalState, Self::Error>> + Send;

    /// Stops the journal and drops what it kept.
    fn disable_journal(&self) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Where the journal stands; `None` when it is off.
    fn journal(&self) -> impl Future<Output = Result<Option<JournalState>, Self::Error>> + Send;

    /// The changes after version `since`: whole versions, about `limit`
    /// changes (a single larger version comes whole), from one snapshot.
    /// `Ok(None)` when the journal does not cover `since` (off, pruned
    /// past it, restarted after it) or `since` is ahead of the namespace.
    ///
    /// The page's [`later`](ChangePage::later) is left empty: a follower
    /// that checks pages against its own tree needs only the changes, and
    /// reading `later` costs every change between the page and the head.
    fn changes(
        &self,
        since: u64,
        limit: usize,
    ) -> impl Future<Output = Result<Option<ChangePage>, Self::Error>> + Send;

    /// [`changes`](Self::changes) with [`ChangePage::later`] read in the
    /// same snapshot: what a proof of the page built at the head root
    /// needs ([`ProvenPage`](crate::ProvenPage)). It reads every change
    /// after the page up to the head, so a page far behind the head costs
    /// as many rows as the head is ahead of it.
    fn changes_with_later(
        &self,
        since: u64,
        limit: usize,
    ) -> impl Future<Output = Result<Option<ChangePage>, Self::Error>> + Send;

    /// The newest version the journal covers whose root hash is `root`,
    /// if any (a follower that knows only its root finds its version so;
    /// the hash commits to the sum).
    fn version_of(
        &self,
        root: &Hash,
    ) -> impl Future<Output = Result<Option<u64>, Self::Error>> + Send;

    /// Drops what `retention` does not keep; returns the change rows
    /// removed.
    fn prune_journal(
        &self,
        retention: &Retention,
    ) -> impl Future<Output = Result<u64, Self::Error>> + Send;
}
