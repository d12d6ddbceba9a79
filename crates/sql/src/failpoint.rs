//! Test-only failpoints (cargo feature `failpoints`): named places in the
//! SQL stores' write path where a test can make the next pass fail with an
//! error or a panic, to check that a fault at any step of a commit leaves
//! the old root or the new one and never reports a batch that is not
//! durable. Without the feature the checks compile to nothing.
//!
//! Points are armed per namespace, so tests on different namespaces run in
//! parallel. The points, in commit order:
//!
//! | point | where |
//! |---|---|
//! | `begin` | the transaction is open (pool stores) |
//! | `root_checked` | the stored root was read and matched |
//! | `merged` | the rows to write are computed, nothing written |
//! | `written` | the rows are written, the root not yet (SQLite) or with them (Postgres) |
//! | `before_commit` | everything is written, COMMIT not sent (pool stores) |
//! | `after_commit` | COMMIT returned: the batch is durable (pool stores) |

#[cfg(feature = "failpoints")]
use std::sync::Mutex;

#[cfg(feature = "failpoints")]
/// What an armed point does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// The write fails with [`SqlStoreError::Injected`](crate::SqlStoreError::Injected).
    Error,
    /// The write panics.
    Panic,
}

#[cfg(feature = "failpoints")]
/// Every point, in commit order.
pub const POINTS: [&str; 6] = [
    "begin",
    "root_checked",
    "merged",
    "written",
    "before_commit",
    "after_commit",
];

#[cfg(feature = "failpoints")]
static ARMED: Mutex<Vec<(String, &'static str, Action)>> = Mutex::new(Vec::new());

#[cfg(feature = "failpoints")]
fn armed() -> std::sync::MutexGuard<'static, Vec<(String, &'static str, Action)>> {
    ARMED.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(feature = "failpoints")]
/// Arms `point` of namespace `namespace`: its next pass does `action`
/// (once; the point disarms itself).
pub fn arm(namespace: &str, point: &'static str, action: Action) {
    armed().push((namespace.to_owned(), point, action));
}

#[cfg(feature = "failpoints")]
/// Disarms every point of `namespace`.
pub fn disarm(namespace: &str) {
    armed().retain(|(ns, _, _)| ns != namespace);
}

#[cfg(feature = "failpoints")]
/// Passes `point` of `namespace`: fails or panics when it is armed.
pub(crate) fn pass(namespace: &str, point: &'static str) -> Result<(), &'static str> {
    let action = {
        let mut armed = armed();
        let Some(i) = armed
            .iter()
            .position(|(ns, p, _)| ns == namespace && *p == point)
        else {
            return Ok(());
        };
        armed.remove(i).2
    };
    match action {
        Action::Error => Err(point),
        Action::Panic => panic!("failpoint {point} of namespace {namespace:?}"),
    }
}
