//! The error type of the SQL stores.

use crate::commit_token::CommitToken;

/// Errors of the SQLite and Postgres stores.
#[derive(Debug, thiserror::Error)]
pub enum SqlStoreError {
    /// The database driver failed.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// A namespace's stored root is not a 32-byte hash.
    #[error("namespace {namespace:?}: stored root hash is {len} bytes, not 32")]
    CorruptRoot {
        /// Namespace.
        namespace: String,
        /// Length of the stored hash.
        len: usize,
    },
    /// A strata row of the namespace does not decode, or a batch does not
    /// fit the stored rows (a delete of a node that is not stored where
    /// the batch says); nothing was written.
    #[error("namespace {namespace:?}: {source}")]
    Rows {
        /// Namespace.
        namespace: String,
        /// What is wrong.
        #[source]
        source: crate::strata::StrataError,
    },
    /// The stratum height asked for is outside 1..=6.
    #[error("stratum height {0} is outside 1..=6")]
    StratumHeight(i64),
    /// A test armed a failpoint (cargo feature `failpoints`) at `point`.
    #[cfg(feature = "failpoints")]
    #[error("failpoint {point} fired")]
    Injected {
        /// The point.
        point: &'static str,
    },
    /// The runtime shut down while a write ran on its own task (see
    /// [`ForestStore::commit_trees`](crate::store::ForestStore::commit_trees)
    /// on the pool stores).
    #[error("the async runtime shut down before the write finished")]
    RuntimeShutdown,
    /// The namespace's row was gone right after the write transaction
    /// created it (another handle renamed or removed it meanwhile).
    #[error("the namespace row vanished inside a write transaction")]
    NamespaceVanished,
    /// A read or commit of several trees was handed a tree of another
    /// database (or of another transaction): one commit cannot span them.
    #[error("namespace {namespace:?} is a tree of another database or transaction")]
    ForeignTree {
        /// The namespace of the foreign tree.
        namespace: String,
    },
    /// A read or copy named a version of the namespace that no pin holds.
    #[error("no pin holds version {version} of this namespace")]
    NoSuchVersion {
        /// The version asked for.
        version: u64,
    },
    /// A change journal row holds a key that is not 32 bytes (the row is
    /// corrupt).
    #[error("a change journal row holds a {len}-byte key")]
    CorruptJournal {
        /// The key's length.
        len: usize,
    },
    /// A stored version number is negative (the row is corrupt).
    #[error("stored version {0} is negative")]
    BadVersion(i64),
    /// A standby had not replayed a read's [`CommitToken`] within the wait
    /// bound, and the replica set answers that with an error
    /// ([`OnLag::Error`](crate::OnLag::Error)) rather than a read on
    /// the primary.
    #[error(
        "standby {standby} replayed the WAL to {replayed}, short of token {token}, after {waited:?}"
    )]
    StandbyBehind {
        /// The standby's index in the replica set.
        standby: usize,
        /// The token the read waited for.
        token: CommitToken,
        /// How far the standby had replayed.
        replayed: CommitToken,
        /// How long the read waited.
        waited: std::time::Duration,
    },
    /// A Postgres server did not answer a round trip within the handle's
    /// reply wait ([`PostgresStore::with_reply_wait`](crate::PostgresStore::with_reply_wait),
    /// by default [`DEFAULT_POSTGRES_REPLY_WAIT`](crate::DEFAULT_POSTGRES_REPLY_WAIT)):
    /// stopped, frozen or cut off. The connection was closed; whether a
    /// `COMMIT` that got no reply was applied must be read from the
    /// database.
    #[error("the Postgres server did not reply within {waited:?}")]
    NoReply {
        /// The wait that ran out.
        waited: std::time::Duration,
    },
    /// A view of a store under its write lock was used after its commit,
    /// which released the lock with the transaction that held it.
    #[error("the write lock was released with its commit")]
    LockReleased,
    /// The schema in the database is newer than this crate knows.
    #[error("database schema version {found} is newer than the {supported} this crate supports")]
    SchemaTooNew {
        /// Version found.
        found: i64,
        /// Highest version known.
        supported: i64,
    },
    /// A schema version applied to the database differs from this crate's
    /// migration of that version: the checksum its ledger recorded when it
    /// was applied (SHA-256 of the version's SQL) is not the checksum of
    /// this crate's SQL. The migration was edited after it was applied, or
    /// the ledger was altered; nothing was migrated, and the database is
    /// not opened (as sqlx refuses a modified migration).
    #[error(
        "schema migration {version} ({description}) was applied to this database with other SQL \
         than this crate's: the ledger records checksum {}, this crate's is {}",
        hex::encode(recorded),
        hex::encode(expected)
    )]
    MigrationChanged {
        /// The version.
        version: i64,
        /// This crate's description of it.
        description: &'static str,
        /// The checksum the ledger (`ms_smt_migrations`) records.
        recorded: Vec<u8>,
        /// The checksum of this crate's SQL for the version.
        expected: [u8; 32],
    },
}

impl SqlStoreError {
    /// True when the error says the database was out of reach rather than
    /// that it refused the operation: the connection broke or could not be
    /// made or had, the server is shutting down or starting up, or the
    /// session reached a server that is (now) a standby, as during a
    /// failover. Retrying the same operation later, against the same URL,
    /// may succeed; whether a write that failed so was applied must be
    /// read from the database. A server that did not reply in time
    /// ([`SqlStoreError::NoReply`]) counts as out of reach.
    pub fn is_transient(&self) -> bool {
        let e = match self {
            SqlStoreError::Database(e) => e,
            SqlStoreError::NoReply { .. } => return true,
            _ => return false,
        };
        match e {
            sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::WorkerCrashed => true,
            sqlx::Error::Database(db) => db.code().is_some_and(|code| {
                // 08: connection exception; 57P01-57P03: admin or crash
                // shutdown, cannot connect now; 53300: too many
                // connections; 25006: read-only transaction (a standby).
                code.starts_with("08")
                    || matches!(&*code, "57P01" | "57P02" | "57P03" | "53300" | "25006")
            }),
            _ => false,
        }
    }
}

impl crate::store::StoreError for SqlStoreError {
    fn is_transient(&self) -> bool {
        SqlStoreError::is_transient(self)
    }
}

/// The result of every SQL store operation.
pub(crate) type Res<T> = Result<T, SqlStoreError>;
