//! `export NS DIR` and `import NS DIR`: a tree as verifiable chunk files
//! (the crate's [`Trunk`] and [`Chunk`] encodings), both resumable.
//!
//! DIR holds `trunk.mstk` and one `chunk-<path hex>.msch` per trunk
//! entry. Export writes the trunk first, then each chunk not already
//! there and valid (a file is written whole under a temporary name and
//! renamed). Import checks every file against the trunk before it opens
//! the database, then resumes what an interrupted import staged (the
//! crate recognises staged chunks by their subtree hashes) and adds the
//! rest; the target namespace changes only in the final step.

use std::path::{Path, PathBuf};

use clap::Args;
use ms_smt::{Chunk, Layout, Position, Tree, Trunk};
use serde_json::json;

use crate::Outcome;
use crate::db::{Access, Db, DbExt, LayoutArg, Store, TreeJob, view_of};
use crate::error::{CliError, Res};
use crate::inspect::leaf_stats;
use crate::output::{Output, node_json, node_text};

/// Arguments of `export`.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The namespace.
    pub ns: String,
    /// The directory (created if missing).
    pub dir: PathBuf,
    /// Export the root pinned under this name (recommended while writers
    /// run: the current tree may move between chunks).
    #[arg(long)]
    pub pin: Option<String>,
    /// The cut level; by default the one giving about --chunk-leaves
    /// leaves per chunk.
    #[arg(long)]
    pub level: Option<usize>,
    /// Leaves per chunk aimed at when --level is not given.
    #[arg(long, default_value_t = 10_000)]
    pub chunk_leaves: u64,
}

/// Arguments of `import`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The namespace (must be empty).
    pub ns: String,
    /// A directory `export` wrote.
    pub dir: PathBuf,
}

fn trunk_path(dir: &Path) -> PathBuf {
    dir.join("trunk.mstk")
}

fn chunk_path(dir: &Path, position: &Position) -> PathBuf {
    dir.join(format!("chunk-{}.msch", position.path().to_hex()))
}

/// Writes `bytes` to `path` whole: a temporary file, then a rename.
fn write_whole(path: &Path, bytes: &[u8]) -> Res<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, bytes).map_err(CliError::io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(CliError::io(path))
}

fn read(path: &Path) -> Res<Vec<u8>> {
    if !path.is_file() {
        return Err(CliError::NoSuchFile(path.to_owned()));
    }
    std::fs::read(path).map_err(CliError::io(path))
}

fn read_trunk(dir: &Path) -> Res<Trunk> {
    let path = trunk_path(dir);
    Trunk::decode(&read(&path)?).map_err(|source| CliError::Export {
        path,
        source: Box::new(source),
    })
}

/// The chunk file of `position`, decoded and checked against `trunk`.
fn read_chunk(dir: &Path, trunk: &Trunk, position: &Position) -> Res<Chunk> {
    let path = chunk_path(dir, position);
    let export = |source| CliError::Export {
        path: path.clone(),
        source: Box::new(source),
    };
    let chunk = Chunk::decode(&read(&path)?).map_err(export)?;
    if chunk.position != *position {
        return Err(export(ms_smt::ExportError::UnknownChunk(chunk.position)));
    }
    chunk.check(trunk).map_err(export)?;
    Ok(chunk)
}

struct Export {
    args: ExportArgs,
    out: Output,
}

/// What an export did.
struct Exported {
    trunk: Trunk,
    reused_trunk: bool,
    written: u64,
    skipped: u64,
    leaves: u64,
}

impl TreeJob for Export {
    type Output = Exported;

    async fn run<S: Store, L: Layout>(self, tree: &Tree<S, L>) -> Res<Exported> {
        let dir = &self.args.dir;
        let view = view_of(tree, self.args.pin.as_deref()).await?;
        let root = view.root().await?;
        std::fs::create_dir_all(dir).map_err(CliError::io(dir))?;
        let reused_trunk = trunk_path(dir).is_file();
        let trunk = if reused_trunk {
            let trunk = read_trunk(dir)?;
            if trunk.root != root {
                return Err(CliError::OtherExport {
                    dir: dir.clone(),
                    found: node_text(&trunk.root),
                    root: node_text(&root),
                });
            }
            trunk
        } else {
            let level = match self.args.level {
                Some(level) => level,
                None => Trunk::level_for(leaf_stats(view).await?.leaves, self.args.chunk_leaves),
            };
            let trunk = view.export_trunk(level).await?;
            if trunk.root != root {
                return Err(CliError::TreeMoved {
                    position: "root".to_owned(),
                });
            }
            write_whole(&trunk_path(dir), &trunk.encode())?;
            trunk
        };
        let bar = self.out.bar(trunk.chunks.len() as u64, "export");
        let (mut written, mut skipped, mut leaves) = (0, 0, 0);
        for (position, _) in &trunk.chunks {
            bar.inc(1);
            if let Ok(chunk) = read_chunk(dir, &trunk, position) {
                skipped += 1;
                leaves += chunk.leaves.len() as u64;
                continue;
            }
            let chunk = view.export_chunk(*position).await?;
            chunk.check(&trunk).map_err(|_| CliError::TreeMoved {
                position: format!("{position:?}"),
            })?;
            write_whole(&chunk_path(dir, position), &chunk.encode())?;
            written += 1;
            leaves += chunk.leaves.len() as u64;
        }
        bar.abandon();
        Ok(Exported {
            trunk,
            reused_trunk,
            written,
            skipped,
            leaves,
        })
    }
}

/// `export NS DIR`: skips chunk files already there and valid.
pub async fn export(db: &Db, args: ExportArgs, layout: LayoutArg, out: Output) -> Res<Outcome> {
    db.namespace(&args.ns).await?;
    let (ns, dir) = (args.ns.clone(), args.dir.clone());
    let done = db.with_tree(layout, &ns, Export { args, out }).await?;
    out.emit(
        json!({
            "namespace": ns,
            "dir": dir.display().to_string(),
            "root": node_json(&done.trunk.root),
            "level": done.trunk.level,
            "chunks": done.trunk.chunks.len(),
            "written": done.written,
            "skipped": done.skipped,
            "leaves": done.leaves,
            "reused_trunk": done.reused_trunk,
        }),
        || {
            format!(
                "exported {} leaves of {:?} to {}: root {}, level {}, {} chunks ({} written, {} already there{})",
                done.leaves,
                ns,
                dir.display(),
                node_text(&done.trunk.root),
                done.trunk.level,
                done.trunk.chunks.len(),
                done.written,
                done.skipped,
                if done.reused_trunk { ", trunk reused" } else { "" }
            )
        },
    );
    Ok(Outcome::Ok)
}

struct Import {
    trunk: Trunk,
    dir: PathBuf,
    out: Output,
}

/// What an import did.
struct Imported {
    resumed: usize,
    added: usize,
    leaves: u64,
}

impl TreeJob for Import {
    type Output = Imported;

    async fn run<S: Store, L: Layout>(self, tree: &Tree<S, L>) -> Res<Imported> {
        let total = self.trunk.chunks.len();
        let failed = |staged| {
            move |source| CliError::Import {
                source: Box::new(source),
                staged,
                total,
            }
        };
        let mut import = tree.import(self.trunk.clone()).await.map_err(failed(0))?;
        let missing = import.missing();
        let resumed = total - missing.len();
        let bar = self.out.bar(total as u64, "import");
        bar.inc(resumed as u64);
        let mut leaves = 0;
        for (i, position) in missing.iter().enumerate() {
            let chunk = read_chunk(&self.dir, &self.trunk, position)?;
            import.add(&chunk).await.map_err(failed(resumed + i))?;
            leaves += chunk.leaves.len() as u64;
            bar.inc(1);
        }
        bar.abandon();
        import.finish().await.map_err(failed(total))?;
        Ok(Imported {
            resumed,
            added: missing.len(),
            leaves,
        })
    }
}

/// `import NS DIR`: every file is read and checked against the trunk
/// before the database is opened; then the import runs, resuming what an
/// interrupted one staged.
pub async fn import(spec: &str, args: ImportArgs, layout: LayoutArg, out: Output) -> Res<Outcome> {
    let trunk = read_trunk(&args.dir)?;
    let bar = out.bar(trunk.chunks.len() as u64, "check");
    for (position, _) in &trunk.chunks {
        read_chunk(&args.dir, &trunk, position)?;
        bar.inc(1);
    }
    bar.abandon();
    let root = trunk.root;
    let db = crate::db::open(spec, Access::Write).await?;
    let job = Import {
        trunk,
        dir: args.dir.clone(),
        out,
    };
    let done = db.with_tree(layout, &args.ns, job).await;
    db.close().await;
    let done = done?;
    out.emit(
        json!({
            "namespace": args.ns,
            "root": node_json(&root),
            "chunks": done.resumed + done.added,
            "resumed": done.resumed,
            "added": done.added,
            "leaves_added": done.leaves,
        }),
        || {
            format!(
                "imported {:?}: root {}, {} chunks ({} added, {} already staged by an interrupted import)",
                args.ns,
                node_text(&root),
                done.resumed + done.added,
                done.added,
                done.resumed
            )
        },
    );
    Ok(Outcome::Ok)
}
