//! 32-byte leaf keys and their LSB-first bit order (spec §1.1).

use alloc::string::String;
use core::cmp::Ordering;
use core::fmt;
use core::str::FromStr;

/// Number of levels below the root; leaves sit at this level.
pub const MAX_LEVEL: usize = 256;

/// A 32-byte leaf key.
///
/// Bit `d` (the branch direction at level `d`) is bit `d % 8` of byte `d / 8`,
/// least-significant bit first; 0 goes left, 1 goes right.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Key(pub [u8; 32]);

impl Key {
    /// The key's bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Bit `d` of the key: `false` means the left child at level `d`.
    ///
    /// `d` must be below 256; the tree only asks for levels it walks.
    #[inline]
    pub fn bit(&self, d: usize) -> bool {
        (self.0[d / 8] >> (d % 8)) & 1 == 1
    }

    /// The key with bit `d` set to `value`.
    #[inline]
    pub fn with_bit(mut self, d: usize, value: bool) -> Key {
        let mask = 1u8 << (d % 8);
        if value {
            self.0[d / 8] |= mask;
        } else {
            self.0[d / 8] &= !mask;
        }
        self
    }

    /// The first level at which `self` and `other` take different sides, or
    /// `None` when the keys are equal.
    #[inline]
    pub fn first_difference(&self, other: &Key) -> Option<usize> {
        self.0
            .iter()
            .zip(other.0.iter())
            .position(|(a, b)| a != b)
            .map(|i| i * 8 + (self.0[i] ^ other.0[i]).trailing_zeros() as usize)
    }

    /// Compares keys in tree order: the order of their leaves from left to
    /// right, so that the keys under any node form one contiguous run.
    #[inline]
    pub fn tree_cmp(&self, other: &Key) -> Ordering {
        match self.first_difference(other) {
            None => Ordering::Equal,
            Some(d) if self.bit(d) => Ordering::Greater,
            Some(_) => Ordering::Less,
        }
    }

    /// Bits `0..level` from `path`, bits `level..256` from `self`.
    ///
    /// A node's hash commits only to the key bits at and below its level; the
    /// bits above come from its position. Stores share one row between equal
    /// subtrees at different positions, so the tree rebuilds a compacted
    /// leaf's full key from the path it walked instead of trusting the stored
    /// high bits (spec §9.1 B3-CL).
    pub fn under_path(&self, path: &Key, level: usize) -> Key {
        let mut out = self.0;
        let whole = level / 8;
        out[..whole].copy_from_slice(&path.0[..whole]);
        let rem = level % 8;
        if rem != 0 {
            let low = (1u8 << rem) - 1;
            out[whole] = (path.0[whole] & low) | (self.0[whole] & !low);
        }
        Key(out)
    }

    /// Lower-case hex.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl From<[u8; 32]> for Key {
    fn from(bytes: [u8; 32]) -> Self {
        Key(bytes)
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({})", self.to_hex())
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// Keys order as the tree holds them ([`Key::tree_cmp`]: by bit 0, then
/// bit 1, ...), so a sorted map of keys iterates in tree order.
impl Ord for Key {
    fn cmp(&self, other: &Key) -> Ordering {
        self.tree_cmp(other)
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Key) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Why a hex string is not a key ([`Key`]'s [`FromStr`]).
#[derive(Debug, Clone, PartialEq)]
pub enum KeyParseError {
    /// Not valid hex.
    Hex(hex::FromHexError),
    /// Valid hex of the wrong length.
    Length(usize),
}

impl From<hex::FromHexError> for KeyParseError {
    fn from(e: hex::FromHexError) -> Self {
        KeyParseError::Hex(e)
    }
}

impl fmt::Display for KeyParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyParseError::Hex(e) => write!(f, "key is not valid hex: {e}"),
            KeyParseError::Length(n) => write!(f, "key must be 32 bytes, got {n}"),
        }
    }
}

/// Written out rather than derived: `hex`'s error is a
/// [`core::error::Error`] (and so a source) only with `hex`'s `std`
/// feature, which this crate's `std` feature turns on.
impl core::error::Error for KeyParseError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            #[cfg(feature = "std")]
            KeyParseError::Hex(e) => Some(e),
            _ => None,
        }
    }
}

impl FromStr for Key {
    type Err = KeyParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bytes = hex::decode(s)?;
        let arr: [u8; 32] = bytes
            .as_slice()
            .try_into()
            .map_err(|_| KeyParseError::Length(bytes.len()))?;
        Ok(Key(arr))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bit_order_is_lsb_first() {
        let mut k = [0u8; 32];
        k[0] = 1;
        assert!(Key(k).bit(0));
        let mut k2 = [0u8; 32];
        k2[31] = 0x80;
        assert!(Key(k2).bit(255));
        assert_eq!(Key(k2).first_difference(&Key::default()), Some(255));
    }

    #[test]
    fn tree_order_groups_subtrees() {
        let a = Key::default();
        let b = Key::default().with_bit(0, true);
        let c = Key::default().with_bit(1, true);
        // a (bit0=0,bit1=0) < c (bit0=0,bit1=1) < b (bit0=1)
        assert_eq!(a.tree_cmp(&c), Ordering::Less);
        assert_eq!(c.tree_cmp(&b), Ordering::Less);
    }

    #[test]
    fn under_path_mixes_bits() {
        let path = Key([0xff; 32]);
        let k = Key([0; 32]);
        let m = k.under_path(&path, 12);
        assert_eq!(m.0[0], 0xff);
        assert_eq!(m.0[1], 0x0f);
        assert_eq!(m.0[2], 0);
    }
}
