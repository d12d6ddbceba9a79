//! Proptest recipes for keys and leaves, shared by the property suites:
//! keys fully random or a few bits away from an earlier key (long shared
//! prefixes and suffixes), leaves deleted, shared between keys, or fresh.

use ms_smt::Key;
use proptest::collection::vec;
use proptest::prelude::*;

/// A key recipe: fully random, or a few bits of an earlier key (or the
/// case's base key) flipped, so keys share long prefixes and suffixes.
#[derive(Clone, Debug)]
pub enum KeyR {
    Fresh([u8; 32]),
    Near(usize, Vec<usize>),
}

/// A leaf recipe: delete, one of the case's shared leaves (equal leaves at
/// several keys), or a new leaf.
#[derive(Clone, Debug)]
pub enum LeafR {
    Empty,
    Pooled(usize),
    Fresh(Vec<u8>, u64),
}

/// Bit positions to flip: favours bit 0 (the root's split), bit 255 (the
/// last split), the first and last bytes and each byte's top bit.
pub fn bit_pos() -> impl Strategy<Value = usize> {
    prop_oneof![
        Just(0usize),
        Just(255usize),
        0usize..8,
        248usize..256,
        (0usize..32).prop_map(|b| b * 8 + 7),
        0usize..256,
    ]
}

/// Key recipes flipping 1-3 bits drawn from [`bit_pos`].
pub fn key_r() -> impl Strategy<Value = KeyR> {
    key_r_with(bit_pos())
}

/// Key recipes flipping 1-3 bits drawn from `bits`: one fresh key for three
/// near ones.
pub fn key_r_with(bits: impl Strategy<Value = usize>) -> impl Strategy<Value = KeyR> {
    prop_oneof![
        1 => any::<[u8; 32]>().prop_map(KeyR::Fresh),
        3 => (any::<usize>(), vec(bits, 1..=3)).prop_map(|(i, b)| KeyR::Near(i, b)),
    ]
}

/// `key` with the given bits (tree order, LSB first) flipped.
pub fn flip(mut key: Key, bits: &[usize]) -> Key {
    for &b in bits {
        key.0[b / 8] ^= 1 << (b % 8);
    }
    key
}

/// The keys of `recipes`, in order: a near key flips bits of an earlier
/// one (or of `base` for the first).
pub fn materialize_keys(base: [u8; 32], recipes: &[KeyR]) -> Vec<Key> {
    let mut out: Vec<Key> = Vec::with_capacity(recipes.len());
    for r in recipes {
        let key = match r {
            KeyR::Fresh(bytes) => Key(*bytes),
            KeyR::Near(i, bits) => {
                let from = if out.is_empty() {
                    Key(base)
                } else {
                    out[i % out.len()]
                };
                flip(from, bits)
            }
        };
        out.push(key);
    }
    out
}
