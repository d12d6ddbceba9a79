//! Spec §1.7 worked examples, on both layouts.

use ms_smt::store::MemoryStore;
use ms_smt::{CompactedTree, FullTree, Key, Leaf, Proof};

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

both_layouts!(
    single_leaf_root,
    |tree: ms_smt::Tree<MemoryStore, _>| async move {
        let root = tree
            .insert(k0(), Leaf::new(b"a".to_vec(), 1))
            .await
            .unwrap();
        assert_eq!(
            root.hash.to_hex(),
            "1688022a7c33dccbfe8f11968800b1294266d1b76f453b8e6117727406a5e867"
        );
        assert_eq!(root.sum, 1);
    }
);

both_layouts!(two_leaves_and_proofs, |tree: ms_smt::Tree<
    MemoryStore,
    _,
>| async move {
    tree.insert(k0(), Leaf::new(b"a".to_vec(), 1))
        .await
        .unwrap();
    let root = tree
        .insert(k1(), Leaf::new(b"b".to_vec(), 2))
        .await
        .unwrap();
    assert_eq!(
        root.hash.to_hex(),
        "b51fddce64e57828a2ca667bb7a2b73706bcd9526368fde9f50c77feb7cf09bf"
    );
    assert_eq!(root.sum, 3);

    let proof = tree.merkle_proof(&k1()).await.unwrap();
    let bytes = proof.to_bytes();
    assert_eq!(bytes.len(), 74);
    let expect = format!(
        "0001{}{}{}7f",
        "e9bc03fbfbf50fded6e228fb3365c9e7637a1c7c009876c92f5911d708eaf24d",
        "0000000000000001",
        "ff".repeat(31)
    );
    assert_eq!(hex::encode(&bytes), expect);
    assert!(proof.verify(&k1(), &Leaf::new(b"b".to_vec(), 2), &root));

    let excl = tree.merkle_proof(&k2()).await.unwrap();
    let bytes = excl.to_bytes();
    assert_eq!(bytes.len(), 114);
    let expect = format!(
        "0002{}{}{}{}fe{}7f",
        "667e5a68a02926b58a7401f7ef7fde96c8827549cc2f3f20674370628efea8b8",
        "0000000000000001",
        "a26d7827533b8428dffaec01daa8b58e77df47928bb78708b328be23bccedee0",
        "0000000000000002",
        "ff".repeat(30)
    );
    assert_eq!(hex::encode(&bytes), expect);
    assert!(excl.verify(&k2(), &Leaf::empty(), &root));
    assert_eq!(Proof::from_bytes(&bytes).unwrap(), excl);
});

both_layouts!(
    empty_tree_proof,
    |tree: ms_smt::Tree<MemoryStore, _>| async move {
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
    }
);
