//! Batch preparation: the batch sum and what a write reads; tree order
//! and last-write-wins are ms-smt-core's.

use crate::error::PlanError;
use crate::layout::LayoutKind;
use crate::leaf::Leaf;
pub use ms_smt_core::batch::{Item, normalize, prepare, prepare_pairs, sorted_keys};

/// Whether a write of `leaves` under `kind` reads the siblings beside its
/// paths too: only a compacted delete may pull an untouched sibling up,
/// which needs the sibling itself; otherwise its hash and sum (from the
/// parent) are enough and the paths alone are read.
pub fn reads_siblings<'l>(kind: LayoutKind, mut leaves: impl Iterator<Item = &'l Leaf>) -> bool {
    kind == LayoutKind::Compacted && leaves.any(Leaf::is_empty)
}

/// Checked sum of the batch's leaves (after last-wins).
pub fn batch_sum(items: &[Item<'_>]) -> Result<u64, PlanError> {
    leaves_sum(items.iter().map(|it| it.leaf))
}

/// Checked sum of `leaves`: [`batch_sum`] of a [`normalize`]d batch, read
/// in place.
pub fn leaves_sum<'l>(leaves: impl IntoIterator<Item = &'l Leaf>) -> Result<u64, PlanError> {
    leaves.into_iter().try_fold(0u64, |acc, leaf| {
        acc.checked_add(leaf.sum())
            .ok_or(PlanError::BatchSumOverflow)
    })
}

/// The run of `items` from the first to the last non-empty leaf (deletes
/// outside it build nothing), or `None` when every item deletes.
pub fn nonempty_span<'s, 'a>(items: &'s [Item<'a>]) -> Option<&'s [Item<'a>]> {
    items.get(nonempty_range(items)?)
}

/// The positions of [`nonempty_span`] in `items`.
pub fn nonempty_range(items: &[Item<'_>]) -> Option<std::ops::RangeInclusive<usize>> {
    let first = items.iter().position(|it| !it.leaf.is_empty())?;
    let last = items.iter().rposition(|it| !it.leaf.is_empty())?;
    Some(first..=last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::Key;

    #[test]
    fn last_write_wins() {
        let k = Key([1; 32]);
        let batch = vec![
            (k, Leaf::new(b"first".to_vec(), 1)),
            (Key([2; 32]), Leaf::new(b"x".to_vec(), 5)),
            (k, Leaf::new(b"second".to_vec(), 2)),
        ];
        let items = prepare(&batch);
        assert_eq!(items.len(), 2);
        let hit = items.iter().find(|i| i.key == k).map(|i| i.leaf.value());
        assert_eq!(hit, Some(&b"second"[..]));
        assert_eq!(batch_sum(&items), Ok(7));
    }
}
