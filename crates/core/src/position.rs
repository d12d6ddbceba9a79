//! Where a node sits in the tree: its level and the key bits above it.
//!
//! Hashes name a node's content; positions name its place. Position-keyed
//! stores (the SQL strata layout) file rows by position, so no row is ever
//! shared between two places and a delete can never remove a node another
//! position still uses.

use alloc::string::String;
use core::fmt;

use crate::key::{Key, MAX_LEVEL};

/// A tree position: `level` (0 = root, 256 = leaves) and the `level` key
/// bits that lead there from the root. Bits at and below `level` are zero,
/// so two positions are equal exactly when they name the same place.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Position {
    level: u16,
    path: Key,
}

impl Position {
    /// The root's position.
    pub const ROOT: Position = Position {
        level: 0,
        path: Key([0; 32]),
    };

    /// The position at `level` on `key`'s path (levels above 256 are
    /// clamped to 256).
    pub fn new(level: usize, key: &Key) -> Position {
        let level = level.min(MAX_LEVEL);
        let mut path = key.0;
        let whole = level / 8;
        if whole < 32 {
            path[whole] &= (1u8 << (level % 8)).wrapping_sub(1);
            path[whole + 1..].fill(0);
        }
        Position {
            level: level as u16,
            path: Key(path),
        }
    }

    /// The level, 0 (root) to 256 (leaves).
    pub fn level(&self) -> usize {
        usize::from(self.level)
    }

    /// The key bits leading here; bits at and below [`level`](Self::level) are zero.
    pub fn path(&self) -> &Key {
        &self.path
    }

    /// The last key under this position in tree order: its path with
    /// every bit from its level down set (the first is [`path`](Self::path)).
    pub fn last_key(&self) -> Key {
        let mut key = self.path;
        let level = self.level();
        if level < MAX_LEVEL {
            let first = level / 8;
            key.0[first] |= 0xffu8.wrapping_shl((level % 8) as u32);
            for b in key.0.iter_mut().skip(first.saturating_add(1)) {
                *b = 0xff;
            }
        }
        key
    }

    /// The child position on side `right` (this position must be above 256).
    pub fn child(&self, right: bool) -> Position {
        let level = self.level();
        debug_assert!(level < MAX_LEVEL);
        Position {
            level: self.level + 1,
            path: self.path.with_bit(level, right),
        }
    }
}

impl fmt::Debug for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bits: String = (0..self.level())
            .map(|d| if self.path.bit(d) { '1' } else { '0' })
            .collect();
        write!(f, "Position({}:{bits})", self.level)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_below_the_level_are_cleared() {
        let k = Key([0xff; 32]);
        let p = Position::new(12, &k);
        assert_eq!(p.path().0[0], 0xff);
        assert_eq!(p.path().0[1], 0x0f);
        assert!(p.path().0[2..].iter().all(|b| *b == 0));
        assert_eq!(Position::new(0, &k), Position::ROOT);
        assert_eq!(Position::new(256, &k).path(), &k);
        assert_eq!(Position::new(300, &k).level(), 256);
        assert_eq!(Position::new(11, &k).child(true), Position::new(12, &k));
        assert_eq!(
            Position::new(11, &k).child(false),
            Position::new(12, &k.with_bit(11, false))
        );
    }
}
