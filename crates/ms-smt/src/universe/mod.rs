//! What universe servers need beyond insert and prove, built on
//! [`Tree`](crate::Tree) and [`View`](crate::View): ordered iteration
//! (`iter`), diff (`diff`), sync from a peer (`peer`, `sync`), copy and filtered
//! copy (`copy`), verifiable export and import (`export`), and the audit
//! of a forest's links (`links`).

mod changes;
mod copy;
mod diff;
mod export;
mod iter;
mod links;
mod peer;
mod sync;

pub use changes::{FollowError, FollowReport, PageError, ProvenPage};
pub use copy::{CopyError, CopyReport};
pub use diff::{Diff, DiffEntry};
pub use export::{Chunk, ExportError, Import, ImportError, Trunk};
pub use iter::{DEFAULT_PAGE, LeafEntry, Leaves};
pub use peer::SyncPeer;
pub use sync::{DEFAULT_FEED_PAGE, SyncError, SyncReport};
