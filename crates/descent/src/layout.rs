//! The two tree layouts, chosen by type: every branch stored ([`Full`],
//! Go's `FullTree`) or single-leaf subtrees stored as one compacted leaf
//! ([`Compacted`], Go's `CompactedTree`). Both give the same roots and
//! proofs.

/// Which descent a tree runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LayoutKind {
    /// Every branch on every path is stored (Go's `FullTree`).
    Full,
    /// Single-leaf subtrees are stored as one compacted leaf (Go's `CompactedTree`).
    Compacted,
}

/// A tree layout, chosen by type: [`Full`] or [`Compacted`].
pub trait Layout: sealed::Sealed + Send + Sync + 'static {
    /// The layout's descent.
    const KIND: LayoutKind;
}

/// Marker for the full layout.
#[derive(Debug, Clone, Copy, Default)]
pub struct Full;
/// Marker for the compacted layout.
#[derive(Debug, Clone, Copy, Default)]
pub struct Compacted;

impl Layout for Full {
    const KIND: LayoutKind = LayoutKind::Full;
}
impl Layout for Compacted {
    const KIND: LayoutKind = LayoutKind::Compacted;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Full {}
    impl Sealed for super::Compacted {}
}
