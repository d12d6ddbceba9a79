//! Serves the namespaces of a SQL database over HTTPS (the federation API:
//! see `ms_smt_server`), denying by default: reads are public unless
//! `--public-read no`, everything else needs a token (`ms-smt tokens
//! create`), and every client is bounded (connections, timeouts, rate).
//!
//! ```text
//! cargo run --release --example universe_server -- \
//!     --db <sqlite path | postgres://URL> --listen HOST:PORT [settings] [--config FILE]
//! ```
//!
//! Settings, as flags (`--name value`) or as `name = value` lines of the
//! `--config` file (`#` starts a comment; flags win):
//!
//! | setting | default | |
//! |---|---|---|
//! | `tls-cert`, `tls-key` | `tls.cert`, `tls.key` beside the SQLite file (else here) | PEM; generated, self-signed, when both are missing |
//! | `tls-name` | none | more names (DNS or IP, comma-separated) for a generated certificate; loopback is always in |
//! | `plain` | `no` | `yes`: plain HTTP, only with a loopback `--listen` or `behind-proxy = yes` |
//! | `behind-proxy` | `no` | a TLS-terminating proxy in front (allows `plain` on any address) |
//! | `public-read` | `yes` | `no`: reads need a token with a read scope |
//! | `rate`, `burst` | `100`, `10` | requests per second and burst, per token and per client address (tapd's) |
//! | `max-connections`, `max-per-address` | `1024`, `64` | open connections |
//! | `header-timeout`, `idle-timeout` | `5`, `30` | seconds |
//! | `max-leaves`, `body-limit` | `10000`, `4194304` | per request |
//! | `max-in-flight`, `request-timeout` | `256`, `30` | requests at once; seconds per request |
//! | `token-cache-ms` | `1000` | how long a token row is trusted (revocation delay) |
//!
//! Runs until Ctrl-C.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use ms_smt_server::{DatabaseExt, ListenConfig, Rate, ServerConfig, TlsIdentity, serve};
use ms_smt_sql::Database;

const USAGE: &str = "usage: universe_server --db <sqlite path | postgres URL> --listen HOST:PORT \
                     [--config FILE] [--NAME VALUE ...] (settings: see the example's docs)";

const SETTINGS: [&str; 19] = [
    "db",
    "listen",
    "tls-cert",
    "tls-key",
    "tls-name",
    "plain",
    "behind-proxy",
    "public-read",
    "rate",
    "burst",
    "max-connections",
    "max-per-address",
    "header-timeout",
    "idle-timeout",
    "max-leaves",
    "body-limit",
    "max-in-flight",
    "request-timeout",
    "token-cache-ms",
];

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Settings by name: the file's, then the flags'.
struct Settings(BTreeMap<String, String>);

impl Settings {
    fn set(&mut self, name: &str, value: &str) -> Res<()> {
        if !SETTINGS.contains(&name) {
            return Err(format!("unknown setting {name:?}").into());
        }
        self.0.insert(name.to_owned(), value.trim().to_owned());
        Ok(())
    }

    fn file(&mut self, path: &Path) -> Res<()> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or_default().trim();
            if line.is_empty() {
                continue;
            }
            let (name, value) = line
                .split_once('=')
                .ok_or_else(|| format!("{}:{}: not name = value", path.display(), n + 1))?;
            self.set(name.trim(), value)?;
        }
        Ok(())
    }

    fn text(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    fn parse<T: std::str::FromStr>(&self, name: &str, default: T) -> Res<T> {
        match self.text(name) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| format!("{name}: {v:?} is not valid").into()),
        }
    }

    fn yes(&self, name: &str, default: bool) -> Res<bool> {
        match self.text(name) {
            None => Ok(default),
            Some("yes" | "true" | "on") => Ok(true),
            Some("no" | "false" | "off") => Ok(false),
            Some(v) => Err(format!("{name}: {v:?} is not yes or no").into()),
        }
    }

    fn secs(&self, name: &str, default: Duration) -> Res<Duration> {
        Ok(Duration::from_secs_f64(
            self.parse(name, default.as_secs_f64())?,
        ))
    }
}

fn configs(s: &Settings) -> Res<(ServerConfig, ListenConfig)> {
    let rate = Rate::new(
        s.parse("rate", Rate::TAPD.per_second)?,
        s.parse("burst", Rate::TAPD.burst)?,
    );
    let d = ServerConfig::default();
    let server = d
        .public_read(s.yes("public-read", true)?)
        .per_address(Some(rate))
        .per_token(Some(rate))
        .max_leaves(s.parse("max-leaves", d.max_leaves)?)
        .body_limit(s.parse("body-limit", d.body_limit)?)
        .max_in_flight(s.parse("max-in-flight", d.max_in_flight)?)
        .request_timeout(s.secs("request-timeout", d.request_timeout)?)
        .token_cache(Duration::from_millis(s.parse(
            "token-cache-ms",
            u64::try_from(d.access.token_cache.as_millis()).unwrap_or(1_000),
        )?));
    let listen: SocketAddr = s
        .text("listen")
        .ok_or(USAGE)?
        .parse()
        .map_err(|_| "listen: not HOST:PORT (an IP address and a port)")?;
    let transport = if s.yes("plain", false)? {
        if !listen.ip().is_loopback() && !s.yes("behind-proxy", false)? {
            return Err("plain HTTP only on a loopback address, or with behind-proxy = yes".into());
        }
        ListenConfig::plain()
    } else {
        let db = s.text("db").unwrap_or_default();
        let dir = if db.starts_with("postgres://") || db.starts_with("postgresql://") {
            PathBuf::from(".")
        } else {
            Path::new(db)
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_default()
        };
        let cert = s
            .text("tls-cert")
            .map_or_else(|| dir.join("tls.cert"), PathBuf::from);
        let key = s
            .text("tls-key")
            .map_or_else(|| dir.join("tls.key"), PathBuf::from);
        let names: Vec<String> = s
            .text("tls-name")
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(str::to_owned)
            .collect();
        let (identity, made) = TlsIdentity::load_or_generate(&cert, &key, &names)?;
        if made {
            println!(
                "generated a self-signed certificate: {} (pin it on clients), key {}",
                cert.display(),
                key.display()
            );
        }
        ListenConfig::tls(identity.server_config()?)
    };
    let dl = ListenConfig::plain();
    let listen = transport
        .max_connections(s.parse("max-connections", dl.max_connections)?)
        .max_per_address(s.parse("max-per-address", dl.max_per_address)?)
        .header_timeout(s.secs("header-timeout", dl.header_timeout)?)
        .idle_timeout(s.secs("idle-timeout", dl.idle_timeout)?);
    Ok((server, listen))
}

async fn run(settings: Settings) -> Res<()> {
    let db = settings.text("db").ok_or(USAGE)?.to_owned();
    let (server, listen) = configs(&settings)?;
    let database = Database::open(&db).await?;
    let listener = tokio::net::TcpListener::bind(settings.text("listen").ok_or(USAGE)?).await?;
    let scheme = match listen.transport {
        ms_smt_server::Transport::Tls(_) => "https",
        ms_smt_server::Transport::Plain => "http",
    };
    println!(
        "serving {db} on {scheme}://{} (public read {}, {} req/s burst {} per token and address)",
        listener.local_addr()?,
        if server.access.public_read {
            "on"
        } else {
            "off"
        },
        server.per_token.map_or(0.0, |r| r.per_second),
        server.per_token.map_or(0, |r| r.burst),
    );
    let stop = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    serve(listener, database.router(server), listen, stop).await?;
    Ok(())
}

fn parse_args() -> Res<Settings> {
    let mut args = std::env::args().skip(1);
    let mut flags = Vec::new();
    let mut config = None;
    while let Some(flag) = args.next() {
        let name = flag.strip_prefix("--").ok_or(USAGE)?.to_owned();
        let value = args.next().ok_or(USAGE)?;
        if name == "config" {
            config = Some(PathBuf::from(value));
        } else {
            flags.push((name, value));
        }
    }
    let mut settings = Settings(BTreeMap::new());
    if let Some(path) = config {
        settings.file(&path)?;
    }
    for (name, value) in flags {
        settings.set(&name, &value)?;
    }
    Ok(settings)
}

fn main() -> ExitCode {
    let result = parse_args().and_then(|settings| {
        tokio::runtime::Runtime::new()
            .map_err(Box::<dyn std::error::Error>::from)
            .and_then(|rt| rt.block_on(run(settings)))
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
