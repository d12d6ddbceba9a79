//! `load NS FILE`: bulk insert from JSON lines or CSV, all or nothing.
//!
//! Two passes over the file. The first parses every line (one line in
//! memory at a time) and refuses the file at its first bad line, before
//! the database is opened. The second writes the records in batches
//! inside ONE database transaction, through the crate's store-wide write
//! path in the caller's transaction ([`Forest::insert_many`] on
//! [`SqlStore::forest_in_transaction`]), so a failure part-way (a sum
//! overflow, a lost connection) leaves nothing. A JSON record may name
//! its own namespace (`"ns"`; default: NS), so one file fills many trees;
//! with `--parent P`, tree P holds every written tree's root (at the
//! SHA-256 of its name), kept in step in the same transaction. A later
//! record for a key replaces an earlier one; an empty value with sum 0
//! deletes the key (the crate's semantics).
//!
//! [`Forest::insert_many`]: ms_smt::Forest::insert_many
//! [`SqlStore::forest_in_transaction`]: ms_smt_sql::SqlStore::forest_in_transaction

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::{Args, ValueEnum};
use indicatif::ProgressBar;
use std::collections::BTreeSet;

use ms_smt::store::ForestStore;

use ms_smt::{Compacted, ComputedNode, Forest, Full, Key, Layout, Leaf, Link};
use ms_smt_sql::SqlStoreError;
use serde_json::json;
use sha2::{Digest, Sha256};

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
    /// Records per commit.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub batch: u64,
    /// A parent tree over every namespace the file writes: it holds each
    /// one's root (hash as the value, sum as the sum) at the SHA-256 of
    /// its name, kept in step in the same transaction.
    #[arg(long)]
    pub parent: Option<String>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonRecord {
    #[serde(default)]
    ns: Option<String>,
    key: String,
    value: String,
    sum: u64,
}

/// One record: its namespace (`None`: the command's), key and leaf.
type Record = (Option<String>, Key, Leaf);

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
    fn next(&mut self) -> Res<Option<Record>> {
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

fn parse(format: Format, line: &str) -> Result<Record, LineError> {
    let (ns, key, value, sum) = match format {
        Format::Jsonl => {
            let r: JsonRecord = serde_json::from_str(line)?;
            (
                r.ns,
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
                None,
                key.parse::<Key>().map_err(LineError::Key)?,
                value.to_owned(),
                sum.parse::<u64>()?,
            )
        }
    };
    let value = hex::decode(value).map_err(LineError::Value)?;
    Ok((ns, key, Leaf::new(value, sum)))
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

/// What the second pass wrote: the root of each tree it wrote (and of the
/// parent), by name.
type Roots = std::collections::BTreeMap<String, ComputedNode>;

/// The second pass: every record, in batches, into `forest` (one commit
/// of every tree a batch names, and the parent, per batch).
async fn write_batches<S, L>(
    forest: &Forest<S, L>,
    ns: &str,
    mut records: Records,
    batch: usize,
    bar: &ProgressBar,
) -> Res<Roots>
where
    S: ForestStore<Error = SqlStoreError>,
    L: Layout,
{
    let mut roots = Roots::new();
    let mut written: BTreeSet<String> = BTreeSet::new();
    written.insert(ns.to_owned());
    loop {
        let mut writes = Vec::with_capacity(batch);
        while writes.len() < batch {
            match records.next()? {
                Some((name, key, leaf)) => {
                    let name = name.unwrap_or_else(|| ns.to_owned());
                    if !written.contains(&name) {
                        written.insert(name.clone());
                    }
                    writes.push((name, key, leaf));
                }
                None => break,
            }
        }
        if writes.is_empty() {
            break;
        }
        let n = writes.len() as u64;
        let write = forest.insert_many(writes).await?;
        roots.extend(
            write
                .trees
                .into_iter()
                .map(|t| (t.name.to_string(), t.new_root)),
        );
        bar.inc(n);
    }
    // Trees named but unchanged (or the command's own, if no record named
    // it) still report their root.
    let missing: Vec<&String> = written.iter().filter(|n| !roots.contains_key(*n)).collect();
    let found = forest.roots(&missing).await?;
    roots.extend(missing.into_iter().cloned().zip(found));
    Ok(roots)
}

/// The second pass's inputs.
struct Writes<'a> {
    ns: &'a str,
    layout: LayoutArg,
    records: Records,
    batch: usize,
    parent: Option<&'a str>,
    bar: &'a ProgressBar,
}

/// The forest of a load: `parent`, if any, over every other namespace.
fn forest_of<S: ForestStore, L: Layout>(store: S, parent: Option<&str>) -> Forest<S, L> {
    let forest = Forest::new(store);
    match parent {
        Some(parent) => {
            let own = parent.to_owned();
            forest.with_link(Link::rule(parent, move |name| {
                (name != own).then(|| Key(Sha256::digest(name.as_bytes()).into()))
            }))
        }
        None => forest,
    }
}

/// [`write_batches`] on `store` with the layout asked for.
async fn write_all<S>(store: S, w: Writes<'_>) -> Res<Roots>
where
    S: ForestStore<Error = SqlStoreError>,
{
    match w.layout {
        LayoutArg::Compacted => {
            let forest = forest_of::<_, Compacted>(store, w.parent);
            write_batches(&forest, w.ns, w.records, w.batch, w.bar).await
        }
        LayoutArg::Full => {
            let forest = forest_of::<_, Full>(store, w.parent);
            write_batches(&forest, w.ns, w.records, w.batch, w.bar).await
        }
    }
}

/// Writes every record of the file in one transaction of `db` (SQLite's
/// begun `IMMEDIATE`, so it holds the write lock from the start).
async fn write_in_one_transaction(db: &Db, w: Writes<'_>) -> Res<Roots> {
    let sql = |e: sqlx::Error| CliError::Store(SqlStoreError::from(e));
    match db {
        Db::Sqlite(store) => {
            let mut tx = store
                .pool()
                .begin_with("BEGIN IMMEDIATE")
                .await
                .map_err(sql)?;
            let roots = write_all(store.forest_in_transaction(&mut tx), w).await?;
            tx.commit().await.map_err(sql).map(|()| roots)
        }
        Db::Postgres(store) => {
            let mut tx = store.pool().begin().await.map_err(sql)?;
            let roots = write_all(store.forest_in_transaction(&mut tx), w).await?;
            tx.commit().await.map_err(sql).map(|()| roots)
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
    let db = crate::db::open(spec, Access::Write).await?;
    let bar = out.bar(count, "load");
    let records = Records::open(&args.file, format)?;
    let batch = usize::try_from(args.batch).unwrap_or(usize::MAX);
    let writes = Writes {
        ns: &args.ns,
        layout,
        records,
        batch,
        parent: args.parent.as_deref(),
        bar: &bar,
    };
    let result = write_in_one_transaction(&db, writes).await;
    bar.abandon();
    db.close().await;
    let roots = match result {
        Ok(roots) => roots,
        Err(e) => {
            if let Some(path) = created {
                remove_sqlite(&path);
            }
            return Err(e);
        }
    };
    let root = roots
        .get(&args.ns)
        .copied()
        .unwrap_or_else(ComputedNode::empty_root);
    let secs = started.elapsed().as_secs_f64();
    let trees: serde_json::Map<String, serde_json::Value> = roots
        .iter()
        .map(|(name, root)| (name.clone(), node_json(root)))
        .collect();
    out.emit(
        json!({
            "namespace": args.ns,
            "records": count,
            "batches": count.div_ceil(args.batch),
            "root": node_json(&root),
            "trees": trees,
            "check_seconds": checked.as_secs_f64(),
            "seconds": secs,
        }),
        || {
            let mut text = format!(
                "loaded {count} records into {:?} in {} batches, one transaction ({secs:.1} s, check {:.1} s): root {}",
                args.ns,
                count.div_ceil(args.batch),
                checked.as_secs_f64(),
                node_text(&root)
            );
            for (name, root) in roots.iter().filter(|(n, _)| **n != args.ns) {
                text.push_str(&format!("\n  {name:?}: root {}", node_text(root)));
            }
            text
        },
    );
    Ok(Outcome::Ok)
}
