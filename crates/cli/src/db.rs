//! Opening `--db` (an SQLite file or a Postgres URL), read-only for the
//! commands that only look, and running a command on one namespace's
//! tree whatever the engine and layout.

use std::path::PathBuf;

use clap::ValueEnum;
use ms_smt::store::{AuditStore, BulkStore, PinStore};
use ms_smt::{CompactedTree, FullTree, Layout, ProgressSink, Tree, View};
use ms_smt_sql::{NamespaceListing, SqlStoreError};

use crate::error::{CliError, Res};

/// The tree layout a namespace was written with (the database does not
/// record it; audit checks the shape of the one given).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LayoutArg {
    /// Single-leaf subtrees stored as one node (Taproot Assets universes).
    Compacted,
    /// Every branch stored.
    Full,
}

pub use ms_smt_sql::{Access, Database as Db, DatabaseSpec};

/// Opens `spec` (an SQLite file or a Postgres URL) for `access`.
pub async fn open(spec: &str, access: Access) -> Res<Db> {
    Ok(Db::open_for(&spec.parse()?, access).await?)
}

/// The SQLite file `spec` names, if it names one.
pub fn sqlite_path(spec: &str) -> Option<PathBuf> {
    match spec.parse() {
        Ok(DatabaseSpec::Sqlite(path)) => Some(path),
        _ => None,
    }
}

/// The stores a command runs on.
pub trait Store:
    BulkStore<Error = SqlStoreError> + PinStore + AuditStore + Clone + 'static
{
}
impl<S: BulkStore<Error = SqlStoreError> + PinStore + AuditStore + Clone + 'static> Store for S {}

/// A command on one namespace's tree, generic over store and layout.
pub trait TreeJob {
    /// What it returns.
    type Output;
    /// Runs on `tree`.
    async fn run<S: Store, L: Layout>(self, tree: &Tree<S, L>) -> Res<Self::Output>;

    /// Where the tree reports the job's progress (by default nowhere).
    fn progress(&self) -> ProgressSink {
        ProgressSink::default()
    }
}

/// What the commands do with an open database, whatever its engine.
pub trait DbExt {
    /// The namespace `name`; an error when it does not exist.
    async fn namespace(&self, name: &str) -> Res<NamespaceListing>;

    /// Runs `job` on namespace `ns` with `layout`.
    async fn with_tree<J: TreeJob>(&self, layout: LayoutArg, ns: &str, job: J) -> Res<J::Output>;
}

impl DbExt for Db {
    async fn namespace(&self, name: &str) -> Res<NamespaceListing> {
        let found = self.namespace_listing(name).await?;
        found.ok_or_else(|| CliError::NoNamespace(name.to_owned()))
    }

    async fn with_tree<J: TreeJob>(&self, layout: LayoutArg, ns: &str, job: J) -> Res<J::Output> {
        match self {
            Db::Sqlite(s) => on_layout(s.open_namespace(ns), layout, job).await,
            Db::Postgres(s) => on_layout(s.open_namespace(ns), layout, job).await,
        }
    }
}

/// Runs `job` on a tree of `store` with `layout`.
pub async fn on_layout<S: Store, J: TreeJob>(
    store: S,
    layout: LayoutArg,
    job: J,
) -> Res<J::Output> {
    match layout {
        LayoutArg::Compacted => {
            let tree = CompactedTree::new(store).with_progress(job.progress());
            job.run(&tree).await
        }
        LayoutArg::Full => {
            let tree = FullTree::new(store).with_progress(job.progress());
            job.run(&tree).await
        }
    }
}

/// The view a read command reads: the pin `pin`, or the current tree.
pub async fn view_of<'t, S: Store, L: Layout>(
    tree: &'t Tree<S, L>,
    pin: Option<&str>,
) -> Res<View<'t, S, L>> {
    Ok(match pin {
        Some(name) => tree.at_pin(name).await?,
        None => tree.view(),
    })
}
