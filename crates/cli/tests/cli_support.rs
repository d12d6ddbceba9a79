//! Running the built `ms-smt` binary.

use std::process::{Command, Output};

use serde_json::Value;

/// A finished run of the binary.
pub struct Run {
    /// Its exit code.
    pub code: i32,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
}

impl Run {
    /// Standard output as one JSON document.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.stdout))
    }

    /// The JSON objects on standard output, one per line.
    pub fn objects(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect()
    }
}

/// Runs the binary with `args`.
pub fn ms_smt(args: &[&str]) -> Run {
    let Output {
        status,
        stdout,
        stderr,
    } = Command::new(env!("CARGO_BIN_EXE_ms-smt"))
        .args(args)
        .output()
        .expect("run ms-smt");
    Run {
        code: status.code().expect("exit code"),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}
