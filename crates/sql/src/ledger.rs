//! The ledger's own statements, per engine: `ms_smt_migrations` is made
//! and grown (checksums, sets) by the runner in `schema`, with the SQL
//! each dialect gives as [`Dialect::LEDGER`](crate::dialect::Dialect::LEDGER).

/// The statements that make and grow an engine's ledger.
#[derive(Debug, Clone, Copy)]
pub struct LedgerSql {
    /// Creates the ledger, in its current shape, if missing.
    pub create: &'static str,
    /// One row `(1)` when the ledger exists, none otherwise (so a
    /// read-only check can tell a database this crate never migrated).
    pub exists: &'static str,
    /// One row `(1)` when the ledger has its `checksum` column.
    pub has_checksums: &'static str,
    /// Adds the `checksum` column to a ledger without one.
    pub add_checksums: &'static str,
    /// One row `(1)` when the ledger has its `migration_set` column.
    pub has_sets: &'static str,
    /// Gives a ledger without sets its `migration_set` column (its rows
    /// the tree schema's) and its (set, version) key.
    pub add_sets: &'static str,
}
