//! Spec §1.7 worked examples, on both layouts.

use ms_smt::store::MemoryStore;
use ms_smt::{CompactedTree, ComputedNode, FullTree, Key, Layout, Leaf, Proof, Tree};

fn k0() -> Key {
    Key([0; 32])
}
fn k1() -> Key {
    let mut k = [0; 32];
    k[0] = 1;
    Key(k)
}
fn k2() -> Key {
    let mut k = [0; 32];
    k[31] = 0x80;
    Key(k)
}

/// Inserts `value` with `sum` at `key`; returns the new root.
async fn put<L: Layout>(
    tree: &Tree<MemoryStore, L>,
    key: Key,
    value: &[u8],
    sum: u64,
) -> ComputedNode {
    tree.insert(key, Leaf::new(value.to_vec(), sum))
        .await
        .unwrap()
}

/// `root` has the hash `hex` and the sum `sum`.
fn assert_root(root: &ComputedNode, hex: &str, sum: u64) {
    assert_eq!(root.hash.to_hex(), hex);
    assert_eq!(root.sum, sum);
}

/// The proof of `key`, checked to encode as `len` bytes spelling `expect`
/// in hex.
async fn proof_encoding<L: Layout>(
    tree: &Tree<MemoryStore, L>,
    key: &Key,
    len: usize,
    expect: &str,
) -> Proof {
    let proof = tree.merkle_proof(key).await.unwrap();
    let bytes = proof.to_bytes();
    assert_eq!(bytes.len(), len);
    assert_eq!(hex::encode(&bytes), expect);
    proof
}

macro_rules! both_layouts {
    ($name:ident, $body:expr) => {
        mod $name {
            use super::*;
            #[tokio::test]
            async fn full() {
                let tree = FullTree::new(MemoryStore::new());
                ($body)(tree).await;
            }
            #[tokio::test]
            async fn compacted() {
                let tree = CompactedTree::new(MemoryStore::new());
                ($body)(tree).await;
            }
        }
    };
}

both_layouts!(single_leaf_root, |tree: Tree<MemoryStore, _>| async move {
    let root = put(&tree, k0(), b"a", 1).await;
    assert_root(
        &root,
        "1688022a7c33dccbfe8f11968800b1294266d1b76f453b8e6117727406a5e867",
        1,
    );
});

both_layouts!(
    two_leaves_and_proofs,
    |tree: Tree<MemoryStore, _>| async move {
        put(&tree, k0(), b"a", 1).await;
        let root = put(&tree, k1(), b"b", 2).await;
        assert_root(
            &root,
            "b51fddce64e57828a2ca667bb7a2b73706bcd9526368fde9f50c77feb7cf09bf",
            3,
        );

        let expect = format!(
            "0001{}{}{}7f",
            "e9bc03fbfbf50fded6e228fb3365c9e7637a1c7c009876c92f5911d708eaf24d",
            "0000000000000001",
            "ff".repeat(31)
        );
        let proof = proof_encoding(&tree, &k1(), 74, &expect).await;
        assert!(proof.verify(&k1(), &Leaf::new(b"b".to_vec(), 2), &root));

        let expect = format!(
            "0002{}{}{}{}fe{}7f",
            "667e5a68a02926b58a7401f7ef7fde96c8827549cc2f3f20674370628efea8b8",
            "0000000000000001",
            "a26d7827533b8428dffaec01daa8b58e77df47928bb78708b328be23bccedee0",
            "0000000000000002",
            "ff".repeat(30)
        );
        let excl = proof_encoding(&tree, &k2(), 114, &expect).await;
        assert!(excl.verify(&k2(), &Leaf::empty(), &root));
        assert_eq!(Proof::from_bytes(&excl.to_bytes()).unwrap(), excl);
    }
);

both_layouts!(empty_tree_proof, |tree: Tree<MemoryStore, _>| async move {
    let proof = tree.merkle_proof(&k2()).await.unwrap();
    assert_eq!(
        hex::encode(proof.to_bytes()),
        format!("0000{}", "ff".repeat(32))
    );
    let root = tree.root().await.unwrap();
    assert_eq!(
        root.hash.to_hex(),
        "b1e8e8f2dc3b266452988cfe169aa73be25405eeead02ab5dd6b3c6fd0ca8d67"
    );
    assert!(proof.verify(&k2(), &Leaf::empty(), &root));
});
