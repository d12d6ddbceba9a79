//! What the benches (and the measuring examples) share: the tokio runtime,
//! random batches, a scratch SQLite file.
#![allow(dead_code)] // each bench uses its own part of this module

use std::ops::{Range, RangeInclusive};

use ms_smt::{Key, Leaf};
use rand::Rng;
use rand::rngs::StdRng;
use tokio::runtime::Runtime;

/// One `insert_many` argument.
pub type Batch = Vec<(Key, Leaf)>;

/// A multi-threaded runtime with two workers.
pub fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// `n` random leaves: random 32-byte keys, values of `value_len` random
/// bytes, sums in `sum`.
pub fn random_batch(
    rng: &mut StdRng,
    n: usize,
    value_len: RangeInclusive<usize>,
    sum: Range<u64>,
) -> Batch {
    (0..n)
        .map(|_| {
            let mut key = [0u8; 32];
            rng.fill(&mut key);
            let len = rng.gen_range(value_len.clone());
            let mut value = vec![0u8; len];
            rng.fill(&mut value[..]);
            let sum = rng.gen_range(sum.clone());
            (Key(key), Leaf::new(value, sum))
        })
        .collect()
}

/// A SQLite database file in the temporary directory, removed with its
/// WAL and SHM companions on drop.
pub struct ScratchSqlite {
    pub path: std::path::PathBuf,
}
impl ScratchSqlite {
    /// `<tmp>/<prefix>-<pid>.db`.
    pub fn new(prefix: &str) -> Self {
        let path = std::env::temp_dir().join(format!("{prefix}-{}.db", std::process::id()));
        ScratchSqlite { path }
    }
}
impl Drop for ScratchSqlite {
    fn drop(&mut self) {
        crate::remove_sqlite_files(&self.path);
    }
}
