//! `tapd audit|import|export`: tapd's `mssmt_nodes` / `mssmt_roots` trees
//! checked in place, moved into the `--db` database, or written back.
//! `--from` / `--to` name the tapd side: an SQLite file (opened read-only
//! when read) or a postgres:// URL.

use clap::{Args, Subcommand};
use ms_smt::{ComputedNode, Layout, Tree};
use ms_smt_sql::SqlStoreError;
use ms_smt_tapd::{
    ExportOptions, ImportOptions, ImportReport, NamespaceAudit, TapdSource, TapdTarget,
    audit_namespace, export_namespace, import_namespace,
};
use serde_json::{Value, json};

use crate::Outcome;
use crate::db::{Access, Db, DbExt, LayoutArg, Store, TreeJob};
use crate::error::{CliError, Res};
use crate::output::{Output, node_text};

/// Arguments of `tapd`.
#[derive(Debug, Args)]
pub struct TapdArgs {
    #[command(subcommand)]
    command: TapdCommand,
}

#[derive(Debug, Subcommand)]
enum TapdCommand {
    /// Walk and check tapd's trees in place; exit 1 on any problem. Needs
    /// no --db.
    Audit(FromArgs),
    /// Import tapd's trees into --db (same namespace names), each complete
    /// or not at all.
    Import(ImportArgs),
    /// Write --db's trees into a tapd database, one transaction each.
    Export(ExportArgs),
}

/// `--from` and the namespaces.
#[derive(Debug, Args)]
pub struct FromArgs {
    /// The tapd database: an SQLite file or a postgres:// URL.
    #[arg(long, value_name = "FILE|URL")]
    from: String,
    /// Only these namespaces (default: every one).
    #[arg(long = "namespace", value_name = "NS")]
    namespaces: Vec<String>,
}

/// Arguments of `tapd import`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    #[command(flatten)]
    from: FromArgs,
    /// Replace target namespaces that hold another tree.
    #[arg(long)]
    replace: bool,
}

/// Arguments of `tapd export`.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The tapd database to write: an SQLite file or a postgres:// URL.
    #[arg(long, value_name = "FILE|URL")]
    to: String,
    /// Only these namespaces (default: every one).
    #[arg(long = "namespace", value_name = "NS")]
    namespaces: Vec<String>,
    /// Create tapd's two tables when missing (and the SQLite file).
    #[arg(long)]
    create_schema: bool,
    /// Replace tapd namespaces that already have rows.
    #[arg(long)]
    replace: bool,
}

impl TapdArgs {
    /// True when the command writes --db (import), false when it reads it
    /// (export); `None` when it needs none (audit).
    pub fn writes_db(&self) -> Option<bool> {
        match self.command {
            TapdCommand::Audit(_) => None,
            TapdCommand::Import(_) => Some(true),
            TapdCommand::Export(_) => Some(false),
        }
    }
}

/// The namespaces to work on: those asked for (each must exist in
/// `known`), else every one of `known`.
fn chosen(asked: &[String], known: Vec<String>) -> Res<Vec<String>> {
    if asked.is_empty() {
        return Ok(known);
    }
    if let Some(missing) = asked.iter().find(|a| !known.contains(a)) {
        return Err(CliError::NoNamespace(missing.clone()));
    }
    Ok(asked.to_vec())
}

/// The per-namespace JSON object.
fn summary(
    namespace: &str,
    root: &ComputedNode,
    leaves: u64,
    unreachable: u64,
    problems: Vec<String>,
) -> Value {
    json!({
        "namespace": namespace,
        "root_hash": root.hash.to_hex(),
        "root_sum": root.sum.to_string(),
        "leaves": leaves,
        "unreachable_rows": unreachable,
        "problems": problems,
    })
}

/// `tapd audit`: exit 1 when any namespace has a problem.
pub async fn audit(args: TapdArgs, out: Output) -> Res<Outcome> {
    let TapdCommand::Audit(from) = args.command else {
        return Ok(Outcome::Ok);
    };
    let source = TapdSource::open(&from.from).await?;
    let names = chosen(&from.namespaces, source.namespaces().await?)?;
    let mut clean = true;
    for ns in names {
        let a: NamespaceAudit = audit_namespace(&source, &ns).await?;
        clean &= a.problems.is_empty();
        let problems: Vec<String> = a.problems.iter().map(ToString::to_string).collect();
        let json = summary(&ns, &a.root, a.leaves, a.unreachable_rows, problems.clone());
        out.emit(json, || {
            let mut text = format!(
                "{ns}: {} ({} rows, {} leaves, {} unreachable; root {})",
                if problems.is_empty() {
                    "clean"
                } else {
                    "PROBLEMS"
                },
                a.rows,
                a.leaves,
                a.unreachable_rows,
                node_text(&a.root)
            );
            for p in &problems {
                text.push_str(&format!("\n  {p}"));
            }
            text
        });
    }
    if clean {
        Ok(Outcome::Ok)
    } else {
        eprintln!("ms-smt: tapd audit found problems");
        Ok(Outcome::Failed)
    }
}

/// Imports one namespace into the tree it is run on.
struct ImportJob<'a> {
    source: &'a TapdSource,
    namespace: &'a str,
    replace: bool,
}

impl TreeJob for ImportJob<'_> {
    type Output = ImportReport;

    async fn run<S: Store, L: Layout>(self, tree: &Tree<S, L>) -> Res<ImportReport> {
        let options = ImportOptions {
            replace: self.replace,
            ..ImportOptions::default()
        };
        import_namespace(self.source, self.namespace, tree, options)
            .await
            .map_err(|e| CliError::TapdImport(Box::new(e)))
    }
}

/// `tapd import`: each namespace into --db's namespace of the same name.
/// The source and the namespaces are checked before --db is opened (or
/// created).
pub async fn import(spec: &str, args: TapdArgs, layout: LayoutArg, out: Output) -> Res<Outcome> {
    let TapdCommand::Import(args) = args.command else {
        return Ok(Outcome::Ok);
    };
    let source = TapdSource::open(&args.from.from).await?;
    let names = chosen(&args.from.namespaces, source.namespaces().await?)?;
    let db = crate::db::open(spec, Access::Write).await?;
    let outcome = import_into(&db, &source, &names, args.replace, layout, out).await;
    db.close().await;
    outcome
}

/// Imports `names` from `source` into `db`.
async fn import_into(
    db: &Db,
    source: &TapdSource,
    names: &[String],
    replace: bool,
    layout: LayoutArg,
    out: Output,
) -> Res<Outcome> {
    let bar = out.bar(names.len() as u64, "namespaces");
    for ns in names {
        let job = ImportJob {
            source,
            namespace: ns,
            replace,
        };
        let r = db.with_tree(layout, ns, job).await?;
        bar.inc(1);
        let json = summary(ns, &r.root, r.leaves, r.unreachable_rows, Vec::new());
        out.emit(json, || {
            format!(
                "{ns}: {} ({} leaves, {} unreachable rows not imported; root {})",
                if r.unchanged {
                    "already there"
                } else {
                    "imported"
                },
                r.leaves,
                r.unreachable_rows,
                node_text(&r.root)
            )
        });
    }
    bar.finish_and_clear();
    Ok(Outcome::Ok)
}

/// Exports the tree it is run on into one tapd namespace.
struct ExportJob<'a> {
    target: &'a TapdTarget,
    namespace: &'a str,
    options: ExportOptions,
}

impl TreeJob for ExportJob<'_> {
    type Output = ms_smt_tapd::ExportReport;

    async fn run<S: Store, L: Layout>(self, tree: &Tree<S, L>) -> Res<Self::Output> {
        export_namespace(tree, self.target, self.namespace, self.options)
            .await
            .map_err(|e: ms_smt_tapd::ExportError<SqlStoreError>| CliError::TapdExport(Box::new(e)))
    }
}

/// `tapd export`: each namespace of --db into the tapd database.
pub async fn export(db: &Db, args: TapdArgs, layout: LayoutArg, out: Output) -> Res<Outcome> {
    let TapdCommand::Export(args) = args.command else {
        return Ok(Outcome::Ok);
    };
    let known: Vec<String> = db
        .namespaces()
        .await?
        .into_iter()
        .map(|l| l.name)
        .filter(|n| !n.contains('\u{1f}'))
        .collect();
    let names = chosen(&args.namespaces, known)?;
    let target = TapdTarget::open(&args.to, args.create_schema).await?;
    let options = ExportOptions {
        create_schema: args.create_schema,
        replace: args.replace,
    };
    for ns in &names {
        let job = ExportJob {
            target: &target,
            namespace: ns,
            options,
        };
        let r = db.with_tree(layout, ns, job).await?;
        let json = summary(ns, &r.root, r.leaves, 0, Vec::new());
        out.emit(json, || {
            format!(
                "{ns}: exported {} leaves in {} rows; root {}",
                r.leaves,
                r.rows,
                node_text(&r.root)
            )
        });
    }
    Ok(Outcome::Ok)
}
