//! Bringing a tree to a peer's root by fetching only the subtrees that
//! differ.
//!
//! The peer answers one question, [`SyncPeer::children`]: the two children
//! of the subtree under each of some prefixes, in its tree with a given
//! root. The syncing side holds the (hash, sum) of every subtree it asks
//! about (starting from the root it was given) and checks each answer
//! against it with [`Subtree::check_children`], so a peer cannot slip in
//! anything its root does not commit to. Level by level, subtrees whose
//! hash equals the local one are dropped; the rest are asked for, until
//! each differing subtree is empty or a single leaf. Where the peer has
//! an empty or one-leaf subtree over a local compacted branch, the local
//! side splits it and looks one level further down on its next read
//! (batched with the rest), rather than listing that branch's leaves one
//! query each. Then one `insert_many` applies the differences. Cost: O(d · depth) subtrees
//! fetched for d differing leaves, in at most `depth` requests.
//!
//! ```text
//!   local                      peer (pinned root R)
//!   frontier = {root: R}
//!   loop: compare frontier with local subtrees (one read)
//!         ask children of the differing branches ──► children(R, prefixes)
//!         check each pair against its parent     ◄── [left, right] per prefix
//!   insert_many(upserts + deletes)
//! ```

use tracing::Span;
use tracing::field::Empty;

use crate::descent::Subtree;
use crate::error::TreeError;
use crate::key::{Key, MAX_LEVEL};
use crate::layout::{Layout, LayoutKind};
use crate::leaf::Leaf;
use crate::node::ComputedNode;
use crate::position::Position;
use crate::progress::ProgressOperation;
use crate::store::Writable;
use crate::tree::traced::{ErrorKind, Traced};
use crate::tree::{Tree, View};
use crate::universe::changes::{FollowError, PageError};
use crate::universe::peer::{SyncPeer, upserts_and_deletes};

/// Changes per page [`Tree::sync_from`] asks a peer's feed for.
pub const DEFAULT_FEED_PAGE: usize = 10_000;

/// Why a sync stopped. Nothing is written to the local tree unless the
/// whole exchange checked out.
#[derive(Debug, thiserror::Error)]
pub enum SyncError<L: std::error::Error + 'static, P: std::error::Error + 'static> {
    /// The local tree failed.
    #[error("local tree: {0}")]
    Local(#[source] TreeError<L>),
    /// The peer failed.
    #[error("peer: {0}")]
    Peer(#[source] P),
    /// The peer's children of `position` do not hash to the subtree the
    /// syncing side holds for it (or break the tree's shape).
    #[error("the peer's children of {position:?} do not match their parent")]
    BadChildren {
        /// The prefix asked about.
        position: Position,
    },
    /// The peer answered a different number of pairs than prefixes asked.
    #[error("asked the peer about {asked} prefixes, it answered {answered}")]
    WrongCount {
        /// Prefixes asked about.
        asked: usize,
        /// Pairs answered.
        answered: usize,
    },
    /// A page of the peer's change feed did not check out against the
    /// local tree; nothing of it was written.
    #[error("refused a page of the peer's change feed: {0}")]
    Refused(#[source] PageError),
    /// The local tree moved while a page of the peer's feed was written.
    #[error("the local tree moved while a page was written")]
    LocalMoved,
}

impl<L, P> From<FollowError<L, P>> for SyncError<L, P>
where
    L: std::error::Error + 'static,
    P: std::error::Error + 'static,
{
    fn from(e: FollowError<L, P>) -> Self {
        match e {
            FollowError::Local(e) => SyncError::Local(e),
            FollowError::Peer(e) => SyncError::Peer(e),
            FollowError::Refused(e) => SyncError::Refused(e),
            FollowError::LocalMoved => SyncError::LocalMoved,
        }
    }
}

impl<L, P> ErrorKind for SyncError<L, P>
where
    L: std::error::Error + 'static,
    P: std::error::Error + 'static,
{
    fn kind(&self) -> &'static str {
        match self {
            SyncError::Local(_) => "local",
            SyncError::Peer(_) => "peer",
            SyncError::BadChildren { .. } => "bad_children",
            SyncError::WrongCount { .. } => "wrong_count",
            SyncError::Refused(_) => "refused",
            SyncError::LocalMoved => "local_moved",
        }
    }
}

/// What a sync did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncReport {
    /// Requests sent to the peer (one per level that still differed).
    pub requests: u64,
    /// Subtrees the peer sent (two per prefix asked about): the node
    /// fetches of the exchange.
    pub fetched: u64,
    /// Reads of the local tree (one per level).
    pub local_reads: u64,
    /// Leaves written (new or replaced).
    pub upserts: u64,
    /// Leaves deleted.
    pub deletes: u64,
    /// The local root afterwards.
    pub root: ComputedNode,
}

impl<S: Writable, L: Layout> Tree<S, L> {
    /// Makes this tree equal to `peer`'s tree with root `root`: through the
    /// peer's change feed when its journal covers this tree's root and its
    /// head is `root` ([`follow`](Self::follow), pages of
    /// [`DEFAULT_FEED_PAGE`] changes, each checked against this tree before
    /// it is written), else by fetching only the subtrees that differ (see
    /// the module docs). Returns what it did; the local root equals `root`
    /// afterwards unless other writers changed this tree meanwhile.
    pub async fn sync_from<P: SyncPeer>(
        &self,
        peer: &P,
        root: &ComputedNode,
    ) -> Result<SyncReport, SyncError<S::Error, P::Error>> {
        let span = tracing::debug_span!(
            target: "ms_smt",
            "sync_from",
            namespace = self.store.namespace(),
            requests = Empty,
            fetched = Empty,
            upserts = Empty,
            deletes = Empty,
        );
        let traced = Traced::new(span, &self.store);
        traced.run(&self.store, self.sync(peer, root)).await
    }

    /// [`sync_from`](Self::sync_from), inside its span: the feed, else the
    /// diff walk.
    async fn sync<P: SyncPeer>(
        &self,
        peer: &P,
        root: &ComputedNode,
    ) -> Result<SyncReport, SyncError<S::Error, P::Error>> {
        let report = match self
            .follow_pages(peer, DEFAULT_FEED_PAGE, Some(root))
            .await?
        {
            Some(followed) => SyncReport {
                requests: followed.pages,
                fetched: 0,
                local_reads: followed.pages,
                upserts: followed.upserts,
                deletes: followed.deletes,
                root: followed.root,
            },
            None => self.walk(peer, root).await?,
        };
        Span::current()
            .record("requests", report.requests)
            .record("fetched", report.fetched)
            .record("upserts", report.upserts)
            .record("deletes", report.deletes);
        Ok(report)
    }

    /// The diff walk (see the module docs).
    async fn walk<P: SyncPeer>(
        &self,
        peer: &P,
        root: &ComputedNode,
    ) -> Result<SyncReport, SyncError<S::Error, P::Error>> {
        let mut fetched = self.progress.meter(ProgressOperation::Sync, None);
        let local = self.view();
        let mut report = SyncReport {
            requests: 0,
            fetched: 0,
            local_reads: 0,
            upserts: 0,
            deletes: 0,
            root: ComputedNode::empty_root(),
        };
        let mut batch: Vec<(Key, Leaf)> = Vec::new();
        let top = if *root == ComputedNode::empty_root() {
            Subtree::Empty
        } else {
            Subtree::Branch(*root)
        };
        // Each frontier entry: a position, the peer's subtree there, and
        // its (hash, sum) when the peer sent it (computed once: a leaf's
        // costs up to 256 hashes); `None` for the halves of a peer's empty
        // or one-leaf subtree split locally (see below).
        let mut frontier = vec![(Position::ROOT, top, Some(*root))];
        while !frontier.is_empty() {
            let positions: Vec<Position> = frontier.iter().map(|(p, _, _)| *p).collect();
            let mine = local.subtrees(&positions).await.map_err(SyncError::Local)?;
            report.local_reads = report.local_reads.saturating_add(1);
            let mut ask: Vec<(Position, ComputedNode)> = Vec::new();
            let mut next = Vec::new();
            for ((pos, theirs, wanted), mine) in frontier.iter().zip(mine) {
                let level = pos.level();
                let same = match (theirs, &mine) {
                    (Subtree::Empty, Subtree::Empty) => true,
                    (Subtree::Leaf { key, leaf }, Subtree::Leaf { key: k, leaf: l }) => {
                        key == k && leaf == l
                    }
                    (_, Subtree::Empty) | (Subtree::Empty, _) => false,
                    _ => wanted.is_some_and(|w| w == mine.computed(level)),
                };
                if same {
                    continue;
                }
                let keep = match theirs {
                    Subtree::Branch(c) => {
                        ask.push((*pos, *c));
                        continue;
                    }
                    Subtree::Empty => None,
                    Subtree::Leaf { key, leaf } => Some((key, leaf)),
                };
                // What the local side holds here is known without a read
                // unless it is a branch.
                let held = match &mine {
                    Subtree::Empty => false,
                    Subtree::Leaf { key, leaf } => match keep {
                        Some((k, l)) if k == key => l == leaf,
                        _ => {
                            batch.push((*key, Leaf::empty()));
                            false
                        }
                    },
                    // A compacted branch holds two or more leaves: split
                    // the peer's side here and compare both halves on the
                    // next level's read, one read for all such branches.
                    Subtree::Branch(_) if L::KIND == LayoutKind::Compacted && level < MAX_LEVEL => {
                        for right in [false, true] {
                            let half = match keep {
                                Some((key, leaf)) if key.bit(level) == right => Subtree::Leaf {
                                    key: *key,
                                    leaf: leaf.clone(),
                                },
                                _ => Subtree::Empty,
                            };
                            next.push((pos.child(right), half, None));
                        }
                        continue;
                    }
                    Subtree::Branch(_) => self
                        .drop_local(&local, pos, keep, &mut batch)
                        .await
                        .map_err(SyncError::Local)?,
                };
                if let (Some((key, leaf)), false) = (keep, held) {
                    batch.push((*key, leaf.clone()));
                }
            }
            if !ask.is_empty() {
                let prefixes: Vec<Position> = ask.iter().map(|(p, _)| *p).collect();
                let answers = peer
                    .children(root, &prefixes)
                    .await
                    .map_err(SyncError::Peer)?;
                report.requests = report.requests.saturating_add(1);
                if answers.len() != ask.len() {
                    return Err(SyncError::WrongCount {
                        asked: ask.len(),
                        answered: answers.len(),
                    });
                }
                report.fetched = report
                    .fetched
                    .saturating_add(2u64.saturating_mul(answers.len() as u64));
                fetched.set(report.fetched);
                next.reserve(answers.len().saturating_mul(2));
                for ((pos, parent), pair) in ask.into_iter().zip(answers) {
                    let Some([l, r]) = Subtree::checked_children(&pos, &parent, &pair) else {
                        return Err(SyncError::BadChildren { position: pos });
                    };
                    let [left, right] = pair;
                    next.push((pos.child(false), left, Some(l)));
                    next.push((pos.child(true), right, Some(r)));
                }
            }
            frontier = next;
        }
        (report.upserts, report.deletes) = upserts_and_deletes(&batch);
        report.root = if batch.is_empty() {
            self.root().await.map_err(SyncError::Local)?
        } else {
            self.insert_many(batch).await.map_err(SyncError::Local)?
        };
        fetched.finish();
        Ok(report)
    }

    /// Queues deletes of the local leaves under `pos`, but the key of
    /// `keep`; true when the local tree already holds `keep` exactly.
    async fn drop_local(
        &self,
        local: &View<'_, S, L>,
        pos: &Position,
        keep: Option<(&Key, &Leaf)>,
        batch: &mut Vec<(Key, Leaf)>,
    ) -> Result<bool, TreeError<S::Error>> {
        let range = *pos.path()..=pos.last_key();
        let mut leaves = local.leaves(range);
        let mut held = false;
        while let Some(entry) = leaves.next().await? {
            match keep {
                Some((key, leaf)) if *key == entry.key => held = *leaf == entry.leaf,
                _ => batch.push((entry.key, Leaf::empty())),
            }
        }
        Ok(held)
    }
}
