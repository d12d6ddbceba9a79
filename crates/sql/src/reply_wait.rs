//! How long a Postgres round trip may wait for the server's reply.
//!
//! A server that stops answering without closing its connections (its
//! processes stopped, its host frozen or cut off behind a firewall that
//! drops packets) leaves a statement waiting forever: the kernel keeps the
//! TCP session open, and neither sqlx nor Postgres bounds the wait on the
//! client's side. Every statement, `BEGIN`, `COMMIT` and `ROLLBACK` a
//! Postgres store sends is bounded by this wait instead; past it the round
//! trip fails with [`SqlStoreError::NoReply`], a transient error (the
//! coalescing writer then settles its group by reading the root back, as
//! after a cut connection), and the connection is closed. Pool checkouts
//! are bounded by the pool's own acquire timeout (30 s in sqlx).
//!
//! A value on the store handle: [`PostgresStore::with_reply_wait`]
//! (shared by the handle's clones, its [`open_namespace`] handles and the
//! stores of its transactions and snapshots; [`ReplicaSet::with_reply_wait`]
//! for a primary and its standbys), so two handles of one process may
//! wait differently. A handle without one waits
//! [`DEFAULT_POSTGRES_REPLY_WAIT`]; nothing is process-wide.
//!
//! The wait travels with the namespace state every statement of a handle
//! is sent with ([`ReplyWait`], `space.rs`), into the code generic over
//! both engines ([`Dialect::bounded_by`]).
//!
//! [`PostgresStore::with_reply_wait`]: super::SqlStore::with_reply_wait
//! [`open_namespace`]: super::SqlStore::open_namespace
//! [`ReplicaSet::with_reply_wait`]: super::ReplicaSet::with_reply_wait
//! [`Dialect::bounded_by`]: super::dialect::Dialect::bounded_by

// SQLite builds use only `Bounded`, without a bound.
#![cfg_attr(not(feature = "postgres"), allow(dead_code))]

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use super::error::{Res, SqlStoreError};
use crate::store::Counters;

/// The default bound on a Postgres reply: 120 s. Far below "forever", and
/// above the longest single statement of a large batch: one `insert_many`
/// of 10^5 leaves spends ~6 s in its statements on this project's test
/// machine, and its path walk and its write are one statement each, so a
/// batch of 10^6 in one call needs tens of seconds for one statement.
/// Lower it where a frozen primary must be noticed sooner (through
/// HAProxy the sessions are cut within seconds anyway).
pub const DEFAULT_POSTGRES_REPLY_WAIT: Duration = Duration::from_secs(120);

/// A handle's bound on a Postgres reply: its own, or the default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReplyWait {
    /// [`DEFAULT_POSTGRES_REPLY_WAIT`].
    #[default]
    Default,
    /// The handle's own (`None`: without bound).
    Own(Option<Duration>),
}

impl ReplyWait {
    /// The bound now.
    pub fn get(self) -> Option<Duration> {
        match self {
            ReplyWait::Default => Some(DEFAULT_POSTGRES_REPLY_WAIT),
            ReplyWait::Own(wait) => wait,
        }
    }
}

/// One exchange with the server (a statement, `BEGIN`, `COMMIT`,
/// `ROLLBACK`): the bound on its reply and the counters it is counted in
/// (a handle's, `NamespaceState::exchange`;
/// none for the crate's own bookkeeping, such as a migration). Every
/// statement of the stores is sent as one ([`Dialect::exchange`](crate::Dialect::exchange)),
/// so every round trip is counted where it is sent, and only there.
#[derive(Debug, Clone, Copy)]
pub struct Exchange<'a> {
    wait: ReplyWait,
    counters: Option<&'a Counters>,
}

impl Exchange<'static> {
    /// An exchange under `wait`, counted nowhere.
    pub fn uncounted(wait: ReplyWait) -> Self {
        Exchange {
            wait,
            counters: None,
        }
    }
}

impl<'a> Exchange<'a> {
    /// An exchange under `wait`, counted in `counters`.
    pub fn counted(wait: ReplyWait, counters: &'a Counters) -> Self {
        Exchange {
            wait,
            counters: Some(counters),
        }
    }

    /// The bound on its reply.
    pub fn wait(self) -> ReplyWait {
        self.wait
    }

    /// Counts it as sent: one round trip of one statement.
    pub(crate) fn sent(self) {
        if let Some(counters) = self.counters {
            counters.round_trip(1);
        }
    }
}

impl From<ReplyWait> for Exchange<'static> {
    fn from(wait: ReplyWait) -> Self {
        Exchange::uncounted(wait)
    }
}

/// `round_trip`, failing with [`SqlStoreError::NoReply`] past `wait`
/// (never, with `None`).
///
/// A future type of its own rather than an `async fn` or an opaque
/// `impl Future`: awaited inside the store's async fns, those hid the
/// round trip's lifetimes from rustc's `Send` check, and callers that
/// spawn a store operation stopped compiling ("`Send` is not general
/// enough").
pub enum Bounded<F> {
    /// Without a bound.
    Free(Pin<Box<F>>),
    /// With one.
    Timed {
        /// The round trip under its deadline.
        round_trip: Pin<Box<tokio::time::Timeout<F>>>,
        /// The bound, for the error.
        waited: Duration,
    },
}

impl<F: Future> Bounded<F> {
    /// `round_trip` bounded by `wait`.
    pub(crate) fn new(round_trip: F, wait: Option<Duration>) -> Self {
        match wait {
            None => Bounded::Free(Box::pin(round_trip)),
            Some(waited) => Bounded::Timed {
                round_trip: Box::pin(tokio::time::timeout(waited, round_trip)),
                waited,
            },
        }
    }
}

impl<F, T> Future for Bounded<F>
where
    F: Future<Output = Result<T, sqlx::Error>>,
{
    type Output = Res<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Res<T>> {
        match self.get_mut() {
            Bounded::Free(round_trip) => round_trip.as_mut().poll(cx).map(|out| Ok(out?)),
            Bounded::Timed { round_trip, waited } => {
                let waited = *waited;
                round_trip.as_mut().poll(cx).map(|out| match out {
                    Ok(done) => Ok(done?),
                    Err(_) => Err(SqlStoreError::NoReply { waited }),
                })
            }
        }
    }
}
