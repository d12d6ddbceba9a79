//! Tests whose writers run as child processes of the test binary itself
//! (`tests/contention.rs`, `tests/crash.rs`): the child finds its spec, as
//! JSON, in an environment variable, and reports to the parent line by line
//! on stdout. Their counts and seed come from the environment.

use std::io::Write;
use std::path::PathBuf;

use std::process::Stdio;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The database a child writes to.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub enum Target {
    Sqlite(PathBuf),
    Postgres(String),
}

/// `var` parsed as a count, or `default` when it is unset or empty.
pub fn count_from_env<T: std::str::FromStr>(var: &str, default: T) -> T {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => v
            .parse()
            .unwrap_or_else(|_| panic!("{var}={v} is not a count")),
        _ => default,
    }
}

/// The seed in `var` (to replay a run), or a random one when it is unset
/// or empty.
pub fn seed_from_env(var: &str) -> u64 {
    match std::env::var(var) {
        Ok(s) if !s.is_empty() => s.parse().expect(var),
        _ => rand::random(),
    }
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

/// `test`, a test function of the file whose `module_path!()` is `module`,
/// as the test harness names it: a file that is a module of a bigger test
/// binary (`tests/campaigns.rs`) has its tests under its module's name,
/// and a child must be told the name `--exact` matches.
pub fn test_name(module: &str, test: &str) -> String {
    match module.split_once("::") {
        Some((_, inner)) => format!("{inner}::{test}"),
        None => test.to_owned(),
    }
}

/// This test binary rerun as a child that runs `test` alone (a name as
/// [`test_name`] gives it), with `spec`
/// as JSON in the environment variable `env`, its stdout piped to the
/// parent, its stderr shared, and killed when the handle drops; stdin is
/// `stdin`.
pub fn child_command<T: Serialize>(
    env: &str,
    spec: &T,
    test: &str,
    stdin: Stdio,
) -> tokio::process::Command {
    let exe = std::env::current_exe().expect("current_exe");
    let mut cmd = tokio::process::Command::new(exe);
    cmd.args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(env, serde_json::to_string(spec).expect("spec json"))
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    cmd
}

/// A store a child opened on its [`Target`].
pub enum ChildStore {
    Sqlite(ms_smt_sql::SqliteStore),
    Postgres(ms_smt_sql::PostgresStore),
}
impl Target {
    /// The store on this target at `namespace`, with the stores' defaults
    /// (`SqliteStore::open`: WAL, `synchronous=FULL`; `PostgresStore::connect`).
    pub async fn open(&self, namespace: &str) -> Result<ChildStore, ms_smt_sql::SqlStoreError> {
        Ok(match self {
            Target::Sqlite(path) => ChildStore::Sqlite(
                ms_smt_sql::SqliteStore::open(path)
                    .await?
                    .open_namespace(namespace),
            ),
            Target::Postgres(url) => ChildStore::Postgres(
                ms_smt_sql::PostgresStore::connect(url)
                    .await?
                    .open_namespace(namespace),
            ),
        })
    }
}
