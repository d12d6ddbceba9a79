//! The CLI's one error type: every way a command fails, each printed as
//! one line on stderr with exit code 2.

use std::path::PathBuf;
use std::str::FromStr;

use ms_smt::proof::DecodeError;
use ms_smt::{ExportError, ImportError, Key, TreeError};
use ms_smt_sql::SqlStoreError;

/// Why a key, hash or hex argument does not parse.
pub type KeyError = <Key as FromStr>::Err;

/// Why a line of a `load` file is refused.
#[derive(Debug, thiserror::Error)]
pub enum LineError {
    /// Not a JSON object of the expected shape.
    #[error("not a {{\"key\", \"value\", \"sum\"}} JSON object: {0}")]
    Json(#[from] serde_json::Error),
    /// A CSV line without exactly three fields.
    #[error("expected 3 comma-separated fields (key,value,sum), got {0}")]
    Fields(usize),
    /// The key is not 32 bytes of hex.
    #[error("{0}")]
    Key(KeyError),
    /// The value is not hex.
    #[error("value is not hex: {0}")]
    Value(hex::FromHexError),
    /// The sum is not a u64.
    #[error("sum is not an unsigned 64-bit integer: {0}")]
    Sum(#[from] std::num::ParseIntError),
}

/// Every failure of a command.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The command needs `--db`.
    #[error("this command needs --db (an SQLite file or a postgres:// URL)")]
    NoDb,
    /// A file the command reads is not there.
    #[error("no such file: {0}")]
    NoSuchFile(PathBuf),
    /// The namespace does not exist.
    #[error("no namespace {0:?} in this database")]
    NoNamespace(String),
    /// The namespace's row or root row is damaged (`ms-smt audit` tells
    /// more).
    #[error("namespace {namespace:?} is damaged: {damage}")]
    Damaged {
        /// The namespace.
        namespace: String,
        /// What the listing found.
        damage: ms_smt_sql::NamespaceDamage,
    },
    /// `unpin` named a pin the namespace does not have.
    #[error("namespace {namespace:?} has no pin {name:?}")]
    NoSuchPin {
        /// The namespace.
        namespace: String,
        /// The pin asked for.
        name: String,
    },
    /// A key argument does not parse.
    #[error("malformed key {text:?}: {source}")]
    BadKey {
        /// The argument.
        text: String,
        /// Why.
        source: KeyError,
    },
    /// A hex argument does not parse.
    #[error("malformed {what} (hex expected): {source}")]
    BadHex {
        /// Which argument.
        what: &'static str,
        /// Why.
        source: hex::FromHexError,
    },
    /// A hash argument is not 32 bytes.
    #[error("{what} must be 32 bytes, got {len}")]
    HashLength {
        /// Which argument.
        what: &'static str,
        /// Bytes given.
        len: usize,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The load file's format is not given and its extension does not say.
    #[error(
        "cannot tell the format of {0} from its extension; pass --format jsonl or --format csv"
    )]
    UnknownFormat(PathBuf),
    /// A line of a load file is refused; nothing was written.
    #[error("{path}:{line}: {source}; nothing was written")]
    Line {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: u64,
        /// Why.
        source: LineError,
    },
    /// The proof bytes do not decode.
    #[error("malformed proof: {0}")]
    Proof(#[from] DecodeError),
    /// A trunk or chunk file does not decode or check.
    #[error("{path}: {source}")]
    Export {
        /// The file.
        path: PathBuf,
        /// Why (boxed: it carries roots, and keeps every result small).
        source: Box<ExportError>,
    },
    /// The export directory holds the export of another root.
    #[error(
        "{dir} holds an export of root {found}, the namespace's root is {root}; use an empty directory"
    )]
    OtherExport {
        /// The directory.
        dir: PathBuf,
        /// The root in its trunk.
        found: String,
        /// The root being exported.
        root: String,
    },
    /// A chunk read from the current tree no longer matches the trunk.
    #[error(
        "the tree changed during the export (chunk at {position}); export a pinned root with --pin"
    )]
    TreeMoved {
        /// The chunk's position.
        position: String,
    },
    /// An import stopped; the chunks already in stay staged for a rerun.
    #[error("{source}{}", resume_hint(*staged, *total))]
    Import {
        /// Why (boxed: it carries roots, and keeps every result small).
        source: Box<ImportError<SqlStoreError>>,
        /// Chunks in staging.
        staged: usize,
        /// Chunks in the trunk.
        total: usize,
    },
    /// The tapd database could not be read or written.
    #[error("tapd: {0}")]
    Tapd(#[from] ms_smt_tapd::TapdError),
    /// A tapd import stopped; the target namespace is unchanged.
    #[error("{0}")]
    TapdImport(Box<ms_smt_tapd::ImportError<SqlStoreError>>),
    /// A tapd export stopped; the tapd database is unchanged.
    #[error("{0}")]
    TapdExport(Box<ms_smt_tapd::ExportError<SqlStoreError>>),
    /// The store failed.
    #[error(transparent)]
    Database(#[from] ms_smt_sql::DatabaseError),
    #[error("{0}")]
    Store(#[from] SqlStoreError),
    /// A tree operation failed.
    #[error("{0}")]
    Tree(#[from] TreeError<SqlStoreError>),
    /// A token could not be made, or a grant does not parse.
    #[error("{0}")]
    Access(#[from] ms_smt_server::access::AccessError),
    /// `tokens revoke` named a token that does not exist or was revoked.
    #[error("no token {0:?} to revoke (unknown, or revoked already)")]
    NoSuchToken(String),
    /// A duration argument does not parse.
    #[error("{0:?} is not a duration (a number and s, m, h or d: 90d, 12h)")]
    BadDuration(String),
    /// An option the engine does not have.
    #[error("{0}")]
    Unsupported(&'static str),
    /// A seconds argument is not a finite, non-negative number.
    #[error("{flag} {secs}: not a number of seconds")]
    BadSeconds {
        /// The flag.
        flag: &'static str,
        /// What it was given.
        secs: f64,
    },
    /// `universe serve --plain` on an address other hosts can reach.
    #[error("plain HTTP/2 only on a loopback --listen (not {0}), or with --behind-proxy")]
    PlainNotLoopback(std::net::SocketAddr),
    /// The server's address could not be bound.
    #[error("cannot listen on {address}: {source}")]
    Listen {
        /// The address asked for.
        address: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The server stopped on an I/O error.
    #[error("the universe server stopped: {0}")]
    Serve(std::io::Error),
    /// A certificate or key could not be read, made or used.
    #[error("{0}")]
    Tls(#[from] ms_smt_server::TlsError),
    /// The universe server to mirror could not be reached.
    #[error("{0}")]
    Connect(Box<ms_smt_server::grpc::ConnectError>),
    /// A mirror round stopped; what it committed before stays, and the
    /// next round resumes.
    #[error("{0}")]
    Mirror(Box<ms_smt_server::grpc::MirrorError<SqlStoreError>>),
    /// The async runtime could not start.
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
}

/// What an import that stopped with `staged` chunks in staging says.
fn resume_hint(staged: usize, total: usize) -> String {
    if staged == 0 {
        String::new()
    } else {
        format!(" ({staged} of {total} chunks staged; rerun the import to resume)")
    }
}

impl CliError {
    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> CliError {
        let path = path.into();
        move |source| CliError::Io { path, source }
    }
}

/// A command's result.
pub type Res<T> = Result<T, CliError>;
