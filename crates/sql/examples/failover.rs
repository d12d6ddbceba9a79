//! Failover: the coalescing writer and standby readers on a real
//! PostgreSQL HA cluster (`scripts/pg-ha.sh`: etcd, three Patroni nodes,
//! HAProxy) while the primary is killed, stopped, powered off or frozen,
//! round after round.
//!
//! ```text
//! set -a; eval "$(scripts/pg-ha.sh up)"; set +a     # or `up --async`
//! cargo run --release --example failover -- \
//!     --rounds 50 --kinds kill,stop,freeze,poweroff
//! cargo run --release --example failover -- --throughput-only 30
//! scripts/pg-ha.sh down
//! ```
//!
//! Each round writes a namespace of its own (`failover-<run>-r<round>`):
//!
//! * `--submitters` tasks (default 100) submit one new leaf at a time,
//!   distinct keys, through one [`Writer`](ms_smt::Writer) on a
//!   [`PostgresStore`] connected to `MSSMT_HA_URL` (HAProxy's read-write
//!   port), and record every acknowledged submission;
//! * `--readers` tasks (default 2) read proofs of acknowledged keys through
//!   a [`ReplicaSet`] whose standby is `MSSMT_HA_RO_URL` (HAProxy's
//!   read-only port, round robin over the replicas), with a commit token
//!   taken after the keys were acknowledged; each proof is verified
//!   against the root its snapshot reports, and the leaf must be the one
//!   acknowledged. A read that failed, or was served by the primary
//!   (fallback), is counted;
//! * after `--warmup` seconds the script's `<kind>-leader` injects the
//!   fault; `wait-leader` gives Patroni's own failover time (fault to
//!   writes routed to the new leader); the load runs `--after` seconds more
//!   (and at least until a submission made after the fault is
//!   acknowledged, bounded), then stops; `rejoin` brings the old primary
//!   back as a standby;
//! * then, on a fresh handle through `MSSMT_HA_URL` (the new primary),
//!   every acknowledged leaf of the round must read back, and the tree
//!   must audit clean.
//!
//! Write unavailability is the time from the fault (the instant the
//! script recorded, `DIR/last_fault`) to the first acknowledgement of a
//! submission that was submitted after the fault and after the outage
//! began (the start of the longest interval without acknowledgements from
//! the fault on, printed as "ack gap": a graceful stop still acknowledges
//! a few writes on the old primary after the fault). At the end, every
//! acknowledged leaf of every round is read once more.
//!
//! Output: progress on stderr; on stdout one table row per round and a
//! summary per failover kind. Exit status 1 when an acknowledged leaf is
//! lost on a cluster with synchronous replication, or when a tree does not
//! audit clean, a read with a token saw a wrong leaf (synchronous
//! replication) or an operation did not end within its bound; 2 on a
//! usage or set-up error.
//!
//! Options: `--rounds N` (default 4), `--kinds LIST` (any of
//! `kill,stop,freeze,poweroff`, used in turn; default all four),
//! `--warmup S` (default 4), `--after S` (default 4), `--submitters N`,
//! `--readers N`, `--script PATH` (default `scripts/pg-ha.sh` of this
//! crate, or `MSSMT_HA_SCRIPT`), `--throughput-only S` (no faults, no
//! readers: leaves/s of the writer for S seconds). Environment:
//! `MSSMT_HA_URL`, `MSSMT_HA_RO_URL`, `MSSMT_HA_DIR` (as printed by
//! `scripts/pg-ha.sh up`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ms_smt::{CompactedTree, Key, Leaf, SubmitError, TreeError, WriterConfig};
use ms_smt_sql::{PostgresStore, ReplicaSet, ServedBy, SqlStoreError};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sha2::{Digest, Sha256};

/// Bound of one submission: the writer's recovery wait and a margin.
const SUBMIT_BOUND: Duration = Duration::from_secs(90);
/// Bound of one reader step (token, snapshot, proofs, finish).
const READ_BOUND: Duration = Duration::from_secs(20);
/// Bound of `kill-leader` and the other fault commands.
const FAULT_BOUND: Duration = Duration::from_secs(60);
/// Bound of `wait-leader` and `rejoin` (the script's own bound is 120 s).
const CLUSTER_BOUND: Duration = Duration::from_secs(180);
/// How long after the fault the load waits, at most, for a submission made
/// after the fault to be acknowledged.
const FIRST_ACK_BOUND: Duration = Duration::from_secs(90);
/// Bound of the checks after a round (they retry transient errors).
const CHECK_BOUND: Duration = Duration::from_secs(120);
/// Keys read back per statement.
const CHECK_CHUNK: usize = 5_000;
/// Keys per reader snapshot.
const READ_KEYS: usize = 8;

/// What can stop the campaign itself (not what it measures).
#[derive(Debug, thiserror::Error)]
enum Error {
    #[error("usage: {0}")]
    Usage(&'static str),
    #[error("{flag}: not a valid value")]
    BadValue { flag: &'static str },
    #[error("environment variable {0} is not set (set -a; eval \"$(scripts/pg-ha.sh up)\")")]
    Env(&'static str),
    #[error("unknown failover kind (kill, stop, freeze, poweroff)")]
    Kind,
    #[error("scripts/pg-ha.sh {command}: could not run it: {source}")]
    Spawn {
        command: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("scripts/pg-ha.sh {command}: failed ({status})")]
    Script {
        command: &'static str,
        status: std::process::ExitStatus,
    },
    #[error("scripts/pg-ha.sh {command}: no answer within {bound:?}")]
    ScriptTimeout {
        command: &'static str,
        bound: Duration,
    },
    #[error("scripts/pg-ha.sh {command}: unexpected output")]
    ScriptOutput { command: &'static str },
    #[error("{path}: no fault recorded")]
    FaultFile { path: PathBuf },
    #[error("{what}: no answer within {bound:?}")]
    Timeout { what: &'static str, bound: Duration },
    #[error("store: {0}")]
    Store(#[from] SqlStoreError),
    #[error("tree: {0}")]
    Tree(#[from] TreeError<SqlStoreError>),
}

type Res<T> = Result<T, Error>;

/// A fault the script can inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Kill,
    Stop,
    Freeze,
    Poweroff,
}

impl Kind {
    fn parse(s: &str) -> Res<Kind> {
        match s.trim() {
            "kill" => Ok(Kind::Kill),
            "stop" => Ok(Kind::Stop),
            "freeze" => Ok(Kind::Freeze),
            "poweroff" => Ok(Kind::Poweroff),
            _ => Err(Error::Kind),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Kill => "kill",
            Kind::Stop => "stop",
            Kind::Freeze => "freeze",
            Kind::Poweroff => "poweroff",
        }
    }

    fn command(self) -> &'static str {
        match self {
            Kind::Kill => "kill-leader",
            Kind::Stop => "stop-leader",
            Kind::Freeze => "freeze-leader",
            Kind::Poweroff => "poweroff-leader",
        }
    }
}

struct Args {
    rounds: usize,
    kinds: Vec<Kind>,
    warmup: Duration,
    after: Duration,
    submitters: usize,
    readers: usize,
    script: PathBuf,
    throughput_only: Option<Duration>,
}

fn seconds(flag: &'static str, value: Option<String>) -> Res<Duration> {
    value
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64)
        .ok_or(Error::BadValue { flag })
}

fn count(flag: &'static str, value: Option<String>) -> Res<usize> {
    value
        .and_then(|v| v.parse().ok())
        .ok_or(Error::BadValue { flag })
}

fn args() -> Res<Args> {
    let default_script = std::env::var_os("MSSMT_HA_SCRIPT")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/pg-ha.sh")
        });
    let mut a = Args {
        rounds: 4,
        kinds: vec![Kind::Kill, Kind::Stop, Kind::Freeze, Kind::Poweroff],
        warmup: Duration::from_secs(4),
        after: Duration::from_secs(4),
        submitters: 100,
        readers: 2,
        script: default_script,
        throughput_only: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--rounds" => a.rounds = count("--rounds", it.next())?,
            "--kinds" => {
                a.kinds = it
                    .next()
                    .ok_or(Error::BadValue { flag: "--kinds" })?
                    .split(',')
                    .map(Kind::parse)
                    .collect::<Res<_>>()?;
            }
            "--warmup" => a.warmup = seconds("--warmup", it.next())?,
            "--after" => a.after = seconds("--after", it.next())?,
            "--submitters" => a.submitters = count("--submitters", it.next())?,
            "--readers" => a.readers = count("--readers", it.next())?,
            "--script" => {
                a.script = it
                    .next()
                    .map(PathBuf::from)
                    .ok_or(Error::BadValue { flag: "--script" })?;
            }
            "--throughput-only" => {
                a.throughput_only = Some(seconds("--throughput-only", it.next())?);
            }
            _ => {
                return Err(Error::Usage(
                    "failover [--rounds N] [--kinds kill,stop,freeze,poweroff] [--warmup S] \
                     [--after S] [--submitters N] [--readers N] [--script PATH] \
                     [--throughput-only S]",
                ));
            }
        }
    }
    if a.kinds.is_empty() || a.submitters == 0 {
        return Err(Error::Usage("--kinds and --submitters must not be empty"));
    }
    Ok(a)
}

fn env(name: &'static str) -> Res<String> {
    std::env::var(name)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .ok_or(Error::Env(name))
}

/// Submission `n`'s key (distinct for every `n` of a run) and leaf.
fn pair(run: &str, n: u64) -> (Key, Leaf) {
    let digest: [u8; 32] = Sha256::digest(format!("{run}/{n}").as_bytes()).into();
    (
        Key(digest),
        Leaf::new(n.to_le_bytes().to_vec(), n % 1_000 + 1),
    )
}

/// Maps the wall clock (the script's fault stamps) to this process's
/// monotonic clock.
struct Clock {
    instant: Instant,
    wall: SystemTime,
}

impl Clock {
    fn now() -> Self {
        Clock {
            instant: Instant::now(),
            wall: SystemTime::now(),
        }
    }

    /// The instant of `epoch` seconds since the Unix epoch.
    fn at(&self, epoch: f64) -> Instant {
        let wall = self.wall.duration_since(UNIX_EPOCH).unwrap_or_default();
        let then = Duration::from_secs_f64(epoch.max(0.0));
        match then.checked_sub(wall) {
            Some(ahead) => self.instant + ahead,
            None => self
                .instant
                .checked_sub(wall - then)
                .unwrap_or(self.instant),
        }
    }
}

/// Runs `script command [arg]` within `bound`; its stdout and stderr.
async fn script(
    path: &PathBuf,
    command: &'static str,
    arg: Option<&str>,
    bound: Duration,
) -> Res<(String, String)> {
    let mut cmd = tokio::process::Command::new(path);
    cmd.arg(command)
        .args(arg)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = cmd
        .spawn()
        .map_err(|source| Error::Spawn { command, source })?;
    let out = tokio::time::timeout(bound, child.wait_with_output())
        .await
        .map_err(|_| Error::ScriptTimeout { command, bound })?
        .map_err(|source| Error::Spawn { command, source })?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        eprint!("{stderr}");
        return Err(Error::Script {
            command,
            status: out.status,
        });
    }
    Ok((stdout, stderr))
}

/// The fault the script recorded last: (node, epoch seconds).
fn last_fault(dir: &str) -> Res<(String, f64)> {
    let path = PathBuf::from(dir).join("last_fault");
    let text =
        std::fs::read_to_string(&path).map_err(|_| Error::FaultFile { path: path.clone() })?;
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
            .map(str::to_string)
    };
    match (
        field("FAULT_NODE"),
        field("FAULT_EPOCH").and_then(|e| e.parse().ok()),
    ) {
        (Some(node), Some(epoch)) => Ok((node, epoch)),
        _ => Err(Error::FaultFile { path }),
    }
}

/// An acknowledged submission.
#[derive(Clone, Copy)]
struct Ack {
    n: u64,
    submitted: Instant,
    acked: Instant,
}

/// What the submitters and readers of one round share.
#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    acks: Mutex<Vec<Ack>>,
    errors: Mutex<BTreeMap<&'static str, u64>>,
    hung_submits: AtomicU64,
    reads_standby: AtomicU64,
    reads_fallback: AtomicU64,
    reads_failed: AtomicU64,
    reads_untokened: AtomicU64,
    reads_wrong: AtomicU64,
    reads_hung: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn submit_error_kind(e: &SubmitError<SqlStoreError>) -> &'static str {
    match e {
        SubmitError::Rejected(_) => "Rejected",
        SubmitError::Refused(_) => "Refused",
        SubmitError::Failed(_) => "Failed",
        SubmitError::Indeterminate(_) => "Indeterminate",
        SubmitError::Closed => "Closed",
        SubmitError::Full => "Full",
        SubmitError::Stopped => "Stopped",
    }
}

/// Submitter `t`: one new leaf at a time until told to stop.
async fn submitter(
    writer: ms_smt::Writer<PostgresStore, ms_smt::Compacted>,
    shared: Arc<Shared>,
    run: Arc<str>,
    base: u64,
    t: u64,
) {
    for i in 0.. {
        if shared.stop.load(Ordering::Relaxed) {
            return;
        }
        let n = base + t * 10_000_000 + i;
        let submitted = Instant::now();
        match tokio::time::timeout(SUBMIT_BOUND, writer.submit([pair(&run, n)])).await {
            Ok(Ok(_)) => lock(&shared.acks).push(Ack {
                n,
                submitted,
                acked: Instant::now(),
            }),
            Ok(Err(SubmitError::Closed)) => return,
            Ok(Err(e)) => {
                *lock(&shared.errors)
                    .entry(submit_error_kind(&e))
                    .or_default() += 1;
                // Do not spin on a writer that answers at once.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(_) => {
                shared.hung_submits.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// How one reader step ended.
enum ReadOutcome {
    Standby,
    Fallback,
    Wrong,
}

/// One reader step: a token (when the primary answers), a snapshot,
/// proofs of `keys` verified against its root.
async fn read_once(
    set: &ReplicaSet,
    shared: &Shared,
    run: &str,
    ns: &[u64],
) -> Result<ReadOutcome, SqlStoreError> {
    let token = match set.commit_token().await {
        Ok(token) => Some(token),
        Err(_) => {
            shared.reads_untokened.fetch_add(1, Ordering::Relaxed);
            None
        }
    };
    let mut snapshot = set.read(token).await?;
    let root = snapshot.root();
    let served = snapshot.served_by();
    let keys: Vec<Key> = ns.iter().map(|n| pair(run, *n).0).collect();
    let (leaves, proofs) = {
        let tree = CompactedTree::new(snapshot.store());
        let leaves = tree.get_many(&keys).await.map_err(store_error)?;
        let proofs = tree.merkle_proofs(&keys).await.map_err(store_error)?;
        (leaves, proofs)
    };
    snapshot.finish().await?;
    let mut wrong = false;
    for ((n, key), (leaf, proof)) in ns.iter().zip(&keys).zip(leaves.iter().zip(&proofs)) {
        let expected = pair(run, *n).1;
        // Without a token the standby may not have replayed the key yet;
        // what it answers must still be proven by its root.
        let leaf_ok = *leaf == expected || (token.is_none() && leaf.is_empty());
        if !leaf_ok || !proof.verify(key, leaf, &root) {
            wrong = true;
        }
    }
    Ok(if wrong {
        ReadOutcome::Wrong
    } else if served == ServedBy::Primary {
        ReadOutcome::Fallback
    } else {
        ReadOutcome::Standby
    })
}

fn store_error(e: TreeError<SqlStoreError>) -> SqlStoreError {
    match e {
        TreeError::Store(e) => e,
        // Reads of a snapshot fail only in the store; anything else is a
        // wrong answer, counted as a failed read.
        _ => SqlStoreError::RuntimeShutdown,
    }
}

/// A reader: proofs of acknowledged keys on the standbys until told to
/// stop.
async fn reader(set: ReplicaSet, shared: Arc<Shared>, run: Arc<str>, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    while !shared.stop.load(Ordering::Relaxed) {
        let ns: Vec<u64> = {
            let acks = lock(&shared.acks);
            if acks.is_empty() {
                Vec::new()
            } else {
                (0..READ_KEYS)
                    .map(|_| acks[rng.gen_range(0..acks.len())].n)
                    .collect()
            }
        };
        if !ns.is_empty() {
            let counter =
                match tokio::time::timeout(READ_BOUND, read_once(&set, &shared, &run, &ns)).await {
                    Ok(Ok(ReadOutcome::Standby)) => &shared.reads_standby,
                    Ok(Ok(ReadOutcome::Fallback)) => &shared.reads_fallback,
                    Ok(Ok(ReadOutcome::Wrong)) => &shared.reads_wrong,
                    Ok(Err(_)) => &shared.reads_failed,
                    Err(_) => &shared.reads_hung,
                };
            counter.fetch_add(1, Ordering::Relaxed);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Write unavailability after a fault at `fault`, and the outage as
/// clients saw it: the longest interval without an acknowledgement from
/// the fault on (a graceful stop acknowledges a few writes on the old
/// primary after the fault; the outage is what follows them). The first
/// figure runs from the fault to the first acknowledgement of a
/// submission made after the fault and after that interval began, i.e. a
/// write the new primary took; `None` when there was none.
fn unavailability(acks: &[Ack], fault: Instant) -> (Option<f64>, f64) {
    let mut times: Vec<Instant> = acks
        .iter()
        .map(|a| a.acked)
        .filter(|t| *t >= fault)
        .collect();
    times.push(fault);
    times.sort_unstable();
    let (gap_start, gap) = times
        .windows(2)
        .map(|w| (w[0], w[1] - w[0]))
        .max_by_key(|(_, gap)| *gap)
        .unwrap_or((fault, Duration::ZERO));
    let first = acks
        .iter()
        .filter(|a| a.submitted >= fault && a.submitted >= gap_start)
        .map(|a| a.acked)
        .min();
    (
        first.map(|t| t.saturating_duration_since(fault).as_secs_f64()),
        gap.as_secs_f64(),
    )
}

/// One round's figures.
#[derive(Clone, Default)]
struct Round {
    kind: Option<Kind>,
    acked: u64,
    lost: u64,
    unavailable: Option<f64>,
    gap: f64,
    patroni: f64,
    rejoin: f64,
    rewound: bool,
    reads_standby: u64,
    reads_fallback: u64,
    reads_failed: u64,
    reads_untokened: u64,
    reads_wrong: u64,
    hung: u64,
    indeterminate: u64,
    failed: u64,
    other_errors: u64,
    recovered: u64,
    steady_leaves: u64,
    steady_secs: f64,
    audit_problems: usize,
}

/// The load of one namespace: a writer, its submitters and readers.
struct Load {
    shared: Arc<Shared>,
    writer: ms_smt::Writer<PostgresStore, ms_smt::Compacted>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    started: Instant,
}

fn start_load(
    store: &PostgresStore,
    set: Option<&ReplicaSet>,
    ns: &str,
    run: &Arc<str>,
    base: u64,
    args: &Args,
) -> Load {
    let tree = CompactedTree::new(store.open_namespace(ns));
    let writer = tree.writer(WriterConfig::default());
    let shared = Arc::new(Shared::default());
    let mut tasks = Vec::new();
    for t in 0..args.submitters as u64 {
        tasks.push(tokio::spawn(submitter(
            writer.clone(),
            shared.clone(),
            run.clone(),
            base,
            t,
        )));
    }
    if let Some(set) = set {
        for r in 0..args.readers as u64 {
            tasks.push(tokio::spawn(reader(
                set.open_namespace(ns),
                shared.clone(),
                run.clone(),
                base ^ r,
            )));
        }
    }
    Load {
        shared,
        writer,
        tasks,
        started: Instant::now(),
    }
}

/// Stops the load and waits for its tasks (bounded); the acknowledged
/// submissions.
async fn stop_load(load: Load) -> Res<(Vec<Ack>, ms_smt::WriterStats)> {
    load.shared.stop.store(true, Ordering::Relaxed);
    let bound = SUBMIT_BOUND + Duration::from_secs(10);
    for task in load.tasks {
        tokio::time::timeout(bound, task)
            .await
            .map_err(|_| Error::Timeout {
                what: "a submitter or reader to stop",
                bound,
            })?
            .ok();
    }
    tokio::time::timeout(bound, load.writer.close())
        .await
        .map_err(|_| Error::Timeout {
            what: "the writer to close",
            bound,
        })?;
    let stats = load.writer.stats();
    let acks = std::mem::take(&mut *lock(&load.shared.acks));
    Ok((acks, stats))
}

/// `op` retried while the store is out of reach, within [`CHECK_BOUND`].
async fn retrying<T, F, Fut>(what: &'static str, mut op: F) -> Res<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, TreeError<SqlStoreError>>>,
{
    let deadline = Instant::now() + CHECK_BOUND;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, op()).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(TreeError::Store(e))) if e.is_transient() && Instant::now() < deadline => {
                eprintln!("failover: {what}: {e}; trying again");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Ok(Err(e)) => return Err(e.into()),
            Err(_) => {
                return Err(Error::Timeout {
                    what,
                    bound: CHECK_BOUND,
                });
            }
        }
    }
}

/// Acknowledged leaves of `ns` missing on the primary, and the audit's
/// problems.
async fn check(store: &PostgresStore, ns: &str, run: &str, acked: &[u64]) -> Res<(u64, usize)> {
    let tree = CompactedTree::new(store.open_namespace(ns).with_recent_nodes(0));
    let mut lost = 0;
    for chunk in acked.chunks(CHECK_CHUNK) {
        let keys: Vec<Key> = chunk.iter().map(|n| pair(run, *n).0).collect();
        let got = retrying("reading acknowledged leaves back", || tree.get_many(&keys)).await?;
        for (n, leaf) in chunk.iter().zip(&got) {
            if *leaf != pair(run, *n).1 {
                lost += 1;
            }
        }
    }
    let report = retrying("auditing", || tree.audit()).await?;
    if !report.is_clean() {
        eprintln!("failover: {ns}: audit problems: {:?}", report.problems);
    }
    Ok((lost, report.problems.len()))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn secs(v: Option<f64>) -> String {
    v.map_or("none".to_string(), |s| format!("{s:.2}"))
}

/// Whether the primary runs with a synchronous standby named.
async fn synchronous(store: &PostgresStore) -> Res<bool> {
    let names: String = sqlx::query_scalar("SELECT current_setting('synchronous_standby_names')")
        .fetch_one(store.pool())
        .await
        .map_err(SqlStoreError::from)?;
    Ok(!names.trim().is_empty())
}

async fn throughput(store: &PostgresStore, run: &Arc<str>, args: &Args, secs: Duration) -> Res<()> {
    let ns = format!("{run}-throughput");
    let load = start_load(store, None, &ns, run, 0, args);
    tokio::time::sleep(secs).await;
    let elapsed = load.started.elapsed().as_secs_f64();
    let (acks, stats) = stop_load(load).await?;
    let errors: u64 = stats.failed;
    let ns_acked: Vec<u64> = acks.iter().map(|a| a.n).collect();
    let (lost, problems) = check(store, &ns, run, &ns_acked).await?;
    let mut lat: Vec<f64> = acks
        .iter()
        .map(|a| (a.acked - a.submitted).as_secs_f64() * 1e3)
        .collect();
    lat.sort_by(f64::total_cmp);
    println!(
        "| {} | {:.1} | {} | {:.0} | {:.1} | {:.1} | {:.1} | {} | {} | {} |",
        if synchronous(store).await? {
            "sync"
        } else {
            "async"
        },
        elapsed,
        acks.len(),
        acks.len() as f64 / elapsed,
        stats.leaves as f64 / stats.groups.max(1) as f64,
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        errors,
        lost,
        problems,
    );
    Ok(())
}

async fn campaign(
    args: &Args,
    store: &PostgresStore,
    set: &ReplicaSet,
    run: &Arc<str>,
) -> Res<bool> {
    let dir = env("MSSMT_HA_DIR")?;
    let sync = synchronous(store).await?;
    let clock = Clock::now();
    let mode = if sync { "sync" } else { "async" };
    eprintln!(
        "failover: {mode} replication, {} rounds of {:?}, {} submitters, {} readers, run {run}",
        args.rounds, args.kinds, args.submitters, args.readers
    );
    println!(
        "| round | kind | acked | lost | unavailable s | ack gap s | Patroni s | rejoin s | rewind | reads standby/fallback/failed/untokened/wrong | hung | Indeterminate | Failed | recovered | leaves/s before |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut rounds: Vec<Round> = Vec::new();
    let mut all: Vec<(String, Vec<u64>)> = Vec::new();
    for r in 0..args.rounds {
        let kind = args.kinds[r % args.kinds.len()];
        let ns = format!("{run}-r{r}");
        let base = (r as u64) << 40;
        let load = start_load(store, Some(set), &ns, run, base, args);
        tokio::time::sleep(args.warmup).await;
        let steady_acks = lock(&load.shared.acks).len() as u64;
        let steady_secs = load.started.elapsed().as_secs_f64();

        script(&args.script, kind.command(), None, FAULT_BOUND).await?;
        let (old, epoch) = last_fault(&dir)?;
        let fault = clock.at(epoch);
        let (out, _) = script(&args.script, "wait-leader", Some(&old), CLUSTER_BOUND).await?;
        let patroni: f64 = out.trim().parse().map_err(|_| Error::ScriptOutput {
            command: "wait-leader",
        })?;

        // Load goes on for `after`, and until a submission made after the
        // fault has been acknowledged (bounded).
        tokio::time::sleep(args.after).await;
        let deadline = Instant::now() + FIRST_ACK_BOUND;
        while Instant::now() < deadline
            && !lock(&load.shared.acks).iter().any(|a| a.submitted > fault)
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let shared = load.shared.clone();
        let (acks, stats) = stop_load(load).await?;

        let (out, err) = script(&args.script, "rejoin", None, CLUSTER_BOUND).await?;
        let rejoin: f64 = out
            .trim()
            .parse()
            .map_err(|_| Error::ScriptOutput { command: "rejoin" })?;
        let rewound = err.contains("pg_rewind ran") || err.contains("re-cloned");

        let acked: Vec<u64> = acks.iter().map(|a| a.n).collect();
        let (lost, audit_problems) = check(store, &ns, run, &acked).await?;
        let (unavailable, gap) = unavailability(&acks, fault);
        let errors = lock(&shared.errors).clone();
        let get = |k: &str| errors.get(k).copied().unwrap_or(0);
        let round = Round {
            kind: Some(kind),
            acked: acks.len() as u64,
            lost,
            unavailable,
            gap,
            patroni,
            rejoin,
            rewound,
            reads_standby: shared.reads_standby.load(Ordering::Relaxed),
            reads_fallback: shared.reads_fallback.load(Ordering::Relaxed),
            reads_failed: shared.reads_failed.load(Ordering::Relaxed),
            reads_untokened: shared.reads_untokened.load(Ordering::Relaxed),
            reads_wrong: shared.reads_wrong.load(Ordering::Relaxed),
            hung: shared.hung_submits.load(Ordering::Relaxed)
                + shared.reads_hung.load(Ordering::Relaxed),
            indeterminate: get("Indeterminate"),
            failed: get("Failed"),
            other_errors: errors.values().sum::<u64>() - get("Indeterminate") - get("Failed"),
            recovered: stats.recovered,
            steady_leaves: steady_acks,
            steady_secs,
            audit_problems,
        };
        println!(
            "| {} | {} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {} | {}/{}/{}/{}/{} | {} | {} | {} | {} | {:.0} |",
            r + 1,
            kind.name(),
            round.acked,
            round.lost,
            secs(round.unavailable),
            round.gap,
            round.patroni,
            round.rejoin,
            if round.rewound { "yes" } else { "no" },
            round.reads_standby,
            round.reads_fallback,
            round.reads_failed,
            round.reads_untokened,
            round.reads_wrong,
            round.hung,
            round.indeterminate,
            round.failed + round.other_errors,
            round.recovered,
            steady_acks as f64 / steady_secs.max(1e-9),
        );
        if round.audit_problems > 0 {
            eprintln!(
                "failover: round {}: {} audit problems",
                r + 1,
                round.audit_problems
            );
        }
        rounds.push(round);
        all.push((ns, acked));
    }

    // Every acknowledged leaf of every round, once more, after all the
    // failovers.
    let mut lost_at_end = 0;
    let mut total = 0;
    for (ns, acked) in &all {
        lost_at_end += check(store, ns, run, acked).await?.0;
        total += acked.len();
    }

    println!();
    println!(
        "{mode}: every acknowledged leaf of every round read again after the last round: {total} acknowledged, {lost_at_end} missing"
    );
    println!();
    println!(
        "| kind | rounds | acknowledged | lost | unavailable p50/p99/max s | Patroni p50/max s | reads standby/fallback/failed/wrong | Indeterminate | Failed/other | hung | audit problems | rewinds | leaves/s outside failovers |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut kinds: Vec<Option<Kind>> = args.kinds.iter().copied().map(Some).collect();
    kinds.sort();
    kinds.dedup();
    kinds.push(None);
    for kind in kinds {
        let rs: Vec<&Round> = rounds
            .iter()
            .filter(|r| kind.is_none() || r.kind == kind)
            .collect();
        if rs.is_empty() {
            continue;
        }
        let sum = |f: fn(&Round) -> u64| rs.iter().map(|r| f(r)).sum::<u64>();
        let mut unavailable: Vec<f64> = rs.iter().filter_map(|r| r.unavailable).collect();
        unavailable.sort_by(f64::total_cmp);
        let missing = rs.iter().filter(|r| r.unavailable.is_none()).count();
        let mut patroni: Vec<f64> = rs.iter().map(|r| r.patroni).collect();
        patroni.sort_by(f64::total_cmp);
        let steady =
            sum(|r| r.steady_leaves) as f64 / rs.iter().map(|r| r.steady_secs).sum::<f64>();
        println!(
            "| {} | {} | {} | {} | {:.2}/{:.2}/{:.2}{} | {:.2}/{:.2} | {}/{}/{}/{} | {} | {} | {} | {} | {} | {:.0} |",
            kind.map_or("all", Kind::name),
            rs.len(),
            sum(|r| r.acked),
            sum(|r| r.lost),
            percentile(&unavailable, 0.5),
            percentile(&unavailable, 0.99),
            unavailable.last().copied().unwrap_or(f64::NAN),
            if missing > 0 {
                format!(" ({missing} rounds without)")
            } else {
                String::new()
            },
            percentile(&patroni, 0.5),
            patroni.last().copied().unwrap_or(f64::NAN),
            sum(|r| r.reads_standby),
            sum(|r| r.reads_fallback),
            sum(|r| r.reads_failed),
            sum(|r| r.reads_wrong),
            sum(|r| r.indeterminate),
            sum(|r| r.failed + r.other_errors),
            sum(|r| r.hung),
            rs.iter().map(|r| r.audit_problems).sum::<usize>(),
            rs.iter().filter(|r| r.rewound).count(),
            steady,
        );
    }
    let lost: u64 = rounds.iter().map(|r| r.lost).sum::<u64>() + lost_at_end;
    let problems: usize = rounds.iter().map(|r| r.audit_problems).sum();
    let hung: u64 = rounds.iter().map(|r| r.hung).sum();
    let wrong: u64 = rounds.iter().map(|r| r.reads_wrong).sum();
    let ok = problems == 0 && hung == 0 && (!sync || (lost == 0 && wrong == 0));
    eprintln!(
        "failover: {mode}: {lost} lost, {problems} audit problems, {hung} hung operations, {wrong} wrong reads: {}",
        if ok { "ok" } else { "FAILED" }
    );
    Ok(ok)
}

async fn main_result() -> Res<bool> {
    let args = args()?;
    let url = env("MSSMT_HA_URL")?;
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let run: Arc<str> = format!("failover-{stamp}-{}", std::process::id()).into();
    let store = PostgresStore::connect(&url).await?;
    if let Some(secs) = args.throughput_only {
        println!(
            "| replication | seconds | acknowledged | leaves/s | leaves/group | p50 ms | p99 ms | failed | lost | audit problems |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|");
        throughput(&store, &run, &args, secs).await?;
        return Ok(true);
    }
    let ro = env("MSSMT_HA_RO_URL")?;
    let set = ReplicaSet::connect(&url, &[&ro]).await?;
    campaign(&args, &store, &set, &run).await
}

#[tokio::main]
async fn main() -> ExitCode {
    match main_result().await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("failover: {e}");
            ExitCode::from(2)
        }
    }
}
