//! `load NS FILE`: bulk insert from JSON lines or CSV, all or nothing.
//!
//! Two passes over the file. The first parses every line (one line in
//! memory at a time) and refuses the file at its first bad line, before
//! the database is opened. The second writes the records in batches
//! (`insert_many` each) inside ONE database transaction, through the
//! crate's caller's-transaction mode ([`SqlStore::in_transaction`]), so a
//! failure part-way (a sum overflow, a lost connection) leaves nothing.
//! A later record for a key replaces an earlier one; an empty value with
//! sum 0 deletes the key (the crate's semantics).
//!
//! [`SqlStore::in_transaction`]: ms_smt::store::SqlStore::in_transaction

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::{Args, ValueEnum};
use indicatif::ProgressBar;
use ms_smt::store::{SqlStoreError, TreeStore};
use ms_smt::{CompactedTree, ComputedNode, FullTree, Key, Layout, Leaf, Tree};
use serde_json::json;

use crate::Outcome;
use crate::db::{Access, Db, LayoutArg, sqlite_path};
use crate::error::{CliError, LineError, Res};
use crate::output::{Output, node_json, node_text};

/// A load file's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// One `{"key": hex32, "value": hex, "sum": u64}` object per line.
    Jsonl,
    /// `key,value,sum` per line (hex, hex, decimal); header optional.
    Csv,
}

/// Arguments of `load`.
#[derive(Debug, Args)]
pub struct LoadArgs {
    /// The namespace (created if missing).
    pub ns: String,
    /// The file: .jsonl/.ndjson/.json or .csv (else give --format).
    pub file: PathBuf,
    /// The file's format (default: from its extension).
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// Records per insert_many.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub batch: u64,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonRecord {
    key: String,
    value: String,
    sum: u64,
}

/// The records of a load file, one line in memory at a time.
struct Records {
    reader: BufReader<File>,
    format: Format,
    path: PathBuf,
    line: u64,
    bytes: u64,
    text: String,
}

impl Records {
    fn open(path: &Path, format: Format) -> Res<Records> {
        if !path.is_file() {
            return Err(CliError::NoSuchFile(path.to_owned()));
        }
        let file = File::open(path).map_err(CliError::io(path))?;
        Ok(Records {
            reader: BufReader::with_capacity(1 << 16, file),
            format,
            path: path.to_owned(),
            line: 0,
            bytes: 0,
            text: String::new(),
        })
    }

    /// The next record; `None` at the end.
    fn next(&mut self) -> Res<Option<(Key, Leaf)>> {
        loop {
            self.text.clear();
            let read = self
                .reader
                .read_line(&mut self.text)
                .map_err(CliError::io(&self.path))?;
            if read == 0 {
                return Ok(None);
            }
            self.line += 1;
            self.bytes += read as u64;
            let text = self.text.trim();
            if text.is_empty() || (self.line == 1 && self.format == Format::Csv && is_header(text))
            {
                continue;
            }
            return parse(self.format, text)
                .map(Some)
                .map_err(|source| CliError::Line {
                    path: self.path.clone(),
                    line: self.line,
                    source,
                });
        }
    }
}

fn is_header(line: &str) -> bool {
    let fields: Vec<String> = line
        .split(',')
        .map(|f| f.trim().to_ascii_lowercase())
        .collect();
    fields == ["key", "value", "sum"]
}

fn parse(format: Format, line: &str) -> Result<(Key, Leaf), LineError> {
    let (key, value, sum) = match format {
        Format::Jsonl => {
            let r: JsonRecord = serde_json::from_str(line)?;
            (
                r.key.parse::<Key>().map_err(LineError::Key)?,
                r.value,
                r.sum,
            )
        }
        Format::Csv => {
            let fields: Vec<&str> = line.split(',').map(str::trim).collect();
            let [key, value, sum] = fields[..] else {
                return Err(LineError::Fields(fields.len()));
            };
            (
                key.parse::<Key>().map_err(LineError::Key)?,
                value.to_owned(),
                sum.parse::<u64>()?,
            )
        }
    };
    let value = hex::decode(value).map_err(LineError::Value)?;
    Ok((key, Leaf::new(value, sum)))
}

fn format_of(args: &LoadArgs) -> Res<Format> {
    if let Some(format) = args.format {
        return Ok(format);
    }
    let ext = args
        .file
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match ext.as_deref() {
        Some("jsonl" | "ndjson" | "json") => Ok(Format::Jsonl),
        Some("csv") => Ok(Format::Csv),
        _ => Err(CliError::UnknownFormat(args.file.clone())),
    }
}

/// The first pass: every line parses; the number of records.
fn check_file(path: &Path, format: Format, out: Output) -> Res<u64> {
    let size = std::fs::metadata(path).map_err(CliError::io(path))?.len();
    let bar = out.byte_bar(size, "check");
    let mut records = Records::open(path, format)?;
    let mut count = 0u64;
    while records.next()?.is_some() {
        count += 1;
        if count.is_multiple_of(4096) {
            bar.set_position(records.bytes);
        }
    }
    bar.set_position(records.bytes);
    bar.abandon();
    Ok(count)
}

/// The second pass: every record, in batches, into `tree`.
async fn write_batches<S, L>(
    tree: &Tree<S, L>,
    mut records: Records,
    batch: usize,
    bar: &ProgressBar,
) -> Res<ComputedNode>
where
    S: TreeStore<Error = SqlStoreError>,
    L: Layout,
{
    let mut root = tree.root().await?;
    loop {
        let mut leaves = Vec::with_capacity(batch);
        while leaves.len() < batch {
            match records.next()? {
                Some(record) => leaves.push(record),
                None => break,
            }
        }
        if leaves.is_empty() {
            return Ok(root);
        }
        let n = leaves.len() as u64;
        root = tree.insert_many(leaves).await?;
        bar.inc(n);
    }
}

/// The second pass's inputs.
struct Writes<'a> {
    layout: LayoutArg,
    records: Records,
    batch: usize,
    bar: &'a ProgressBar,
}

/// [`write_batches`] on `store` with the layout asked for.
async fn write_all<S>(store: S, w: Writes<'_>) -> Res<ComputedNode>
where
    S: TreeStore<Error = SqlStoreError>,
{
    match w.layout {
        LayoutArg::Compacted => {
            write_batches(&CompactedTree::new(store), w.records, w.batch, w.bar).await
        }
        LayoutArg::Full => write_batches(&FullTree::new(store), w.records, w.batch, w.bar).await,
    }
}

/// Writes every record of the file in one transaction of `db` (SQLite's
/// begun `IMMEDIATE`, so it holds the write lock from the start).
async fn write_in_one_transaction(db: &Db, ns: &str, w: Writes<'_>) -> Res<ComputedNode> {
    let sql = |e: sqlx::Error| CliError::Store(SqlStoreError::from(e));
    match db {
        Db::Sqlite(store) => {
            let mut tx = store
                .pool()
                .begin_with("BEGIN IMMEDIATE")
                .await
                .map_err(sql)?;
            let root = write_all(store.open_namespace(ns).in_transaction(&mut tx), w).await?;
            tx.commit().await.map_err(sql).map(|()| root)
        }
        Db::Postgres(store) => {
            let mut tx = store.pool().begin().await.map_err(sql)?;
            let root = write_all(store.open_namespace(ns).in_transaction(&mut tx), w).await?;
            tx.commit().await.map_err(sql).map(|()| root)
        }
    }
}

/// Removes an SQLite database file and its WAL companions.
fn remove_sqlite(path: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(p);
    }
}

/// `load NS FILE`: checks the whole file, then writes it in one
/// transaction; an SQLite file this command created is removed again
/// when the write fails.
pub async fn load(spec: &str, args: LoadArgs, layout: LayoutArg, out: Output) -> Res<Outcome> {
    let format = format_of(&args)?;
    let started = Instant::now();
    let count = check_file(&args.file, format, out)?;
    let checked = started.elapsed();
    let created = sqlite_path(spec).filter(|p| !p.exists());
    let db = Db::open(spec, Access::Write).await?;
    let bar = out.bar(count, "load");
    let records = Records::open(&args.file, format)?;
    let batch = usize::try_from(args.batch).unwrap_or(usize::MAX);
    let writes = Writes {
        layout,
        records,
        batch,
        bar: &bar,
    };
    let result = write_in_one_transaction(&db, &args.ns, writes).await;
    bar.abandon();
    db.close().await;
    let root = match result {
        Ok(root) => root,
        Err(e) => {
            if let Some(path) = created {
                remove_sqlite(&path);
            }
            return Err(e);
        }
    };
    let secs = started.elapsed().as_secs_f64();
    out.emit(
        json!({
            "namespace": args.ns,
            "records": count,
            "batches": count.div_ceil(args.batch),
            "root": node_json(&root),
            "check_seconds": checked.as_secs_f64(),
            "seconds": secs,
        }),
        || {
            format!(
                "loaded {count} records into {:?} in {} batches, one transaction ({secs:.1} s, check {:.1} s): root {}",
                args.ns,
                count.div_ceil(args.batch),
                checked.as_secs_f64(),
                node_text(&root)
            )
        },
    );
    Ok(Outcome::Ok)
}
