//! `universe serve|mirror`: tapd's universe federation protocol (gRPC,
//! `universerpc.Universe`) over `--db`. `serve` answers tapd's syncer (and
//! takes `InsertProof` from callers with a write token); `mirror` copies a
//! server that speaks the protocol (this one or a tapd node) into `--db`,
//! fetching only what differs.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Subcommand};
use ms_smt::Multiverse;
use ms_smt_server::grpc::{MirrorConfig, MirrorReport, ServiceConfig, UniversePeer, serve};
use ms_smt_server::{ListenConfig, Rate, TlsIdentity, Trust};
use ms_smt_sql::{Dialect, SqlStore};
use serde_json::json;

use crate::Outcome;
use crate::db::{Db, sqlite_path};
use crate::error::{CliError, Res};
use crate::output::Output;

/// Arguments of `universe`.
#[derive(Debug, Args)]
pub struct UniverseArgs {
    #[command(subcommand)]
    command: UniverseCommand,
}

#[derive(Debug, Subcommand)]
enum UniverseCommand {
    /// Serve the database's universes over tapd's gRPC protocol until
    /// Ctrl-C or SIGTERM (a stock tapd adds it with `tapcli universe
    /// federation add --universe_host HOST:PORT`).
    Serve(ServeArgs),
    /// Mirror a universe server (ours or a tapd node) into the database:
    /// one round, or one every --every seconds; exit 1 when a universe
    /// still differs from the server's after a round.
    Mirror(MirrorArgs),
}

/// Arguments of `universe serve`.
#[derive(Debug, Args)]
struct ServeArgs {
    /// The address to listen on (port 0: any free port, printed).
    #[arg(long, default_value = "127.0.0.1:10029", value_name = "IP:PORT")]
    listen: SocketAddr,
    /// The server's certificate (PEM); with --tls-key missing too, a
    /// self-signed pair is made there on first start, as tapd does.
    /// Default: tls.cert beside the SQLite file, or here for Postgres.
    #[arg(long, value_name = "FILE")]
    tls_cert: Option<PathBuf>,
    /// The server's private key (PEM). Default: tls.key beside the
    /// certificate's default.
    #[arg(long, value_name = "FILE")]
    tls_key: Option<PathBuf>,
    /// Another name (DNS or IP) for a generated certificate; loopback is
    /// always in. Repeat for more.
    #[arg(long = "tls-name", value_name = "NAME")]
    tls_names: Vec<String>,
    /// Plain HTTP/2 without TLS: only on a loopback --listen, or with
    /// --behind-proxy.
    #[arg(long)]
    plain: bool,
    /// A TLS-terminating proxy is in front (allows --plain on any address).
    #[arg(long)]
    behind_proxy: bool,
    /// Reads need a token with a read scope (default: public, as tapd's
    /// universe server).
    #[arg(long)]
    private_read: bool,
    /// Calls per second per token and per client address (tapd's 100).
    #[arg(long, default_value_t = Rate::TAPD.per_second)]
    rate: f64,
    /// Burst of calls per token and per client address (tapd's 10).
    #[arg(long, default_value_t = Rate::TAPD.burst)]
    burst: u32,
    /// Calls handled at once; beyond, UNAVAILABLE.
    #[arg(long, default_value_t = ServiceConfig::default().max_in_flight)]
    max_in_flight: usize,
    /// QueryProof reads made at once; calls arriving meanwhile are
    /// answered together by the next read (default: one per two cores).
    #[arg(long, default_value_t = ms_smt::multiverse::default_proof_reads())]
    proof_reads: usize,
    /// QueryProof calls answered by one read at most.
    #[arg(long, default_value_t = ms_smt::multiverse::DEFAULT_PROOF_BATCH)]
    proof_batch: usize,
    /// Seconds a call may take; beyond, DEADLINE_EXCEEDED.
    #[arg(long, default_value_t = ServiceConfig::default().request_timeout.as_secs_f64())]
    request_timeout: f64,
    /// Connections open at once.
    #[arg(long, default_value_t = ListenConfig::plain().max_connections)]
    max_connections: usize,
    /// Connections open at once from one client address.
    #[arg(long, default_value_t = ListenConfig::plain().max_per_address)]
    max_per_address: usize,
    /// Seconds a TLS handshake and the HTTP/2 preface may take.
    #[arg(long, default_value_t = ListenConfig::plain().header_timeout.as_secs_f64())]
    header_timeout: f64,
    /// Seconds a connection may stay silent before it is closed.
    #[arg(long, default_value_t = ListenConfig::plain().idle_timeout.as_secs_f64())]
    idle_timeout: f64,
    /// Milliseconds a token's row is trusted before it is read again (how
    /// long a revocation takes to reach the server).
    #[arg(long, default_value_t = 1_000)]
    token_cache_ms: u64,
}

/// Arguments of `universe mirror`.
#[derive(Debug, Args)]
struct MirrorArgs {
    /// The server, HOST:PORT (tapd's universe RPC listens on 10029).
    #[arg(long, value_name = "HOST:PORT")]
    from: String,
    /// Believe exactly this certificate (a self-signed server's tls.cert,
    /// as tapd makes one), whatever name it carries.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["ca", "plain"])]
    tls_cert: Option<PathBuf>,
    /// Believe certificates signed by the authorities in this PEM file,
    /// for HOST. Default: the system's roots.
    #[arg(long, value_name = "FILE", conflicts_with = "plain")]
    ca: Option<PathBuf>,
    /// Plain HTTP/2 without TLS (a loopback server, or a trusted network).
    #[arg(long)]
    plain: bool,
    /// Mirror again every SECONDS until Ctrl-C or SIGTERM (default: one
    /// round).
    #[arg(long, value_name = "SECONDS")]
    every: Option<f64>,
    /// `QueryProof` and `AssetLeafKeys` calls in flight at once.
    #[arg(long, default_value_t = MirrorConfig::default().fetch_in_flight)]
    fetch_in_flight: usize,
    /// Leaves per commit (a universe is never split).
    #[arg(long, default_value_t = MirrorConfig::default().batch_leaves)]
    batch_leaves: usize,
}

/// Seconds as a duration; an error names the flag when `secs` is not a
/// finite, non-negative number.
fn seconds(flag: &'static str, secs: f64) -> Res<Duration> {
    Duration::try_from_secs_f64(secs).map_err(|_| CliError::BadSeconds { flag, secs })
}

/// Resolves when the process is asked to stop (Ctrl-C; SIGTERM on Unix).
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Runs `universe ...` on `db` (`spec` as the operator gave it).
pub async fn run(db: &Db, spec: &str, args: UniverseArgs, out: Output) -> Res<Outcome> {
    match args.command {
        UniverseCommand::Serve(args) => match db {
            Db::Sqlite(s) => serve_on(s.clone(), spec, args, out).await,
            Db::Postgres(s) => serve_on(s.clone(), spec, args, out).await,
        },
        UniverseCommand::Mirror(args) => match db {
            Db::Sqlite(s) => mirror_into(s.clone(), args, out).await,
            Db::Postgres(s) => mirror_into(s.clone(), args, out).await,
        },
    }
}

/// The certificate and key `serve` uses: as given, else `tls.cert` and
/// `tls.key` beside the SQLite file (the current directory for Postgres).
fn identity_paths(spec: &str, args: &ServeArgs) -> (PathBuf, PathBuf) {
    let dir = sqlite_path(spec)
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_default();
    let cert = args
        .tls_cert
        .clone()
        .unwrap_or_else(|| dir.join("tls.cert"));
    let key = args.tls_key.clone().unwrap_or_else(|| dir.join("tls.key"));
    (cert, key)
}

async fn serve_on<C: Dialect>(
    store: SqlStore<C>,
    spec: &str,
    args: ServeArgs,
    out: Output,
) -> Res<Outcome> {
    let rate = Some(Rate::new(args.rate, args.burst));
    let config = ServiceConfig::default()
        .public_read(!args.private_read)
        .per_address(rate)
        .per_token(rate)
        .max_in_flight(args.max_in_flight)
        .request_timeout(seconds("--request-timeout", args.request_timeout)?)
        .token_cache(Duration::from_millis(args.token_cache_ms));
    let (transport, cert) = if args.plain {
        if !args.listen.ip().is_loopback() && !args.behind_proxy {
            return Err(CliError::PlainNotLoopback(args.listen));
        }
        (ListenConfig::plain(), None)
    } else {
        let (cert, key) = identity_paths(spec, &args);
        let (identity, made) = TlsIdentity::load_or_generate(&cert, &key, &args.tls_names)?;
        (
            ListenConfig::tls(identity.grpc_server_config()?),
            Some((cert, made)),
        )
    };
    let listen = transport
        .max_connections(args.max_connections)
        .max_per_address(args.max_per_address)
        .header_timeout(seconds("--header-timeout", args.header_timeout)?)
        .idle_timeout(seconds("--idle-timeout", args.idle_timeout)?);
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|source| CliError::Listen {
            address: args.listen,
            source,
        })?;
    let address = listener.local_addr().map_err(|source| CliError::Listen {
        address: args.listen,
        source,
    })?;
    let multiverse = Multiverse::new(store.clone());
    let service = ms_smt_server::grpc::UniverseService::new(multiverse)
        .with_proof_reads(args.proof_reads, args.proof_batch)
        .with_config(config)
        .with_tokens(store);
    let cert_path = cert.as_ref().map(|(p, _)| p.display().to_string());
    let generated = cert.as_ref().is_some_and(|(_, made)| *made);
    out.emit(
        json!({
            "listening": address.to_string(),
            "tls": cert.is_some(),
            "tls_cert": cert_path,
            "generated_cert": generated,
            "public_read": !args.private_read,
            "rate": args.rate,
            "burst": args.burst,
        }),
        || {
            let transport = match &cert_path {
                Some(path) if generated => {
                    format!("TLS, a new self-signed certificate in {path} (pin it on clients)")
                }
                Some(path) => format!("TLS, certificate {path}"),
                None => "plain HTTP/2".to_owned(),
            };
            format!(
                "serving tapd's universe protocol on {address} ({transport}; public read {}; \
                 {} calls/s burst {} per token and address)",
                if args.private_read { "off" } else { "on" },
                args.rate,
                args.burst
            )
        },
    );
    serve(listener, service, listen, stop_signal())
        .await
        .map_err(CliError::Serve)?;
    Ok(Outcome::Ok)
}

/// The report of one round, as `--json` prints it.
fn report_json(r: &MirrorReport) -> serde_json::Value {
    json!({
        "universes": r.universes,
        "unchanged": r.unchanged,
        "fetched_whole": r.fetched_whole,
        "fetched_by_leaf": r.fetched_by_leaf,
        "leaves_fetched": r.leaves_fetched,
        "leaves_written": r.leaves_written,
        "commits": r.commits,
        "diverged": r.diverged,
        "bytes": r.bytes,
        "seconds": r.elapsed.as_secs_f64(),
    })
}

/// The report of one round, as a line.
fn report_line(from: &str, r: &MirrorReport) -> String {
    let mut line = format!(
        "mirrored {from} in {:.2?}: {} universes ({} unchanged, {} fetched whole, {} by leaf), \
         {} leaves received, {} written in {} commits, {} bytes",
        r.elapsed,
        r.universes,
        r.unchanged,
        r.fetched_whole,
        r.fetched_by_leaf,
        r.leaves_fetched,
        r.leaves_written,
        r.commits,
        r.bytes
    );
    if r.diverged > 0 {
        line.push_str(&format!(
            "; {} universes still differ (this database holds leaves the server no longer lists)",
            r.diverged
        ));
    }
    line
}

async fn mirror_into<C: Dialect>(
    store: SqlStore<C>,
    args: MirrorArgs,
    out: Output,
) -> Res<Outcome> {
    let config = MirrorConfig {
        fetch_in_flight: args.fetch_in_flight.max(1),
        batch_leaves: args.batch_leaves.max(1),
        ..MirrorConfig::default()
    };
    let every = args
        .every
        .map(|secs| seconds("--every", secs))
        .transpose()?;
    let peer = if args.plain {
        UniversePeer::connect_plain(&args.from).await
    } else {
        let trust = match (&args.tls_cert, &args.ca) {
            (Some(cert), _) => Trust::pinned_file(cert)?,
            (None, Some(ca)) => Trust::ca_file(ca)?,
            (None, None) => Trust::SystemRoots,
        };
        UniversePeer::connect_tls(&args.from, &trust).await
    }
    .map_err(|e| CliError::Connect(Box::new(e)))?
    .with_config(config);
    let multiverse = Multiverse::new(store);
    let Some(every) = every else {
        let report = round(&peer, &multiverse).await?;
        out.emit(report_json(&report), || report_line(&args.from, &report));
        return Ok(if report.diverged > 0 {
            Outcome::Failed
        } else {
            Outcome::Ok
        });
    };
    let stop = stop_signal();
    tokio::pin!(stop);
    loop {
        let report = round(&peer, &multiverse).await?;
        out.emit(report_json(&report), || report_line(&args.from, &report));
        tokio::select! {
            () = &mut stop => return Ok(Outcome::Ok),
            () = tokio::time::sleep(every) => {}
        }
    }
}

/// One mirror round.
async fn round<C: Dialect>(
    peer: &UniversePeer,
    multiverse: &Multiverse<SqlStore<C>>,
) -> Res<MirrorReport> {
    peer.mirror(multiverse)
        .await
        .map_err(|e| CliError::Mirror(Box::new(e)))
}
