//! The change feed: the journal the SQL stores keep per namespace, its
//! pages, their proofs, following a leader through it, and retention.
//!
//! * `journal_*` (SQLite, Postgres; both layouts): random rounds of
//!   inserts, replacements and deletes (one commit each); from every
//!   version seen, one page holds exactly the model's difference to the
//!   head, small pages chain version to version with the roots the rounds
//!   left, every proven page verifies from its start root and gives the
//!   model at its end, and tampered pages are refused; pruning keeps what
//!   a pin holds; `delete_all` restarts the journal.
//! * `follow_*`: a memory follower brought level with a SQLite leader in
//!   small pages, again after more rounds; a peer that alters a page is
//!   refused with nothing written; a root the leader's journal does not
//!   know gives `None`.
#![cfg(all(feature = "sqlite", feature = "postgres"))]

use crate::support;

use std::collections::BTreeMap;

use ms_smt::store::{
    ChangePage, JournalStore, MemoryStore, PinStore, Retention, TreeStore, Writable,
};
use ms_smt::{
    Compacted, ComputedNode, FollowError, Full, Key, Layout, Leaf, PageError, Position, Subtree,
    SyncError, SyncPeer, Tree,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use support::stores::{SqliteDb, pg_store};

type Model = BTreeMap<Key, Leaf>;

/// One random round against `model`: new keys, replacements and deletes.
fn round(rng: &mut StdRng, model: &Model, tag: u64) -> Vec<(Key, Leaf)> {
    let mut batch = Vec::new();
    for i in 0..rng.gen_range(1..12u64) {
        batch.push((
            support::hkey("changes", tag * 1000 + i),
            Leaf::new(format!("v{tag}.{i}").into_bytes(), rng.gen_range(1..1000)),
        ));
    }
    let keys: Vec<Key> = model.keys().copied().collect();
    for _ in 0..rng.gen_range(0..6) {
        if keys.is_empty() {
            break;
        }
        let key = keys[rng.gen_range(0..keys.len())];
        let leaf = if rng.gen_bool(0.5) {
            Leaf::empty()
        } else {
            Leaf::new(format!("r{tag}").into_bytes(), rng.gen_range(1..1000))
        };
        batch.push((key, leaf));
    }
    batch
}

fn apply(model: &mut Model, batch: &[(Key, Leaf)]) {
    for (key, leaf) in batch {
        if leaf.is_empty() {
            model.remove(key);
        } else {
            model.insert(*key, leaf.clone());
        }
    }
}

/// The keys whose leaves differ from `old` to `new`, as `ChangePage::net`
/// lists them.
fn model_diff(old: &Model, new: &Model) -> Vec<(Key, Leaf, Leaf)> {
    let mut keys: Vec<Key> = old.keys().chain(new.keys()).copied().collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter_map(|k| {
            let (a, b) = (
                old.get(&k).cloned().unwrap_or_else(Leaf::empty),
                new.get(&k).cloned().unwrap_or_else(Leaf::empty),
            );
            (a != b).then_some((k, a, b))
        })
        .collect()
}

/// A version the journal recorded, its root and the model then.
struct Seen {
    version: u64,
    root: ComputedNode,
    model: Model,
}

async fn journal_case<S, L>(store: S, seed: u64)
where
    S: JournalStore + PinStore + Writable,
    L: Layout,
{
    let mut rng = StdRng::seed_from_u64(seed);
    let tree: Tree<S, L> = Tree::new(store.clone());
    let start = store.enable_journal().await.expect("enable");
    assert_eq!(start, store.enable_journal().await.expect("enable again"));
    let mut model = Model::new();
    let mut seen = vec![Seen {
        version: start.head_version,
        root: tree.root().await.expect("root"),
        model: model.clone(),
    }];
    let mut pin_version = None;
    for r in 0..14 {
        let batch = round(&mut rng, &model, r);
        let root = tree.insert_many(batch.clone()).await.expect("insert");
        apply(&mut model, &batch);
        let state = store.journal().await.expect("journal").expect("on");
        seen.push(Seen {
            version: state.head_version,
            root,
            model: model.clone(),
        });
        if r == 4 {
            pin_version = Some(tree.pin("kept").await.expect("pin").version);
        }
    }
    let head = seen.last().expect("rounds");
    // From every version, one page: exactly the difference to the head.
    for s in &seen {
        let page = tree.changes(s.version, 100_000).await.expect("changes");
        let page = page.expect("covered");
        assert_eq!(page.from_root, s.root, "from v{}", s.version);
        assert_eq!(page.to_version, head.version);
        assert_eq!(page.to_root, head.root);
        assert!(!page.has_more() && page.later.is_empty());
        assert_eq!(
            page.net(),
            model_diff(&s.model, &head.model),
            "from v{}",
            s.version
        );
    }
    assert!(
        tree.changes(head.version + 1, 10)
            .await
            .expect("ahead")
            .is_none()
    );
    // Small pages chain version to version.
    let by_version: BTreeMap<u64, &Seen> = seen.iter().map(|s| (s.version, s)).collect();
    let mut at = seen[0].version;
    let mut pages = 0;
    let mut later_pages = 0;
    let mut total = 0;
    while at < head.version {
        let page = tree.changes(at, 7).await.expect("page").expect("covered");
        // At most the limit, unless one version alone is larger.
        let one_version = page.changes.iter().all(|c| c.version == page.to_version);
        assert!(
            page.changes.len() <= 7 || one_version,
            "{} changes",
            page.changes.len()
        );
        total += page.changes.len();
        let end = by_version[&page.to_version];
        assert_eq!(page.to_root, end.root);
        assert_eq!(page.net(), model_diff(&by_version[&at].model, &end.model));
        let proven = tree
            .proven_changes(at, 7)
            .await
            .expect("proven")
            .expect("covered");
        // The follower's page reads only its own rows; the proven one
        // adds each key changed after it with its leaf at the page's end.
        assert!(page.later.is_empty(), "a plain page read later leaves");
        let mut without_later = proven.page.clone();
        without_later.later.clear();
        assert_eq!(without_later, page);
        for (key, leaf) in &proven.page.later {
            assert!(page.changes.iter().all(|c| c.key != *key));
            let at_end = end.model.get(key).cloned().unwrap_or_else(Leaf::empty);
            assert_eq!(
                *leaf, at_end,
                "a later leaf is not its leaf at the page's end"
            );
        }
        later_pages += usize::from(!proven.page.later.is_empty());
        let batch = proven.verify(&by_version[&at].root).expect("verifies");
        let mut m = by_version[&at].model.clone();
        apply(&mut m, &batch);
        assert_eq!(m, end.model);
        tampered_pages_are_refused(&proven, &by_version[&at].root);
        at = page.to_version;
        pages += 1;
    }
    let all = tree.changes(seen[0].version, 100_000).await.expect("all");
    assert_eq!(
        total,
        all.expect("covered").changes.len(),
        "the pages hold every change"
    );
    assert!(
        pages >= total.div_ceil(7 + 16),
        "{pages} pages for {total} changes"
    );
    assert!(later_pages > 0, "no proven page carried later leaves");
    // Pruning keeps the pinned version and what follows.
    let pinned = pin_version.expect("pinned");
    let removed = store
        .prune_journal(&Retention {
            versions: Some(1),
            ..Retention::default()
        })
        .await
        .expect("prune");
    assert!(removed > 0);
    let state = store.journal().await.expect("journal").expect("on");
    assert_eq!(state.from_version, pinned);
    assert!(tree.changes(pinned, 10).await.expect("pinned").is_some());
    assert!(
        tree.changes(pinned - 1, 10)
            .await
            .expect("pruned")
            .is_none()
    );
    tree.unpin("kept").await.expect("unpin");
    store
        .prune_journal(&Retention {
            versions: Some(1),
            ..Retention::default()
        })
        .await
        .expect("prune");
    let state = store.journal().await.expect("journal").expect("on");
    assert_eq!(state.from_version, head.version - 1);
    // A wholesale clear restarts the journal.
    tree.store().delete_all().await.expect("clear");
    let state = store.journal().await.expect("journal").expect("on");
    assert_eq!(state.from_version, head.version + 1);
    assert!(tree.changes(head.version, 10).await.expect("old").is_none());
    let page = tree.changes(state.from_version, 10).await.expect("new");
    assert_eq!(page.expect("covered").to_root, ComputedNode::empty_root());
    store.disable_journal().await.expect("disable");
    assert!(store.journal().await.expect("journal").is_none());
}

fn tampered_pages_are_refused(proven: &ms_smt::ProvenPage, from: &ComputedNode) {
    let mut bad = proven.clone();
    bad.page.to_root = ComputedNode::new(ms_smt::Hash([7; 32]), bad.page.to_root.sum);
    assert!(matches!(bad.verify(from), Err(PageError::EndRoot { .. })));
    if let Some(last) = proven.page.changes.len().checked_sub(1) {
        let mut bad = proven.clone();
        let c = &mut bad.page.changes[last];
        c.new = Leaf::new(b"forged".to_vec(), c.new.sum().wrapping_add(1));
        assert!(bad.verify(from).is_err(), "forged leaf accepted");
        let mut bad = proven.clone();
        let c = &mut bad.page.changes[0];
        c.old = Leaf::new(b"forged".to_vec(), 1);
        assert!(bad.verify(from).is_err(), "forged old leaf accepted");
    }
    if !proven.page.later.is_empty() {
        let mut bad = proven.clone();
        bad.page.later.pop();
        assert!(bad.verify(from).is_err(), "dropped later leaf accepted");
    }
    let other = ComputedNode::new(ms_smt::Hash([9; 32]), from.sum);
    assert!(matches!(
        proven.verify(&other),
        Err(PageError::OtherStart { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journal_sqlite() {
    let seed = support::test_seed();
    let db = SqliteDb::open("journal").await;
    journal_case::<_, Compacted>(db.store.open_namespace("compacted"), seed).await;
    journal_case::<_, Full>(db.store.open_namespace("full"), seed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journal_postgres() {
    let Some(store) = pg_store("journal_postgres").await else {
        return;
    };
    let seed = support::test_seed();
    let ns = support::unique("journal");
    journal_case::<_, Compacted>(store.open_namespace(&format!("{ns}-c")), seed).await;
    journal_case::<_, Full>(store.open_namespace(&format!("{ns}-f")), seed).await;
}

/// A leader that alters the last change of every page it serves.
struct Forger<'a, S, L>(&'a Tree<S, L>);

impl<S: JournalStore, L: Layout> SyncPeer for Forger<'_, S, L> {
    type Error = ms_smt::TreeError<S::Error>;

    async fn children(
        &self,
        root: &ComputedNode,
        prefixes: &[Position],
    ) -> Result<Vec<[Subtree; 2]>, Self::Error> {
        self.0.children(root, prefixes).await
    }

    async fn changes_from(
        &self,
        from: &ComputedNode,
        limit: usize,
    ) -> Result<Option<ChangePage>, Self::Error> {
        let mut page = self.0.changes_from(from, limit).await?;
        if let Some(c) = page.as_mut().and_then(|p| p.changes.last_mut()) {
            c.new = Leaf::new(b"forged".to_vec(), 5);
        }
        Ok(page)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_sqlite_leader() {
    let seed = support::test_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let db = SqliteDb::open("follow").await;
    let leader: Tree<_, Compacted> = Tree::new(db.store.open_namespace("leader"));
    let start = leader.store().enable_journal().await.expect("enable");
    let follower: Tree<_, Compacted> = Tree::new(MemoryStore::new());
    let mut model = Model::new();
    for r in 0..8 {
        let batch = round(&mut rng, &model, r);
        leader.insert_many(batch.clone()).await.expect("insert");
        apply(&mut model, &batch);
    }
    let report = follower.follow(&leader, 9).await.expect("follow");
    let report = report.expect("covered");
    // As many pages as paging the leader's journal by hand gives.
    let (mut at, mut expected) = (start.from_version, 0);
    loop {
        let page = leader.changes(at, 9).await.expect("page").expect("covered");
        expected += 1;
        if !page.has_more() {
            break;
        }
        at = page.to_version;
    }
    assert_eq!(report.pages, expected);
    assert_eq!(follower.root().await.unwrap(), leader.root().await.unwrap());
    assert_eq!(report.root, leader.root().await.unwrap());
    for r in 8..12 {
        let batch = round(&mut rng, &model, r);
        leader.insert_many(batch.clone()).await.expect("insert");
        apply(&mut model, &batch);
    }
    let before = follower.root().await.unwrap();
    let refused = follower.follow(&Forger(&leader), 1_000).await;
    assert!(
        matches!(refused, Err(FollowError::Refused(_))),
        "{refused:?}"
    );
    let head = leader.root().await.unwrap();
    let refused = follower.sync_from(&Forger(&leader), &head).await;
    assert!(matches!(refused, Err(SyncError::Refused(_))), "{refused:?}");
    assert_eq!(follower.root().await.unwrap(), before, "nothing written");
    // `sync_from` takes the feed when the asked root is the peer's head:
    // no subtree fetched.
    let synced = follower.sync_from(&leader, &head).await.expect("sync");
    assert_eq!((synced.root, synced.fetched), (head, 0));
    assert!(synced.requests >= 1);
    // A peer without a feed (a pinned view of the leader, after it moved
    // on): the diff walk.
    let pin = leader.pin("earlier").await.unwrap();
    let batch = round(&mut rng, &model, 99);
    leader.insert_many(batch.clone()).await.expect("insert");
    apply(&mut model, &batch);
    let back: Tree<_, Compacted> = Tree::new(MemoryStore::new());
    let walked = back
        .sync_from(&leader.at(&pin), &pin.root)
        .await
        .expect("walk");
    assert_eq!(walked.root, pin.root);
    assert!(walked.fetched > 0);
    follower
        .follow(&leader, 1_000)
        .await
        .expect("follow")
        .expect("covered");
    assert_eq!(follower.root().await.unwrap(), leader.root().await.unwrap());
    // Up to date: one empty page.
    let again = follower.follow(&leader, 10).await.expect("follow");
    assert_eq!(again.map(|r| (r.pages, r.upserts)), Some((1, 0)));
    // A root the leader never had.
    let stranger: Tree<_, Compacted> = Tree::new(MemoryStore::new());
    stranger
        .insert(support::hkey("stranger", 0), Leaf::new(b"x".to_vec(), 1))
        .await
        .unwrap();
    assert!(
        stranger
            .follow(&leader, 10)
            .await
            .expect("follow")
            .is_none()
    );
    assert_eq!(
        TreeStore::load_root(stranger.store()).await.unwrap(),
        stranger.root().await.unwrap()
    );
}
