//! Store equivalence (proptest): batch == sequential == final map, full ==
//! compacted, every store == memory, get_many/merkle_proofs ==
//! get/merkle_proof.
//!
//! Part of the store suite (`tests/stores_*.rs`, machinery in
//! `tests/support/suite.rs`): each scenario runs on memory, SQLite and
//! Postgres, and on the SQL stores `*_cold`, with every node read by SQL.
//! Postgres tests read `MSSMT_PG_URL` (set by `scripts/with-postgres.sh`).
//! Without it they print a SKIPPED line and pass, unless `MSSMT_REQUIRE_PG=1`.
#![cfg(all(feature = "sqlite", feature = "postgres"))]

use crate::support;

use ms_smt::store::MemoryStore;
use ms_smt::{Compacted, ComputedNode, Full, Key, Layout, LayoutKind, Leaf, Proof, Tree};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use support::model::{self, Model};
use support::recipes::{KeyR, LeafR, flip, key_r, materialize_keys};
use support::suite::*;
use support::{fail, proptest_config, run_cases, unique};

// ---------------------------------------------------------------------------
// 1. Equivalence (proptest)
// ---------------------------------------------------------------------------

/// Cases per store: SQL round trips dominate, and the full layout walks 256
/// levels per key.
const EQ_CASES: u32 = 16;

#[derive(Clone, Debug)]
struct EqCase {
    base: [u8; 32],
    keys: Vec<KeyR>,
    pool: Vec<(Vec<u8>, u64)>,
    batches: Vec<Vec<(usize, LeafR)>>,
}

fn eq_case() -> impl Strategy<Value = EqCase> {
    let leaf_r = prop_oneof![
        1 => Just(LeafR::Empty),
        2 => any::<usize>().prop_map(LeafR::Pooled),
        1 => (vec(any::<u8>(), 0..6), 0u64..1_000_000).prop_map(|(v, s)| LeafR::Fresh(v, s)),
    ];
    (
        any::<[u8; 32]>(),
        vec(key_r(), 2..=12),
        vec((vec(any::<u8>(), 0..4), 1u64..1_000), 1..=3),
        vec(vec((any::<usize>(), leaf_r), 1..=8), 1..=3),
    )
        .prop_map(|(base, keys, pool, batches)| EqCase {
            base,
            keys,
            pool,
            batches,
        })
}

impl EqCase {
    fn key_pool(&self) -> Vec<Key> {
        materialize_keys(self.base, &self.keys)
    }

    fn batches(&self) -> Vec<Vec<(Key, Leaf)>> {
        let keys = self.key_pool();
        self.batches
            .iter()
            .map(|b| {
                b.iter()
                    .map(|(i, r)| {
                        let l = match r {
                            LeafR::Empty => Leaf::empty(),
                            LeafR::Pooled(p) => {
                                let (v, s) = &self.pool[p % self.pool.len()];
                                Leaf::new(v.clone(), *s)
                            }
                            LeafR::Fresh(v, s) => Leaf::new(v.clone(), *s),
                        };
                        (keys[i % keys.len()], l)
                    })
                    .collect()
            })
            .collect()
    }

    /// Every key of the pool plus a few that were (almost surely) never written.
    fn probes(&self) -> Vec<Key> {
        let mut out = self.key_pool();
        out.push(flip(Key(self.base), &[3]));
        out.push(flip(out[0], &[255]));
        out.push(flip(out[0], &[1, 128]));
        out.sort_by_key(|k| k.0);
        out.dedup();
        out
    }
}

/// One layout: batch, sequential and final-map trees on the store agree with
/// each other, with a memory tree and with the model; reads agree both ways.
async fn equivalence_layout<S: TestStore, L: Layout>(
    base: &S,
    batches: &[Vec<(Key, Leaf)>],
    probes: &[Key],
) -> Result<(ComputedNode, Vec<Proof>), TestCaseError> {
    let lay = layout_name::<L>();
    let mem: Tree<MemoryStore, L> = Tree::new(MemoryStore::new());
    let batch_tree: Tree<S, L> = Tree::new(base.handle(&unique("eq-batch")));
    let seq_tree: Tree<S, L> = Tree::new(base.handle(&unique("eq-seq")));
    let final_tree: Tree<S, L> = Tree::new(base.handle(&unique("eq-final")));
    let mut model = Model::new();
    for b in batches {
        model::apply(&mut model, b);
        let want = model::root(&model);
        let got = batch_tree.insert_many(b.clone()).await.map_err(fail)?;
        prop_assert_eq!(Some(got), want, "{} insert_many root != model", lay);
        prop_assert_eq!(got, batch_tree.root().await.map_err(fail)?);
        mem.insert_many(b.clone()).await.map_err(fail)?;
        for (k, l) in b {
            if l.is_empty() {
                seq_tree.delete(*k).await.map_err(fail)?;
            } else {
                seq_tree.insert(*k, l.clone()).await.map_err(fail)?;
            }
        }
        prop_assert_eq!(
            seq_tree.root().await.map_err(fail)?,
            got,
            "{} sequential != batch",
            lay
        );
    }
    let final_root = final_tree
        .insert_many(model::pairs(&model))
        .await
        .map_err(fail)?;
    let root = batch_tree.root().await.map_err(fail)?;
    prop_assert_eq!(final_root, root, "{} final-map build != batch", lay);
    prop_assert_eq!(
        mem.root().await.map_err(fail)?,
        root,
        "{} memory != {}",
        lay,
        S::KIND
    );

    let want: Vec<Leaf> = probes.iter().map(|k| model::get(&model, k)).collect();
    let proofs = batch_tree.merkle_proofs(probes).await.map_err(fail)?;
    for t in [&batch_tree, &seq_tree, &final_tree] {
        prop_assert_eq!(
            &t.get_many(probes).await.map_err(fail)?,
            &want,
            "{} get_many",
            lay
        );
    }
    // The sequential tree has the most history (and no re-compaction).
    prop_assert!(
        seq_tree.merkle_proofs(probes).await.map_err(fail)? == proofs,
        "{} proofs differ between trees",
        lay
    );
    prop_assert!(
        mem.merkle_proofs(probes).await.map_err(fail)? == proofs,
        "{} proofs differ from memory",
        lay
    );
    let wrong = leaf("not in the tree", 7);
    for ((k, p), l) in probes.iter().zip(&proofs).zip(&want) {
        prop_assert!(
            p.verify(k, l, &root),
            "{} proof of {:?} does not verify",
            lay,
            k
        );
        prop_assert!(
            !p.verify(k, &wrong, &root),
            "{} proof verifies a wrong leaf",
            lay
        );
    }
    // Single-key calls agree with the batched ones (a few keys: each call on
    // a full tree is a 256-level walk).
    let singles = if L::KIND == LayoutKind::Full { 2 } else { 4 };
    for (i, k) in probes.iter().enumerate().take(singles) {
        prop_assert_eq!(
            &batch_tree.get(k).await.map_err(fail)?,
            &want[i],
            "{} get",
            lay
        );
        prop_assert!(
            batch_tree.merkle_proof(k).await.map_err(fail)? == proofs[i],
            "{} merkle_proof",
            lay
        );
    }
    for t in [&batch_tree, &seq_tree, &final_tree] {
        t.delete_all().await.map_err(fail)?;
        prop_assert_eq!(
            t.store().node_rows().await,
            0,
            "{} rows left after delete_all",
            lay
        );
        prop_assert_eq!(t.root().await.map_err(fail)?, ComputedNode::empty_root());
    }
    Ok((root, proofs))
}

async fn equivalence_case<S: TestStore>(base: &S, case: EqCase) -> Result<(), TestCaseError> {
    let batches = case.batches();
    let probes = case.probes();
    let (full_root, full_proofs) = equivalence_layout::<S, Full>(base, &batches, &probes).await?;
    let (compact_root, compact_proofs) =
        equivalence_layout::<S, Compacted>(base, &batches, &probes).await?;
    prop_assert_eq!(full_root, compact_root, "full root != compacted root");
    prop_assert!(
        full_proofs == compact_proofs,
        "full proofs != compacted proofs"
    );
    Ok(())
}

fn run_equivalence<S: TestStore>(rt: &tokio::runtime::Handle, base: S) {
    run_cases(
        "equivalence",
        S::KIND,
        proptest_config(EQ_CASES, 128),
        &eq_case(),
        |case| rt.block_on(equivalence_case(&base, case)),
    );
}

/// The equivalence property on `base`, on a blocking thread: the proptest
/// runner drives each case through the test runtime's handle.
async fn equivalence_on<S: TestStore>(base: S) {
    let rt = tokio::runtime::Handle::current();
    let run = tokio::task::spawn_blocking(move || run_equivalence(&rt, base));
    if let Err(e) = run.await {
        std::panic::resume_unwind(e.into_panic());
    }
}

on_every_store!(equivalence => equivalence_on);
