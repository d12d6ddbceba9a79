//! Tests whose writers run as child processes of the test binary itself
//! (`tests/contention.rs`, `tests/crash.rs`): the child finds its spec, as
//! JSON, in an environment variable, and reports to the parent line by line
//! on stdout.

use std::io::Write;
use std::path::PathBuf;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The database a child writes to.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub enum Target {
    Sqlite(PathBuf),
    Postgres(String),
}

/// One line to the parent; a closed pipe ends the child.
pub fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
        std::process::exit(0);
    }
}

/// The child's spec from the environment variable `env`; `None` in the
/// parent.
pub fn child_spec<T: DeserializeOwned>(env: &str) -> Option<T> {
    let spec = std::env::var(env).ok()?;
    Some(serde_json::from_str(&spec).expect("child spec"))
}
