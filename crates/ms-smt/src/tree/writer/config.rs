//! How a writer forms its groups ([`WriterConfig`]) and what it counts
//! ([`WriterStats`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How a [`Writer`](crate::Writer) or [`ForestWriter`](crate::ForestWriter)
/// forms its groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterConfig {
    /// Leaves at most in one group (default 8,192). A submission larger
    /// than this is never split: it forms a group of its own.
    pub max_group_leaves: usize,
    /// How long the writer waits for more submissions once it has one
    /// (default zero: a group is whatever is queued when the previous
    /// commit ends, so a lone submitter pays no added latency).
    pub max_wait: Duration,
    /// Submissions queued at most (default 16,384).
    /// [`Writer::submit`](crate::Writer::submit) waits while the queue is
    /// full; [`Writer::try_submit`](crate::Writer::try_submit) refuses.
    pub queue_bound: usize,
    /// How long a group waits, at most, for a store that went out of reach
    /// ([`StoreError::is_transient`](crate::store::StoreError::is_transient):
    /// a broken connection, a failover to a new primary) before it answers
    /// (default 30 s). A group whose commit failed so is settled by
    /// reading the roots once the store answers: landed, it is
    /// acknowledged; not applied, it is written again; neither, or no
    /// answer within the wait, [`SubmitError::Indeterminate`](crate::SubmitError::Indeterminate).
    /// A group that could not be read or planned meanwhile is written once
    /// the store answers, or fails with the store's error at the end of the
    /// wait.
    pub recovery_wait: Duration,
}

/// Default [`WriterConfig::max_group_leaves`].
pub const DEFAULT_MAX_GROUP_LEAVES: usize = 8_192;
/// Default [`WriterConfig::queue_bound`].
pub const DEFAULT_QUEUE_BOUND: usize = 16_384;
/// Default [`WriterConfig::recovery_wait`].
pub const DEFAULT_RECOVERY_WAIT: Duration = Duration::from_secs(30);

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            max_group_leaves: DEFAULT_MAX_GROUP_LEAVES,
            max_wait: Duration::ZERO,
            queue_bound: DEFAULT_QUEUE_BOUND,
            recovery_wait: DEFAULT_RECOVERY_WAIT,
        }
    }
}

/// Counts of what a writer did since it started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Groups written (each one descent and at most one commit).
    pub groups: u64,
    /// Submissions acknowledged.
    pub acknowledged: u64,
    /// Leaves in acknowledged submissions.
    pub leaves: u64,
    /// Submissions rejected alone
    /// ([`SubmitError::Rejected`](crate::SubmitError::Rejected)).
    pub rejected: u64,
    /// Submissions failed with their group.
    pub failed: u64,
    /// Submissions dropped by their submitter before their group sealed.
    pub abandoned: u64,
    /// Commits lost to another writer's (retried).
    pub lost_races: u64,
    /// Times a group waited for a store out of reach
    /// ([`WriterConfig::recovery_wait`]) and found it again.
    pub recovered: u64,
    /// Groups committed on a plan made while the previous group's commit
    /// was in flight (pipelined).
    pub planned_ahead: u64,
    /// Time spent reading and planning groups (the read phase, the
    /// admission and the descent).
    pub planning: Duration,
    /// Time groups' commits took, from their start to their end.
    pub committing: Duration,
    /// Time the writer had a planned group ready and waited for the
    /// previous group's commit to end (where commits, not planning, are
    /// the bottleneck).
    pub waiting: Duration,
    /// The largest group, in leaves.
    pub largest_group: u64,
    /// Trees written by the groups, summed (each group counts every tree
    /// its commit wrote, parents included): `trees / groups` is the mean
    /// number of trees per commit.
    pub trees: u64,
    /// Groups by size: entry `i` counts groups of `2^i ..= 2^(i+1) - 1`
    /// leaves (the last entry: 32,768 and more).
    pub group_sizes: [u64; 16],
}

/// The live counters behind [`WriterStats`].
#[derive(Default)]
pub(super) struct Counters {
    pub(super) groups: AtomicU64,
    pub(super) acknowledged: AtomicU64,
    pub(super) leaves: AtomicU64,
    pub(super) rejected: AtomicU64,
    pub(super) failed: AtomicU64,
    pub(super) abandoned: AtomicU64,
    pub(super) lost_races: AtomicU64,
    pub(super) recovered: AtomicU64,
    pub(super) planned_ahead: AtomicU64,
    pub(super) planning: AtomicU64,
    pub(super) committing: AtomicU64,
    pub(super) waiting: AtomicU64,
    pub(super) largest_group: AtomicU64,
    pub(super) trees: AtomicU64,
    pub(super) group_sizes: [AtomicU64; 16],
}

impl Counters {
    pub(super) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Adds the time since `start` to `counter`, in microseconds.
    pub(super) fn time(counter: &AtomicU64, start: Instant) {
        Self::add_time(counter, start.elapsed());
    }

    /// Adds `took` to `counter`, in microseconds.
    pub(super) fn add_time(counter: &AtomicU64, took: Duration) {
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        counter.fetch_add(micros, Ordering::Relaxed);
    }

    /// One group of `leaves` leaves over `trees` trees.
    pub(super) fn group(&self, leaves: usize, trees: usize) {
        let leaves = leaves as u64;
        Self::add(&self.groups, 1);
        Self::add(&self.trees, trees as u64);
        self.largest_group.fetch_max(leaves, Ordering::Relaxed);
        let bucket = (leaves.max(1).ilog2() as usize).min(self.group_sizes.len() - 1);
        Self::add(&self.group_sizes[bucket], 1);
    }

    pub(super) fn snapshot(&self) -> WriterStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        WriterStats {
            groups: get(&self.groups),
            acknowledged: get(&self.acknowledged),
            leaves: get(&self.leaves),
            rejected: get(&self.rejected),
            failed: get(&self.failed),
            abandoned: get(&self.abandoned),
            lost_races: get(&self.lost_races),
            recovered: get(&self.recovered),
            planned_ahead: get(&self.planned_ahead),
            planning: Duration::from_micros(get(&self.planning)),
            committing: Duration::from_micros(get(&self.committing)),
            waiting: Duration::from_micros(get(&self.waiting)),
            largest_group: get(&self.largest_group),
            trees: get(&self.trees),
            group_sizes: std::array::from_fn(|i| get(&self.group_sizes[i])),
        }
    }
}
