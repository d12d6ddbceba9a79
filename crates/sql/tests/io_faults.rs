//! I/O faults under SQLite with the store's default durability (WAL,
//! `synchronous=FULL`), in a child process (this test binary re-executed
//! with `MSSMT_IOFAULT_CHILD` set) that writes batches until one fails:
//!
//! * `sqlite_fsync_eio`: the child runs under `strace -f -e
//!   inject=fsync,fdatasync:error=EIO:when=K+`, so the K-th sync and every
//!   later one fails (K over a range that starts inside the first commit).
//! * `sqlite_enospc`: the database lives on a tmpfs a few hundred KiB
//!   larger than the seeded database, and the child writes until the disk
//!   is full; the tmpfs is then grown ("the fault is gone"). Without the
//!   right to mount (not root), the same runs with `pwrite64` failing with
//!   ENOSPC through strace.
//!
//! Pass: an `ACK` only for batches that are durable (every acknowledged
//! leaf reads back after the fault), errors typed (`TreeError::Store`
//! with SQLite's I/O or full-disk error), the reopened store at the root
//! of the last acknowledged batch or of the failed one, the audit clean,
//! and the next write succeeding.
#![cfg(all(feature = "sqlite", feature = "postgres"))]

use ms_smt_test_support as support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use ms_smt::store::MemoryStore;

use ms_smt::{CompactedTree, ComputedNode, Key, Leaf};
use ms_smt_sql::SqliteStore;
use support::{TempDb, hkey, unique};

const CHILD_ENV: &str = "MSSMT_IOFAULT_CHILD";

/// Batch `i`: 60 keys, some replacing earlier ones, values of 40-100 bytes.
fn batch(i: u64) -> Vec<(Key, Leaf)> {
    (0..60)
        .map(|j| {
            let key = hkey("io", (i * 37 + j) % 4_000);
            let value = format!("{i}/{j}/")
                .repeat(8 + (j % 8) as usize)
                .into_bytes();
            (key, Leaf::new(value, i * 100 + j + 1))
        })
        .collect()
}

/// In a child: write `count` batches from `start` on the database at
/// `path`, stopping at the first failure; prints `ACK i <sum> <hash>` or `ERR i <error>`.
async fn child_mode() -> bool {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return false;
    };
    let mut parts = spec.split('|');
    let (Some(path), Some(start), Some(count)) = (parts.next(), parts.next(), parts.next()) else {
        panic!("child spec {spec:?}");
    };
    let start: u64 = start.parse().expect("start");
    let count: u64 = count.parse().expect("count");
    println!();
    match SqliteStore::open(path).await {
        Err(e) => println!("ERR open {e} | {e:?}"),
        Ok(store) => {
            let tree = CompactedTree::new(store.open_namespace("io"));
            for i in start..start + count {
                match tree.insert_many(batch(i)).await {
                    Ok(root) => println!("ACK {i} {} {}", root.sum, root.hash),
                    Err(e) => {
                        println!("ERR {i} {e} | {e:?}");
                        break;
                    }
                }
            }
        }
    }
    std::process::exit(0);
}

/// What one child run reported.
#[derive(Debug, Default)]
struct Run {
    acked: Vec<(u64, String)>,
    failed: Option<(u64, String)>,
}

fn run_child(test: &str, db: &Path, start: u64, count: u64, strace: Option<&str>) -> Run {
    let exe = std::env::current_exe().expect("current_exe");
    let mut cmd = match strace {
        Some(inject) => {
            // strace injects only into the calls it traces.
            let calls = inject
                .trim_start_matches("inject=")
                .split(':')
                .next()
                .unwrap_or_default();
            let mut c = Command::new("strace");
            c.args(["-f", "-qq", "-o", "/dev/null"])
                .args(["-e", &format!("trace={calls}"), "-e", inject])
                .arg(&exe);
            c
        }
        None => Command::new(&exe),
    };
    let out = cmd
        .arg("--exact")
        .arg(support::child::test_name(module_path!(), test))
        .args(["--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("{}|{start}|{count}", db.display()))
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("run the child (is strace installed?): {e}"));
    let mut run = Run::default();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let mut parts = line.splitn(3, ' ');
        match (parts.next(), parts.next(), parts.next()) {
            (Some("ACK"), Some(i), Some(rest)) => {
                run.acked.push((i.parse().expect("index"), rest.to_owned()))
            }
            (Some("ERR"), Some(i), Some(rest)) => {
                run.failed = Some((i.parse().unwrap_or(u64::MAX), rest.to_owned()))
            }
            _ => {}
        }
    }
    run
}

/// The roots of batches `0..=i` applied in order, for every `i < n`.
async fn model_roots(n: u64) -> (Vec<ComputedNode>, Vec<HashMap<Key, Leaf>>) {
    let tree = CompactedTree::new(MemoryStore::new());
    let mut roots = Vec::new();
    let mut models = Vec::new();
    let mut model = HashMap::new();
    for i in 0..n {
        let b = batch(i);
        roots.push(tree.insert_many(b.clone()).await.expect("memory"));
        model.extend(b);
        models.push(model.clone());
    }
    (roots, models)
}

/// After a faulted run: the store holds the last acknowledged batch or the
/// failed one, every acknowledged leaf reads back, the audit is clean and
/// the next write works. Returns the number of batches now stored.
async fn check_after(db: &Path, run: &Run, stored_before: u64, what: &str) -> u64 {
    let (roots, models) = model_roots(stored_before + 210).await;
    for (i, sum) in &run.acked {
        let want = roots[*i as usize];
        assert_eq!(
            sum,
            &format!("{} {}", want.sum, want.hash),
            "{what}: acknowledged root of batch {i}"
        );
    }
    let acked = run.acked.last().map_or(stored_before, |(i, _)| i + 1);
    let store = SqliteStore::open(db).await.expect("reopen after the fault");
    let tree = CompactedTree::new(store.open_namespace("io").with_recent_nodes(0));
    let root = tree.root().await.expect("root");
    let last_acked = match acked {
        0 => ComputedNode::empty_root(),
        n => roots[n as usize - 1],
    };
    let stored = if root == last_acked {
        acked
    } else if root == roots[acked as usize] {
        // The failed batch reached the disk after all: an error is allowed
        // for a batch that is durable, never an Ok for one that is not.
        acked + 1
    } else {
        panic!("{what}: root is neither the last acknowledged batch's nor the failed one's")
    };
    if stored > 0 {
        let model = &models[stored as usize - 1];
        let keys: Vec<Key> = model.keys().copied().collect();
        let leaves = tree.get_many(&keys).await.expect("read back");
        for (k, l) in keys.iter().zip(&leaves) {
            assert_eq!(Some(l), model.get(k), "{what}: a leaf did not survive");
        }
    }
    let report = tree.audit().await.expect("audit");
    assert!(report.is_clean(), "{what}: {:?}", report.problems);
    drop(tree);
    // Close the files now, so a tmpfs under them can be unmounted.
    store.pool().close().await;
    stored
}

/// The failure must be SQLite's own I/O error, typed (`TreeError::Store`
/// for a batch, `SqlStoreError::Database` when opening failed).
fn assert_io_error(run: &Run, what: &str, expected: &[&str]) {
    let (i, err) = run
        .failed
        .as_ref()
        .unwrap_or_else(|| panic!("{what}: the fault never reached the writer"));
    assert!(
        expected.iter().any(|e| err.contains(e)),
        "{what}: batch {i} failed with an unexpected error: {err}"
    );
}

#[tokio::test]
async fn sqlite_fsync_eio() {
    if child_mode().await {
        return;
    }
    let file = TempDb::new("io_eio");
    let mut stored = 0;
    let mut figures = Vec::new();
    for k in [1, 2, 3, 4, 6, 9, 14] {
        let inject = format!("inject=fsync,fdatasync:error=EIO:when={k}+");
        let run = run_child("sqlite_fsync_eio", &file.path, stored, 50, Some(&inject));
        let what = format!("fsync EIO from sync {k}");
        assert_io_error(&run, &what, &["disk I/O error", "I/O"]);
        let before = stored;
        stored = check_after(&file.path, &run, stored, &what).await;
        let landed = stored > before + run.acked.len() as u64;
        figures.push(format!(
            "from sync {k}: {} acknowledged, the failed batch {}",
            run.acked.len(),
            if landed { "landed" } else { "rolled back" }
        ));
        // The fault is gone: writes work again (a child without strace).
        let ok = run_child("sqlite_fsync_eio", &file.path, stored, 3, None);
        assert!(
            ok.failed.is_none() && ok.acked.len() == 3,
            "{what}: writes after the fault: {ok:?}"
        );
        stored = check_after(&file.path, &ok, stored, &what).await;
    }
    println!("fsync EIO: {}", figures.join("; "));
}

/// A tmpfs mounted at a fresh directory, unmounted on drop.
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    fn mount(bytes: u64) -> Option<Tmpfs> {
        let dir = std::env::temp_dir().join(unique("ms_smt_tmpfs"));
        std::fs::create_dir_all(&dir).ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}")])
            .arg("tmpfs")
            .arg(&dir)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            Some(Tmpfs { dir })
        } else {
            let _ = std::fs::remove_dir(&dir);
            None
        }
    }

    fn grow(&self, bytes: u64) {
        let ok = Command::new("mount")
            .args(["-o", &format!("remount,size={bytes}")])
            .arg(&self.dir)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "remount the tmpfs larger");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazily if a file is still open: it goes when the last one closes.
        let unmounted = Command::new("umount")
            .arg(&self.dir)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !unmounted {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test]
async fn sqlite_enospc() {
    if child_mode().await {
        return;
    }
    // The child works on a normal disk first.
    let seed = TempDb::new("io_enospc_seed");
    let run = run_child("sqlite_enospc", &seed.path, 0, 3, None);
    assert_eq!(run.acked.len(), 3, "seed run: {run:?}");
    match Tmpfs::mount(1 << 20) {
        Some(fs) => {
            let db = fs.dir.join("full.db");
            let run = run_child("sqlite_enospc", &db, 0, 500, None);
            let what = "tmpfs of 1 MiB";
            assert_io_error(&run, what, &["full", "disk I/O error"]);
            fs.grow(64 << 20);
            let stored = check_after(&db, &run, 0, what).await;
            let after = run_child("sqlite_enospc", &db, stored, 3, None);
            assert_eq!(
                after.acked.len(),
                3,
                "{what}: writes once there is room: {after:?}"
            );
            println!(
                "ENOSPC on a 1 MiB tmpfs: {} batches acknowledged, then `{}`; {} stored after growing it; {} more written",
                run.acked.len(),
                run.failed
                    .as_ref()
                    .map_or("", |f| f.1.split(" | ").next().unwrap_or("")),
                stored,
                after.acked.len()
            );
        }
        None => {
            println!(
                "sqlite_enospc: cannot mount a tmpfs here (not root); injecting ENOSPC with strace"
            );
            let file = TempDb::new("io_enospc");
            let run = run_child(
                "sqlite_enospc",
                &file.path,
                0,
                500,
                Some("inject=pwrite64,write:error=ENOSPC:when=40+"),
            );
            let what = "pwrite64 ENOSPC";
            assert_io_error(&run, what, &["full", "disk I/O error"]);
            let stored = check_after(&file.path, &run, 0, what).await;
            println!(
                "ENOSPC through strace: {} acknowledged, {stored} stored",
                run.acked.len()
            );
        }
    }
}
