//! `ms-smt`: the operator CLI over an SQLite file or a Postgres database.
//!
//! ```text
//! ms-smt --db assets.db namespaces
//! ms-smt --db postgres://user@host/db audit universe
//! ms-smt --db assets.db load universe leaves.jsonl
//! ms-smt --db universes.db universe serve --listen 0.0.0.0:10029
//! ms-smt --db mirror.db universe mirror --from universe.example:10029
//! ```
//!
//! Exit codes: 0 done; 1 a check failed (audit found problems, a proof
//! does not verify, diff found differences); 2 an error (one line on
//! stderr, nothing written).

mod audit;
mod db;
mod diff;
mod error;
mod inspect;
mod load;
mod maintain;
mod output;
mod pins;
mod proof;
mod tapd;
mod tokens;
mod transfer;
mod universe;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::db::{Access, LayoutArg};
use crate::error::{CliError, Res};
use crate::output::Output;

/// Operate ms-smt trees in an SQLite file or a Postgres database.
#[derive(Debug, Parser)]
#[command(name = "ms-smt", version, about)]
struct Cli {
    /// The database: an SQLite file (read commands never create one) or a
    /// postgres:// URL.
    #[arg(long, global = true, value_name = "FILE|URL")]
    db: Option<String>,
    /// Machine-readable output: one JSON document on stdout.
    #[arg(long, global = true)]
    json: bool,
    /// The layout the namespaces were written with.
    #[arg(long, global = true, value_enum, default_value = "compacted")]
    layout: LayoutArg,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Every namespace: leaves, root, sum, version, stratum height, pins.
    Namespaces,
    /// One namespace in detail.
    Stats(inspect::StatsArgs),
    /// Recompute and check everything a namespace stores; exit 1 on any
    /// problem.
    Audit(audit::AuditArgs),
    /// The leaf at a key.
    Get(proof::GetArgs),
    /// The merkle proof of a key (Go wire format): hex on stdout, or raw
    /// bytes with --out.
    Proof(proof::ProofArgs),
    /// Check a proof against a root, key and leaf; exit 1 when it does
    /// not verify. Needs no --db.
    Verify(proof::VerifyArgs),
    /// Bulk insert from JSON lines or CSV, all or nothing.
    Load(load::LoadArgs),
    /// Write a namespace as verifiable chunk files (resumable).
    Export(transfer::ExportArgs),
    /// Fill an empty namespace from an export directory (resumable).
    Import(transfer::ImportArgs),
    /// Pin the current root under a name.
    Pin(pins::PinArgs),
    /// Remove a pin.
    Unpin(pins::PinArgs),
    /// The keys whose leaves differ between two namespaces; exit 1 when
    /// any do.
    Diff(diff::DiffArgs),
    /// tapd's trees: audit in place, import into --db, export from --db.
    Tapd(tapd::TapdArgs),
    /// The federation server's access tokens: create (printed once), list,
    /// revoke.
    Tokens(tokens::TokensArgs),
    /// tapd's universe federation protocol (gRPC): serve the database's
    /// universes, or mirror a universe server into it.
    Universe(universe::UniverseArgs),
    /// Upkeep for a long-running database: count uncounted namespaces,
    /// prune change journals, list pins, vacuum; exit 1 if a namespace
    /// could not be counted.
    Maintain(maintain::MaintainArgs),
}

/// What a command concluded: exit 0 or 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Done; the check (if any) passed.
    Ok,
    /// The check failed (already reported).
    Failed,
}

impl Command {
    /// What the command does to the database (`None`: needs none).
    fn access(&self) -> Option<Access> {
        Some(match self {
            Command::Verify(_) => return None,
            Command::Tapd(args) => match args.writes_db()? {
                true => Access::Write,
                false => Access::Read,
            },
            Command::Load(_) | Command::Import(_) | Command::Universe(_) => Access::Write,
            Command::Pin(_) | Command::Unpin(_) | Command::Maintain(_) => Access::WriteExisting,
            Command::Tokens(args) => args.access(),
            _ => Access::Read,
        })
    }
}

async fn run(cli: Cli) -> Res<Outcome> {
    let out = Output { json: cli.json };
    let layout = cli.layout;
    let Some(access) = cli.command.access() else {
        match cli.command {
            Command::Verify(args) => return proof::verify(args, out),
            Command::Tapd(args) => return tapd::audit(args, out).await,
            _ => {}
        }
        return Ok(Outcome::Ok);
    };
    let spec = cli.db.ok_or(CliError::NoDb)?;
    // Their files are checked before the database is opened (or created).
    let command = match cli.command {
        Command::Load(args) => return load::load(&spec, args, layout, out).await,
        Command::Import(args) => return transfer::import(&spec, args, layout, out).await,
        Command::Tapd(args) if args.writes_db() == Some(true) => {
            return tapd::import(&spec, args, layout, out).await;
        }
        other => other,
    };
    let db = db::open(&spec, access).await?;
    let outcome = match command {
        Command::Namespaces => inspect::namespaces(&db, layout, out).await,
        Command::Stats(args) => inspect::stats(&db, args, layout, out).await,
        Command::Audit(args) => audit::audit(&db, args, layout, out).await,
        Command::Get(args) => proof::get(&db, args, layout, out).await,
        Command::Proof(args) => proof::proof(&db, args, layout, out).await,
        Command::Export(args) => transfer::export(&db, args, layout, out).await,
        Command::Pin(args) => pins::pin(&db, args, layout, out).await,
        Command::Unpin(args) => pins::unpin(&db, args, layout, out).await,
        Command::Diff(args) => diff::diff(&db, args, layout, out).await,
        Command::Tapd(args) => tapd::export(&db, args, layout, out).await,
        Command::Tokens(args) => tokens::run(&db, args, out).await,
        Command::Maintain(args) => maintain::maintain(&db, &spec, args, out).await,
        Command::Universe(args) => universe::run(&db, &spec, args, out).await,
        Command::Verify(_) | Command::Load(_) | Command::Import(_) => Ok(Outcome::Ok),
    };
    db.close().await;
    outcome
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help, --version.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("bad arguments");
            eprintln!("ms-smt: {first} (see ms-smt --help)");
            return ExitCode::from(2);
        }
    };
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(CliError::Runtime)
        .and_then(|rt| rt.block_on(run(cli)));
    match result {
        Ok(Outcome::Ok) => ExitCode::SUCCESS,
        Ok(Outcome::Failed) => ExitCode::from(1),
        Err(e) => {
            let line = e.to_string().replace(['\n', '\r'], " ");
            eprintln!("ms-smt: error: {line}");
            ExitCode::from(2)
        }
    }
}
