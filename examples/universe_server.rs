//! Serves the namespaces of a SQL database over HTTP (the federation API:
//! see `ms_smt::federation`).
//!
//! ```text
//! cargo run --release --example universe_server --features http -- \
//!     --db <sqlite path | postgres://URL> --listen 127.0.0.1:PORT
//! ```
//!
//! Runs until Ctrl-C.

use std::process::ExitCode;

use ms_smt::federation::{Database, ServerConfig, serve};

const USAGE: &str = "usage: universe_server --db <sqlite path | postgres URL> --listen HOST:PORT";

async fn run(db: String, listen: String) -> Result<(), Box<dyn std::error::Error>> {
    let database = Database::open(&db).await?;
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    println!("serving {db} on http://{}", listener.local_addr()?);
    let stop = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    serve(listener, database.router(ServerConfig::default()), stop).await?;
    Ok(())
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (mut db, mut listen) = (None, None);
    while let Some(flag) = args.next() {
        match (flag.as_str(), args.next()) {
            ("--db", Some(v)) => db = Some(v),
            ("--listen", Some(v)) => listen = Some(v),
            _ => {
                eprintln!("{USAGE}");
                return ExitCode::FAILURE;
            }
        }
    }
    let (Some(db), Some(listen)) = (db, listen) else {
        eprintln!("{USAGE}");
        return ExitCode::FAILURE;
    };
    let result = tokio::runtime::Runtime::new()
        .map_err(Box::<dyn std::error::Error>::from)
        .and_then(|rt| rt.block_on(run(db, listen)));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
