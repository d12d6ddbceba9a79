//! Crash tests with real processes.
//!
//! A child process (this test binary, re-executed with `--exact <test>` and
//! `MSSMT_CRASH_CHILD` set) streams `insert_many` batches into one
//! namespace and prints `BEGIN i` before and `ACK i <root> <sum>` after each
//! batch. The parent crashes it at random moments: some time after it is
//! ready, right after an acknowledgement, or inside a batch (a random time
//! after a `BEGIN`, up to the batch's typical duration).
//!
//! * `sqlite_sigkill`: SIGKILL of the writer, SQLite with the store's
//!   default durability (`SqliteStore::open`: WAL, `synchronous=FULL`).
//! * `postgres_sigkill`: SIGKILL of the writer on `MSSMT_PG_URL`; after each
//!   kill the killed client's backend must leave `pg_stat_activity`
//!   (measured), so the next writer is not blocked behind it.
//! * `postgres_immediate_stop`: `pg_ctl stop -m immediate` of a cluster of
//!   its own with fsync, synchronous_commit and full_page_writes on
//!   (`scripts/pg-cluster.sh`; skipped with a SKIPPED line when the server
//!   binaries are missing, failed when `MSSMT_REQUIRE_PG=1`) while the
//!   writer streams. The server restarts (crash recovery) on the same port
//!   after 50-1000 ms; the writer then either fails or carries on, and is
//!   killed once it acknowledges a batch after the restart. At the last
//!   stop the server stays down until the writer reports its error (no
//!   writer may wait forever).
//!
//! After each crash the parent opens a fresh handle and checks: the stored
//! root is the root after the last acknowledged batch or after the one in
//! flight (never anything else: no acknowledged batch lost), every
//! acknowledged root equals the model's, every key ever written reads back
//! as the model says (deleted keys read empty), and the audit is clean
//! with the model's leaf count. The next child continues from the stored
//! state. Batch `i` is a pure function of (seed, i): 20-200 writes over a
//! space of 10,000 keys, 15 % of them deletes.
//!
//! Counts (defaults keep the suite fast): `MSSMT_CRASH_KILLS_SQLITE` (20),
//! `MSSMT_CRASH_KILLS_PG` (10), `MSSMT_CRASH_PG_STOPS` (3); the reliability
//! figures use 200 / 100 / 20. `MSSMT_CRASH_SEED` replays a campaign's
//! batches (the crash moments stay random). `MSSMT_CRASH_VERBOSE=1`
//! prints one line per crash.
#![cfg(all(feature = "sqlite", feature = "postgres"))]

use ms_smt_test_support as support;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use ms_smt::store::{AuditStore, MemoryStore, Writable};

use ms_smt::{CompactedTree, ComputedNode, Key, Leaf};
use ms_smt_sql::{PostgresStore, SqliteStore};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use support::child::{self, ChildStore, Target, child_spec, count_from_env, say, seed_from_env};
use support::{TempDb, hkey, pg_url, unique};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

/// Set in a child's environment: its [`ChildSpec`] as JSON.
const CHILD_ENV: &str = "MSSMT_CRASH_CHILD";
/// Keys a campaign writes to.
const KEYSPACE: u64 = 10_000;
/// How long a child may go without the expected progress.
const STALL: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------
// Batches and the model
// ---------------------------------------------------------------------------

/// Batch `i` of campaign `seed`.
fn batch(seed: u64, i: u64) -> Vec<(Key, Leaf)> {
    let mut rng = StdRng::seed_from_u64(seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let tag = format!("crash-{seed}");
    let n = rng.gen_range(20..=200);
    (0..n)
        .map(|j| {
            let key = hkey(&tag, rng.gen_range(0..KEYSPACE));
            let leaf = if rng.gen_ratio(15, 100) {
                Leaf::empty()
            } else {
                let value = format!("b{i}/{j}/{}", rng.gen_range(0..u32::MAX));
                Leaf::new(
                    value.repeat(rng.gen_range(1..=4)).into_bytes(),
                    rng.gen_range(1..1_000_000),
                )
            };
            (key, leaf)
        })
        .collect()
}

/// The state after batches `0..next`: a memory tree and every key ever
/// written with its leaf (empty once deleted).
struct Model {
    seed: u64,
    tree: CompactedTree<MemoryStore>,
    leaves: HashMap<Key, Leaf>,
    root: ComputedNode,
    next: u64,
}

impl Model {
    fn new(seed: u64) -> Self {
        Model {
            seed,
            tree: CompactedTree::new(MemoryStore::new()),
            leaves: HashMap::new(),
            root: ComputedNode::empty_root(),
            next: 0,
        }
    }

    /// Applies batch `next`.
    async fn advance(&mut self) {
        let b = batch(self.seed, self.next);
        self.root = self.tree.insert_many(b.clone()).await.expect("model");
        self.leaves.extend(b);
        self.next += 1;
    }

    /// The root after batch `next` (the model is left as it was).
    async fn peek(&self) -> ComputedNode {
        let b = batch(self.seed, self.next);
        let undo: Vec<(Key, Leaf)> = b
            .iter()
            .map(|(k, _)| (*k, self.leaves.get(k).cloned().unwrap_or_default()))
            .collect();
        let root = self.tree.insert_many(b).await.expect("model");
        let back = self.tree.insert_many(undo).await.expect("model undo");
        assert_eq!(back, self.root, "model undo");
        root
    }

    fn live(&self) -> usize {
        self.leaves.values().filter(|l| !l.is_empty()).count()
    }
}

// ---------------------------------------------------------------------------
// The child
// ---------------------------------------------------------------------------

#[derive(Serialize, Deserialize, Debug, Clone)]
struct ChildSpec {
    target: Target,
    namespace: String,
    seed: u64,
    start: u64,
}

/// Runs the child when this process is one; returns false in the parent.
async fn child_mode() -> bool {
    let Some(spec) = child_spec::<ChildSpec>(CHILD_ENV) else {
        return false;
    };
    match spec.target.open(&spec.namespace).await {
        Ok(ChildStore::Sqlite(store)) => child_loop(CompactedTree::new(store), &spec).await,
        Ok(ChildStore::Postgres(store)) => child_loop(CompactedTree::new(store), &spec).await,
        Err(e) => say(&format!("ERR open {e:?}")),
    }
    std::process::exit(2);
}

/// Writes batches `start..` until killed (or an error, reported as `ERR`).
async fn child_loop<S: Writable + AuditStore>(tree: CompactedTree<S>, spec: &ChildSpec) {
    // A newline first: libtest has printed "test <name> ... " without one.
    say("\nREADY");
    for i in spec.start..spec.start + 1_000_000 {
        say(&format!("BEGIN {i}"));
        match tree.insert_many(batch(spec.seed, i)).await {
            Ok(root) => say(&format!("ACK {i} {} {}", root.hash, root.sum)),
            Err(e) => {
                say(&format!("ERR {i} {e} | {e:?}"));
                return;
            }
        }
    }
}

// ---------------------------------------------------------------------------
// A durable Postgres cluster of our own (scripts/pg-cluster.sh)
// ---------------------------------------------------------------------------

const CLUSTER_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/pg-cluster.sh");

struct Cluster {
    dir: String,
    url: String,
}

fn cluster_cmd(args: &[&str]) -> std::process::Output {
    std::process::Command::new(CLUSTER_SCRIPT)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run scripts/pg-cluster.sh")
}

/// Runs the script without blocking the runtime (the parent keeps reading
/// the writer's lines meanwhile); its stdout.
async fn cluster_ok(args: &[&str]) -> String {
    let out = Command::new(CLUSTER_SCRIPT)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .expect("run scripts/pg-cluster.sh");
    assert!(
        out.status.success(),
        "pg-cluster.sh {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf8")
        .trim()
        .to_string()
}

impl Cluster {
    /// A started cluster, or `None` (after printing why) when Postgres is
    /// not installed and `MSSMT_REQUIRE_PG` is not 1.
    async fn create(test: &str) -> Option<Cluster> {
        let out = cluster_cmd(&["init"]);
        if out.status.code() == Some(3) {
            if std::env::var("MSSMT_REQUIRE_PG").as_deref() == Ok("1") {
                panic!(
                    "postgres test {test} FAILED: no PostgreSQL server binaries but MSSMT_REQUIRE_PG=1"
                );
            }
            eprintln!(
                "postgres test {test} SKIPPED: no PostgreSQL server binaries (initdb, pg_ctl)"
            );
            return None;
        }
        assert!(
            out.status.success(),
            "pg-cluster.sh init failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let dir = String::from_utf8(out.stdout)
            .expect("utf8")
            .trim()
            .to_string();
        let mut cluster = Cluster {
            dir,
            url: String::new(),
        };
        cluster.start().await;
        Some(cluster)
    }

    /// Starts the server, on its previous port when it has one.
    async fn start(&mut self) {
        let port = (self.url.rsplit(':').next())
            .and_then(|p| p.split('/').next())
            .filter(|p| !p.is_empty());
        let mut args = vec!["start", self.dir.as_str()];
        args.extend(port);
        self.url = cluster_ok(&args).await;
    }

    async fn stop_immediate(&self) {
        cluster_ok(&["stop-immediate", &self.dir]).await;
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = cluster_cmd(&["destroy", &self.dir]);
    }
}

// ---------------------------------------------------------------------------
// The parent
// ---------------------------------------------------------------------------

enum Mode {
    Sqlite(PathBuf),
    PgClient(String),
    PgServer(Cluster),
}

impl Mode {
    fn target(&self) -> Target {
        match self {
            Mode::Sqlite(path) => Target::Sqlite(path.clone()),
            Mode::PgClient(url) => Target::Postgres(url.clone()),
            Mode::PgServer(cluster) => Target::Postgres(cluster.url.clone()),
        }
    }
}

/// When a round's crash comes.
#[derive(Debug, Clone, Copy)]
enum Trigger {
    /// This long after the child is ready.
    Delay(Duration),
    /// Right after the child's k-th acknowledgement.
    AfterAck(usize),
    /// This long after the child's k-th `BEGIN`.
    AfterBegin(usize, Duration),
}

/// What a child said in one round.
#[derive(Default, Debug)]
struct Said {
    ready: bool,
    begins: usize,
    begun: Option<u64>,
    acks: Vec<(u64, String, u64)>,
    err: Option<String>,
    other: Vec<String>,
    /// Durations BEGIN -> ACK.
    batch_times: Vec<Duration>,
    begun_at: Option<Instant>,
}

impl Said {
    fn record(&mut self, line: &str) {
        let mut parts = line.split(' ');
        match parts.next() {
            Some("READY") => self.ready = true,
            Some("BEGIN") => {
                self.begins += 1;
                self.begun = Some(parts.next().and_then(|s| s.parse().ok()).expect("BEGIN i"));
                self.begun_at = Some(Instant::now());
            }
            Some("ACK") => {
                let i: u64 = parts.next().and_then(|s| s.parse().ok()).expect("ACK i");
                let hash = parts.next().expect("ACK root").to_string();
                let sum: u64 = parts.next().and_then(|s| s.parse().ok()).expect("ACK sum");
                assert_eq!(Some(i), self.begun, "ACK without BEGIN: {line}");
                self.acks.push((i, hash, sum));
                if let Some(t) = self.begun_at.take() {
                    self.batch_times.push(t.elapsed());
                }
            }
            Some("ERR") => self.err = Some(line.to_string()),
            _ => self.other.push(line.to_string()),
        }
    }

    /// True when the batch in flight had begun (a `BEGIN` after the last
    /// `ACK`).
    fn in_batch(&self) -> bool {
        match (self.begun, self.acks.last()) {
            (Some(b), Some((a, _, _))) => b > *a,
            (Some(_), None) => true,
            (None, _) => false,
        }
    }
}

/// A campaign's figures.
#[derive(Default, Debug)]
struct Figures {
    crashes: usize,
    /// Crashed inside insert_many; the batch was rolled back.
    rolled_back: usize,
    /// Crashed inside insert_many after its commit (root = in-flight).
    landed_unacked: usize,
    /// Crashed outside a batch (before the first, or between ACK and BEGIN).
    outside: usize,
    acked: usize,
    leaves_checked: usize,
    audits: usize,
    /// Postgres client kills: rounds where the killed client's backend was
    /// still listed right after the kill, and the longest it stayed.
    backend_lingered: usize,
    max_linger: Duration,
    /// Server stops: the writer's errors by kind, how often it carried on
    /// after the restart instead, and (last stop, server left down) how
    /// long it took to report which error.
    writer_errors: HashMap<String, usize>,
    writer_resumed: usize,
    /// Server stops: a stale pooled connection failing the batch after the
    /// first one acknowledged past the restart.
    stale_after_restart: usize,
    outage_error: Option<(Duration, String)>,
}

/// The child for `spec`, running `test`, named `app` on Postgres.
fn child_command(spec: &ChildSpec, test: &str, app: &str) -> Command {
    let mut cmd = child::child_command(
        CHILD_ENV,
        spec,
        &child::test_name(module_path!(), test),
        Stdio::null(),
    );
    cmd.env("PGAPPNAME", app);
    cmd
}

/// "ERR i <display> | <debug>" -> the display text with numbers as N.
fn error_kind(err: &str) -> String {
    let display = err.splitn(3, ' ').nth(2).unwrap_or(err);
    let display = display.split(" | ").next().unwrap_or(display);
    let mut out = String::new();
    let mut digits = false;
    for c in display.chars() {
        if !c.is_ascii_digit() {
            out.push(c);
        } else if !digits {
            out.push('N');
        }
        digits = c.is_ascii_digit();
    }
    out
}

/// Awaits `fut` while recording what the child says.
async fn reading<F: std::future::Future>(
    fut: F,
    lines: &mut Lines<BufReader<ChildStdout>>,
    said: &mut Said,
    eof: &mut bool,
) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    loop {
        if *eof {
            return fut.await;
        }
        tokio::select! {
            out = &mut fut => return out,
            line = lines.next_line() => match line.expect("read child stdout") {
                Some(line) => said.record(&line),
                None => *eof = true,
            },
        }
    }
}

async fn next_line(lines: &mut Lines<BufReader<ChildStdout>>, what: &str) -> Option<String> {
    tokio::time::timeout(STALL, lines.next_line())
        .await
        .unwrap_or_else(|_| panic!("{what}: child silent for {STALL:?} (hang)"))
        .expect("read child stdout")
}

/// Runs `rounds` crash rounds; panics on the first violation.
async fn campaign(test: &str, mut mode: Mode, rounds: usize) -> Figures {
    let seed = seed_from_env("MSSMT_CRASH_SEED");
    println!("{test}: seed {seed}, {rounds} crashes");
    let namespace = unique(test);
    let mut model = Model::new(seed);
    let mut rng = StdRng::seed_from_u64(seed.rotate_left(17));
    let mut fig = Figures::default();
    // Typical BEGIN -> ACK time, to aim crashes inside a batch.
    let mut typical = Duration::from_millis(20);
    let verbose = std::env::var("MSSMT_CRASH_VERBOSE").as_deref() == Ok("1");

    for round in 0..rounds {
        let what = format!("{test} round {round} (seed {seed})");
        let app = format!("mssmt_crash_{}_{round}", std::process::id());
        let spec = ChildSpec {
            target: mode.target(),
            namespace: namespace.clone(),
            seed,
            start: model.next,
        };
        let mut child: Child = child_command(&spec, test, &app)
            .spawn()
            .expect("spawn child");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let mut said = Said::default();
        while !said.ready {
            let Some(line) = next_line(&mut lines, &what).await else {
                panic!("{what}: child exited before READY: {said:?}");
            };
            said.record(&line);
            if let Some(err) = &said.err {
                panic!("{what}: child failed to start: {err}");
            }
        }
        if let (Mode::PgClient(url), 0) = (&mode, round) {
            // The backend check after each kill looks for the child's
            // application name: make sure it is there while the child runs.
            let admin = sqlx::PgPool::connect(url).await.expect("admin");
            let (n,): (i64,) =
                sqlx::query_as("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1")
                    .bind(&app)
                    .fetch_one(&admin)
                    .await
                    .expect("pg_stat_activity");
            assert!(
                n >= 1,
                "{what}: the child's connections are not listed as {app}"
            );
            admin.close().await;
        }
        let trigger = match rng.gen_range(0..100) {
            0..35 => Trigger::Delay(Duration::from_millis(rng.gen_range(0..300))),
            35..60 => Trigger::AfterAck(rng.gen_range(1..=4)),
            _ => {
                let max = typical.as_micros() as u64 * 6 / 5 + 1;
                Trigger::AfterBegin(
                    rng.gen_range(1..=4),
                    Duration::from_micros(rng.gen_range(0..max)),
                )
            }
        };
        let started = Instant::now();
        let mut crash_at = match trigger {
            Trigger::Delay(d) => Some(started + d),
            _ => None,
        };
        // Read until the trigger fires.
        loop {
            if crash_at.is_some_and(|t| Instant::now() >= t) {
                break;
            }
            let wake = crash_at.unwrap_or(started + STALL);
            tokio::select! {
                line = lines.next_line() => {
                    let Some(line) = line.expect("read child stdout") else {
                        panic!("{what}: child exited by itself: {said:?}");
                    };
                    said.record(&line);
                    if let Some(err) = &said.err {
                        panic!("{what}: the writer got an error: {err}");
                    }
                    match trigger {
                        Trigger::AfterAck(k) if said.acks.len() >= k => break,
                        Trigger::AfterBegin(k, d) if said.begins >= k && crash_at.is_none() => {
                            crash_at = Some(Instant::now() + d);
                        }
                        _ => {}
                    }
                }
                _ = tokio::time::sleep_until(wake.into()) => {
                    if crash_at.is_none() {
                        panic!("{what}: no progress for {STALL:?} ({trigger:?}): {said:?}");
                    }
                }
            }
        }

        // Crash.
        fig.crashes += 1;
        let crashed = Instant::now();
        match &mut mode {
            Mode::Sqlite(_) | Mode::PgClient(_) => {
                child.start_kill().expect("SIGKILL");
                while let Some(line) = next_line(&mut lines, &what).await {
                    said.record(&line);
                }
            }
            Mode::PgServer(cluster) => {
                let stopped = Instant::now();
                let mut eof = false;
                reading(cluster.stop_immediate(), &mut lines, &mut said, &mut eof).await;
                if round + 1 == rounds {
                    // The last stop: the server stays down until the writer
                    // reports an error (it must not wait forever).
                    while let Some(line) = next_line(&mut lines, &what).await {
                        said.record(&line);
                    }
                    let err = said.err.clone().unwrap_or_else(|| {
                        panic!("{what}: the writer ended without an error: {said:?}")
                    });
                    fig.outage_error = Some((stopped.elapsed(), err));
                    cluster.start().await;
                } else {
                    // A short outage, then a restart on the same port. What
                    // the writer says before the restart belongs to commits
                    // made before the stop (or is its error); once it
                    // acknowledges a batch after the restart it is killed.
                    let outage = Duration::from_millis(rng.gen_range(50..1000));
                    reading(tokio::time::sleep(outage), &mut lines, &mut said, &mut eof).await;
                    let acks_before = said.acks.len();
                    reading(cluster.start(), &mut lines, &mut said, &mut eof).await;
                    let mut killed = false;
                    loop {
                        if !killed && said.acks.len() > acks_before {
                            child.start_kill().expect("SIGKILL");
                            killed = true;
                        }
                        match next_line(&mut lines, &what).await {
                            Some(line) => said.record(&line),
                            None => break,
                        }
                    }
                    match &said.err {
                        // After a batch acknowledged past the restart, the
                        // next one may still draw a pooled connection from
                        // before the stop (the pool does not test them on
                        // acquire) and fail on it before the kill lands:
                        // allowed for a broken connection, nothing else.
                        Some(err) if killed => {
                            assert!(
                                err.contains("error communicating with database"),
                                "{what}: the writer acknowledged a batch after the restart and then failed: {err}"
                            );
                            fig.stale_after_restart += 1;
                            fig.writer_resumed += 1;
                        }
                        Some(err) => {
                            *fig.writer_errors.entry(error_kind(err)).or_default() += 1;
                        }
                        None if killed => fig.writer_resumed += 1,
                        None => panic!("{what}: the writer ended without an error: {said:?}"),
                    }
                }
            }
        }
        let status = child.wait().await.expect("wait child");
        if matches!(mode, Mode::Sqlite(_) | Mode::PgClient(_)) {
            assert!(
                said.err.is_none(),
                "{what}: the writer got an error: {:?}",
                said.err
            );
            assert!(!status.success(), "{what}: child was not killed");
        }
        if !said.batch_times.is_empty() {
            let mut t = said.batch_times.clone();
            t.sort();
            typical = (typical + t[t.len() / 2]) / 2;
        }

        // The acknowledged batches, replayed.
        for (i, hash, sum) in &said.acks {
            assert_eq!(*i, model.next, "{what}: acknowledged out of order");
            model.advance().await;
            assert_eq!(
                (hash.as_str(), *sum),
                (model.root.hash.to_hex().as_str(), model.root.sum),
                "{what}: batch {i} acknowledged a root the model disagrees with"
            );
        }
        fig.acked += said.acks.len();

        // A fresh handle: the stored root, the leaves, the audit.
        let in_batch = said.in_batch();
        let checked = Instant::now();
        // Verifies the namespace through `$store`, then closes it.
        macro_rules! verify_through {
            ($store:expr) => {{
                let store = $store;
                verify(
                    &what,
                    &CompactedTree::new(store.open_namespace(&namespace)),
                    &mut model,
                    in_batch,
                    &mut fig,
                )
                .await;
                store.pool().close().await;
            }};
        }
        match &mode {
            Mode::Sqlite(path) => {
                verify_through!(SqliteStore::open(path).await.expect("reopen sqlite"));
            }
            Mode::PgClient(url) => {
                let store = PostgresStore::connect(url)
                    .await
                    .expect("reconnect postgres");
                linger(&what, store.pool(), &app, &mut fig).await;
                verify_through!(store);
            }
            Mode::PgServer(cluster) => {
                verify_through!(
                    PostgresStore::connect(&cluster.url)
                        .await
                        .expect("reconnect postgres")
                );
            }
        }
        if verbose {
            println!(
                "{what}: {trigger:?}, {} acknowledged, in batch {in_batch}, crash + restart {:.0?}, \
                 checks {:.0?}",
                said.acks.len(),
                checked.duration_since(crashed),
                checked.elapsed()
            );
        }
    }
    println!(
        "{test}: {} crashes: inside insert_many {} (rolled back {}, landed unacknowledged {}), \
         outside a batch {}; {} batches acknowledged, 0 lost; {} leaf reads checked; {} audits clean; \
         final tree {} leaves after {} batches",
        fig.crashes,
        fig.rolled_back + fig.landed_unacked,
        fig.rolled_back,
        fig.landed_unacked,
        fig.outside,
        fig.acked,
        fig.leaves_checked,
        fig.audits,
        model.live(),
        model.next,
    );
    fig
}

/// Waits until the killed client's backend has left `pg_stat_activity`.
async fn linger(what: &str, pool: &sqlx::PgPool, app: &str, fig: &mut Figures) {
    let t0 = Instant::now();
    let mut first = true;
    loop {
        let rows: Vec<(Option<String>,)> =
            sqlx::query_as("SELECT state FROM pg_stat_activity WHERE application_name = $1")
                .bind(app)
                .fetch_all(pool)
                .await
                .expect("pg_stat_activity");
        if rows.is_empty() {
            break;
        }
        if first {
            fig.backend_lingered += 1;
            first = false;
        }
        assert!(
            t0.elapsed() < STALL,
            "{what}: the killed client's backend is still there after {STALL:?}: {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    fig.max_linger = fig.max_linger.max(t0.elapsed());
}

/// The checks after a crash; moves the model past the in-flight batch when
/// it landed.
async fn verify<S: Writable + AuditStore>(
    what: &str,
    tree: &CompactedTree<S>,
    model: &mut Model,
    in_batch: bool,
    fig: &mut Figures,
) {
    let stored = tree.root().await.expect("root");
    if stored == model.root {
        if in_batch {
            fig.rolled_back += 1;
        } else {
            fig.outside += 1;
        }
    } else {
        let in_flight = model.peek().await;
        assert_eq!(
            stored,
            in_flight,
            "{what}: the stored root is neither the last acknowledged one ({:?}, after batch {}) \
             nor the one in flight (batch {}): an acknowledged batch was lost or a batch half-applied",
            model.root,
            model.next as i64 - 1,
            model.next
        );
        assert!(
            in_batch,
            "{what}: batch {} landed but never began",
            model.next
        );
        model.advance().await;
        fig.landed_unacked += 1;
    }
    let keys: Vec<Key> = model.leaves.keys().copied().collect();
    for chunk in keys.chunks(4096) {
        let got = tree.get_many(chunk).await.expect("get_many");
        for (key, leaf) in chunk.iter().zip(&got) {
            assert_eq!(
                Some(leaf),
                model.leaves.get(key),
                "{what}: key {key:?} reads back wrong"
            );
        }
    }
    fig.leaves_checked += keys.len();
    let report = tree.audit().await.expect("audit");
    assert!(report.is_clean(), "{what}: audit: {:?}", report.problems);
    assert_eq!(
        report.leaves,
        model.live() as u64,
        "{what}: audit leaf count"
    );
    assert_eq!(report.stored_root, model.root, "{what}: audit root");
    fig.audits += 1;
}

// ---------------------------------------------------------------------------
// The tests
// ---------------------------------------------------------------------------

#[tokio::test]
async fn sqlite_sigkill() {
    if child_mode().await {
        return;
    }
    let t0 = Instant::now();
    let file = TempDb::new("crash");
    let kills = count_from_env("MSSMT_CRASH_KILLS_SQLITE", 20);
    let fig = campaign("sqlite_sigkill", Mode::Sqlite(file.path.clone()), kills).await;
    println!("sqlite_sigkill: {:.1} s", t0.elapsed().as_secs_f64());
    assert_eq!(fig.crashes, kills);
}

#[tokio::test]
async fn postgres_sigkill() {
    if child_mode().await {
        return;
    }
    let Some(url) = pg_url("postgres_sigkill") else {
        return;
    };
    let t0 = Instant::now();
    let kills = count_from_env("MSSMT_CRASH_KILLS_PG", 10);
    let fig = campaign("postgres_sigkill", Mode::PgClient(url), kills).await;
    println!(
        "postgres_sigkill: the killed client's backend was still in pg_stat_activity at the \
         first check after {} of {} kills; longest wait until it was gone {:.0?}; {:.1} s",
        fig.backend_lingered,
        fig.crashes,
        fig.max_linger,
        t0.elapsed().as_secs_f64()
    );
    assert_eq!(fig.crashes, kills);
}

#[tokio::test]
async fn postgres_immediate_stop() {
    if child_mode().await {
        return;
    }
    let t0 = Instant::now();
    let Some(cluster) = Cluster::create("postgres_immediate_stop").await else {
        return;
    };
    let stops = count_from_env("MSSMT_CRASH_PG_STOPS", 3);
    let fig = campaign("postgres_immediate_stop", Mode::PgServer(cluster), stops).await;
    println!(
        "postgres_immediate_stop: after a short outage the writer failed {} times ({:?}) and \
         carried on {} times ({} then met a stale pooled connection); with the server left \
         down it reported after {:?}; {:.1} s",
        fig.writer_errors.values().sum::<usize>(),
        fig.writer_errors,
        fig.writer_resumed,
        fig.stale_after_restart,
        fig.outage_error.as_ref().map(|(t, e)| (*t, error_kind(e))),
        t0.elapsed().as_secs_f64()
    );
    assert_eq!(fig.crashes, stops);
}
