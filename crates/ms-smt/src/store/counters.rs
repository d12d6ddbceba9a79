//! Store-operation counters, so tests and benches can assert round trips.

use std::sync::atomic::{AtomicU64, Ordering};

/// Live counters a store bumps as it works.
#[derive(Debug, Default)]
pub struct Counters {
    round_trips: AtomicU64,
    statements: AtomicU64,
    nodes_read: AtomicU64,
    nodes_written: AtomicU64,
    conflicts: AtomicU64,
}

/// A snapshot of a store's counters. Subtract two snapshots to measure one
/// operation.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StoreStats {
    /// Calls that waited on the store: queries, or whole transactions.
    pub round_trips: u64,
    /// SQL statements executed (equal to round trips for the memory store).
    pub statements: u64,
    /// Nodes returned by fetches.
    pub nodes_read: u64,
    /// Net node-row changes applied by commits.
    pub nodes_written: u64,
    /// Node lookups answered from the handle's
    /// [`RecentNodes`](super::RecentNodes) without asking the store.
    pub nodes_remembered: u64,
    /// Commits refused because another writer had moved the root (the
    /// tree then re-reads and retries).
    pub conflicts: u64,
}

impl StoreStats {
    /// Counter differences `self - earlier`.
    pub fn since(&self, earlier: &StoreStats) -> StoreStats {
        StoreStats {
            round_trips: self.round_trips.saturating_sub(earlier.round_trips),
            statements: self.statements.saturating_sub(earlier.statements),
            nodes_read: self.nodes_read.saturating_sub(earlier.nodes_read),
            nodes_written: self.nodes_written.saturating_sub(earlier.nodes_written),
            nodes_remembered: self
                .nodes_remembered
                .saturating_sub(earlier.nodes_remembered),
            conflicts: self.conflicts.saturating_sub(earlier.conflicts),
        }
    }
}

impl Counters {
    /// Records one round trip made of `statements` statements.
    pub fn round_trip(&self, statements: u64) {
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        self.statements.fetch_add(statements, Ordering::Relaxed);
    }

    /// Records nodes returned by a fetch.
    pub fn read(&self, nodes: u64) {
        self.nodes_read.fetch_add(nodes, Ordering::Relaxed);
    }

    /// Records node rows changed by a commit.
    pub fn written(&self, nodes: u64) {
        self.nodes_written.fetch_add(nodes, Ordering::Relaxed);
    }

    /// Records a commit refused because the root had moved.
    pub fn conflict(&self) {
        self.conflicts.fetch_add(1, Ordering::Relaxed);
    }

    /// The current values, with the hits of `recent` (if the handle has
    /// one) as [`StoreStats::nodes_remembered`].
    pub fn snapshot_with(&self, recent: &super::RecentNodes) -> StoreStats {
        StoreStats {
            nodes_remembered: recent.hits(),
            ..self.snapshot()
        }
    }

    /// The current values.
    pub fn snapshot(&self) -> StoreStats {
        StoreStats {
            nodes_remembered: 0,
            round_trips: self.round_trips.load(Ordering::Relaxed),
            statements: self.statements.load(Ordering::Relaxed),
            nodes_read: self.nodes_read.load(Ordering::Relaxed),
            nodes_written: self.nodes_written.load(Ordering::Relaxed),
            conflicts: self.conflicts.load(Ordering::Relaxed),
        }
    }
}
