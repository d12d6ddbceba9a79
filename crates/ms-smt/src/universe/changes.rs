//! The change feed: a namespace's journal ([`JournalStore`]) paged for
//! followers, each page checked against the roots the follower knows
//! before anything of it is written.
//!
//! Two ways to check a page that takes root `A` (version `since`) to root
//! `B` (version `to`), both sound for the same reason: between the two
//! versions only the page's keys changed, so every subtree off their paths
//! is the same in both trees.
//!
//! * A follower that holds the tree at `A` ([`Tree::follow`]) reads the
//!   page's keys' paths from its own tree, recomputes the root with the
//!   page's new leaves, and writes the page only if that root is `B`: the
//!   page carries no proof, only the changes (the cheap form the HTTP
//!   federation sends by default).
//! * A holder of `A` alone ([`ProvenPage::verify`]) gets an
//!   [`UpdateProof`]: the old leaves at `A` and the siblings of the keys'
//!   paths. The leader builds it at its current root, so a page that ends
//!   before the head also names the keys changed after it (`later`) with
//!   their leaves at `to`, which the proof covers as unchanged.
//!
//! ```text
//!   follower (root A)              leader (journal: v1 v2 ... head)
//!   SyncPeer::changes_from(A) ────► version_of(A) = since
//!                          ◄─────── page: since..to, changes, root B
//!   own paths + new leaves = B ?  (else refused, nothing written)
//!   insert_many(net changes)       repeat from B while more
//! ```

use std::collections::BTreeMap;

use tracing::Span;
use tracing::field::Empty;

use crate::UpdateProof;
use crate::descent::Subtree;
use crate::error::TreeError;
use crate::key::Key;
use crate::layout::Layout;
use crate::leaf::Leaf;
use crate::node::ComputedNode;
use crate::position::Position;
use crate::proof::UpdateProofError;
use crate::store::{ChangePage, JournalStore, Writable};
use crate::tree::Tree;
use crate::tree::handle::Res;
use crate::tree::traced::{ErrorKind, Traced};
use crate::universe::peer::{SyncPeer, upserts_and_deletes};

/// Times a proven page is read again when the leader's tree moved between
/// reading the page and reading the proof.
const PROOF_ATTEMPTS: u32 = 8;

/// A page with the [`UpdateProof`] that takes its start root to its end
/// root, for verifiers that hold only a root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProvenPage {
    /// The page.
    pub page: ChangePage,
    /// The proof over the page's keys and its `later` keys, against the
    /// root at the page's start.
    pub proof: UpdateProof,
}

/// Why a page was refused. Nothing of a refused page is written.
#[derive(Debug, thiserror::Error)]
pub enum PageError {
    /// The page starts at another root than the one the follower holds.
    #[error("the page starts at root {page:?}, the follower holds {held:?}")]
    OtherStart {
        /// The root the follower holds.
        held: ComputedNode,
        /// The page's start root.
        page: ComputedNode,
    },
    /// A change lies outside the page's versions, or they are out of order.
    #[error("change {index} lies outside the page's versions or out of order")]
    Order {
        /// Its index in the page.
        index: usize,
    },
    /// A change's old leaf, or a `later` leaf, is not the leaf the root
    /// at the page's start holds for its key.
    #[error("the page's old leaf for key {key} is not the one its start root holds")]
    OldLeaf {
        /// The key.
        key: Key,
    },
    /// The proof does not fit the page's keys or the start root.
    #[error("the page's proof does not verify: {0}")]
    Proof(#[from] UpdateProofError),
    /// The page's changes lead to another root than the page's end root.
    #[error("the page's changes give root {computed:?}, not its end root {claimed:?}")]
    EndRoot {
        /// The page's end root.
        claimed: ComputedNode,
        /// What the changes give.
        computed: ComputedNode,
    },
}

impl ProvenPage {
    /// Checks the page against `from`, the root its verifier holds, and
    /// returns the page's net changes (each key once, in tree order; an
    /// empty leaf deletes) that take `from` to the page's end root.
    pub fn verify(&self, from: &ComputedNode) -> Result<Vec<(Key, Leaf)>, PageError> {
        let page = &self.page;
        check_page(page, from)?;
        let changed = first_and_last(page);
        // The proof's keys: the page's and the later ones, in tree order.
        let mut batch: BTreeMap<Key, (&Leaf, &Leaf)> = changed
            .iter()
            .map(|(key, (old, new))| (*key, (*old, *new)))
            .collect();
        for (key, leaf) in &page.later {
            batch.entry(*key).or_insert((leaf, leaf));
        }
        for ((key, (old, _)), proven) in batch.iter().zip(self.proof.old_leaves()) {
            if *old != proven {
                return Err(PageError::OldLeaf { key: *key });
            }
        }
        let items: Vec<(Key, Leaf)> = batch
            .iter()
            .map(|(key, (_, new))| (*key, (*new).clone()))
            .collect();
        let computed = self.proof.new_root(from, &items)?;
        if computed != page.to_root {
            return Err(PageError::EndRoot {
                claimed: page.to_root,
                computed,
            });
        }
        Ok(net_batch(&changed))
    }
}

/// The page starts at `from`, and its changes lie in its versions, in
/// version order.
fn check_page(page: &ChangePage, from: &ComputedNode) -> Result<(), PageError> {
    if page.from_root != *from {
        return Err(PageError::OtherStart {
            held: *from,
            page: page.from_root,
        });
    }
    let mut last = page.from_version;
    for (index, change) in page.changes.iter().enumerate() {
        let v = change.version;
        if v <= page.from_version || v > page.to_version || v < last {
            return Err(PageError::Order { index });
        }
        last = v;
    }
    Ok(())
}

/// Each key the page changes, with its first old and its last new leaf.
fn first_and_last(page: &ChangePage) -> BTreeMap<Key, (&Leaf, &Leaf)> {
    let mut out: BTreeMap<Key, (&Leaf, &Leaf)> = BTreeMap::new();
    for c in &page.changes {
        out.entry(c.key)
            .and_modify(|(_, new)| *new = &c.new)
            .or_insert((&c.old, &c.new));
    }
    out
}

/// The keys whose leaf differs from first to last, with the last.
fn net_batch(changed: &BTreeMap<Key, (&Leaf, &Leaf)>) -> Vec<(Key, Leaf)> {
    changed
        .iter()
        .filter(|(_, (old, new))| old != new)
        .map(|(key, (_, new))| (*key, (*new).clone()))
        .collect()
}

impl<S: JournalStore, L: Layout> SyncPeer for Tree<S, L> {
    type Error = TreeError<S::Error>;

    async fn children(
        &self,
        root: &ComputedNode,
        prefixes: &[Position],
    ) -> Result<Vec<[Subtree; 2]>, Self::Error> {
        self.view().children(root, prefixes).await
    }

    async fn changes_from(
        &self,
        from: &ComputedNode,
        limit: usize,
    ) -> Result<Option<ChangePage>, Self::Error> {
        match self
            .store
            .version_of(&from.hash)
            .await
            .map_err(TreeError::Store)?
        {
            Some(since) => self.changes(since, limit).await,
            None => Ok(None),
        }
    }
}

/// Why following a peer's feed stopped. What was written before is a
/// whole number of checked pages.
#[derive(Debug, thiserror::Error)]
pub enum FollowError<L: std::error::Error + 'static, P: std::error::Error + 'static> {
    /// The local tree failed.
    #[error("local tree: {0}")]
    Local(#[source] TreeError<L>),
    /// The peer failed.
    #[error("peer: {0}")]
    Peer(#[source] P),
    /// A page did not check out against the local tree; nothing of it was
    /// written.
    #[error("refused a page: {0}")]
    Refused(#[source] PageError),
    /// The local tree moved while a page was written (another writer).
    #[error("the local tree moved while a page was written")]
    LocalMoved,
}

impl<L, P> ErrorKind for FollowError<L, P>
where
    L: std::error::Error + 'static,
    P: std::error::Error + 'static,
{
    fn kind(&self) -> &'static str {
        match self {
            FollowError::Local(_) => "local",
            FollowError::Peer(_) => "peer",
            FollowError::Refused(_) => "refused",
            FollowError::LocalMoved => "local_moved",
        }
    }
}

/// What following a feed did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowReport {
    /// Pages fetched (one request each).
    pub pages: u64,
    /// Leaves written (new or replaced).
    pub upserts: u64,
    /// Leaves deleted.
    pub deletes: u64,
    /// The peer's version the local tree is at afterwards.
    pub version: u64,
    /// The local root afterwards.
    pub root: ComputedNode,
}

impl<S: JournalStore, L: Layout> Tree<S, L> {
    /// The journal's changes after version `since` (see
    /// [`JournalStore::changes`]); `Ok(None)` when the journal does not
    /// cover `since`.
    pub async fn changes(&self, since: u64, limit: usize) -> Res<Option<ChangePage>, S> {
        self.store
            .changes(since, limit)
            .await
            .map_err(TreeError::Store)
    }

    /// [`changes`](Self::changes) with the [`UpdateProof`] from the root at
    /// `since` to the root at the page's last version, for verifiers that
    /// hold only a root ([`ProvenPage::verify`]).
    pub async fn proven_changes(&self, since: u64, limit: usize) -> Res<Option<ProvenPage>, S> {
        for _ in 0..PROOF_ATTEMPTS {
            let page = self
                .store
                .changes_with_later(since, limit)
                .await
                .map_err(TreeError::Store)?;
            let Some(page) = page else {
                return Ok(None);
            };
            let changed = first_and_last(&page);
            let mut keys: Vec<Key> = changed.keys().copied().collect();
            keys.extend(page.later.iter().map(|(key, _)| *key));
            keys.sort_unstable();
            let (root, proof, _) = self.view().multi_proof(&keys).await?;
            if root != page.head_root {
                // The tree moved on after the page was read: read both again.
                continue;
            }
            let mut old: BTreeMap<Key, Leaf> = changed
                .iter()
                .map(|(key, (old, _))| (*key, (*old).clone()))
                .collect();
            for (key, leaf) in &page.later {
                old.entry(*key).or_insert_with(|| leaf.clone());
            }
            let proof = UpdateProof::new(proof, old.into_values().collect()).map_err(|_| {
                TreeError::Unsupported {
                    operation: "an update proof whose keys differ from its page's",
                }
            })?;
            return Ok(Some(ProvenPage { page, proof }));
        }
        Err(TreeError::Contention {
            attempts: PROOF_ATTEMPTS,
        })
    }
}

impl<S: Writable, L: Layout> Tree<S, L> {
    /// Brings this tree to `peer`'s head through its change feed
    /// ([`SyncPeer::changes_from`]), pages of about `limit` changes, each
    /// checked against this tree before it is written (see the module
    /// docs). `Ok(None)`, having written nothing, when the peer's journal
    /// does not cover this tree's root: a diff walk
    /// ([`sync_from`](Self::sync_from)) is then the way.
    pub async fn follow<P: SyncPeer>(
        &self,
        peer: &P,
        limit: usize,
    ) -> Result<Option<FollowReport>, FollowError<S::Error, P::Error>> {
        let span = tracing::debug_span!(
            target: "ms_smt",
            "follow",
            namespace = self.store.namespace(),
            pages = Empty,
            upserts = Empty,
            deletes = Empty,
        );
        let traced = Traced::new(span, &self.store);
        let work = async {
            let report = self.follow_pages(peer, limit, None).await?;
            if let Some(report) = &report {
                Span::current()
                    .record("pages", report.pages)
                    .record("upserts", report.upserts)
                    .record("deletes", report.deletes);
            }
            Ok(report)
        };
        traced.run(&self.store, work).await
    }

    /// [`follow`](Self::follow)'s pages, in the caller's span; with
    /// `head`, only when the peer's head is that root (else `Ok(None)`,
    /// nothing written).
    pub(crate) async fn follow_pages<P: SyncPeer>(
        &self,
        peer: &P,
        limit: usize,
        head: Option<&ComputedNode>,
    ) -> Result<Option<FollowReport>, FollowError<S::Error, P::Error>> {
        let mut root = self.root().await.map_err(FollowError::Local)?;
        let mut report = FollowReport {
            pages: 0,
            upserts: 0,
            deletes: 0,
            version: 0,
            root,
        };
        loop {
            let page = peer
                .changes_from(&root, limit)
                .await
                .map_err(FollowError::Peer)?;
            let Some(page) = page else {
                return Ok((report.pages > 0).then_some(report));
            };
            if report.pages == 0 && head.is_some_and(|h| *h != page.head_root) {
                return Ok(None);
            }
            report.pages = report.pages.saturating_add(1);
            let batch = self.check_page(&page, &root).await?;
            let (upserts, deletes) = upserts_and_deletes(&batch);
            report.upserts = report.upserts.saturating_add(upserts);
            report.deletes = report.deletes.saturating_add(deletes);
            if !batch.is_empty() {
                let written = self.insert_many(batch).await.map_err(FollowError::Local)?;
                if written != page.to_root {
                    return Err(FollowError::LocalMoved);
                }
            }
            root = page.to_root;
            report.root = root;
            report.version = page.to_version;
            if !page.has_more() {
                return Ok(Some(report));
            }
        }
    }

    /// Checks `page` against this tree at `root` from the tree's own paths
    /// (see the module docs) and returns its net changes.
    async fn check_page<E: std::error::Error + 'static>(
        &self,
        page: &ChangePage,
        root: &ComputedNode,
    ) -> Result<Vec<(Key, Leaf)>, FollowError<S::Error, E>> {
        check_page(page, root).map_err(FollowError::Refused)?;
        let changed = first_and_last(page);
        let keys: Vec<Key> = changed.keys().copied().collect();
        let (read, proof, leaves) = self
            .view()
            .multi_proof(&keys)
            .await
            .map_err(FollowError::Local)?;
        if read != *root {
            return Err(FollowError::LocalMoved);
        }
        for ((key, (old, _)), (_, held)) in changed.iter().zip(&leaves) {
            if *old != held {
                return Err(FollowError::Refused(PageError::OldLeaf { key: *key }));
            }
        }
        let held = leaves.into_iter().map(|(_, leaf)| leaf).collect();
        let local =
            UpdateProof::new(proof, held).map_err(|e| FollowError::Refused(PageError::Proof(e)))?;
        let items: Vec<(Key, Leaf)> = changed
            .iter()
            .map(|(key, (_, new))| (*key, (*new).clone()))
            .collect();
        let computed = local
            .new_root(root, &items)
            .map_err(|e| FollowError::Refused(PageError::Proof(e)))?;
        if computed != page.to_root {
            return Err(FollowError::Refused(PageError::EndRoot {
                claimed: page.to_root,
                computed,
            }));
        }
        Ok(net_batch(&changed))
    }
}
