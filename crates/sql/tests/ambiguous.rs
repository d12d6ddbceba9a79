//! Ambiguous commits: a TCP proxy between the store and Postgres cuts the
//! connection at many points of one `insert_many` (every few bytes of what
//! the client sends, COMMIT included, and of what the server answers, so
//! a COMMIT that ran but whose reply was lost is covered). The caller must
//! get an error; retrying the same batch must end with it applied exactly
//! once (the tree equals one application), and the audit must be clean.
#![cfg(all(feature = "sqlite", feature = "postgres"))]

use crate::support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use ms_smt::{CompactedTree, Key, Leaf};
use ms_smt_sql::PostgresStore;
use sqlx::postgres::PgPoolOptions;
use support::{assert_audit_clean, hkey, pg_url, root_of, unique};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Client to server, server to client.
const UP: usize = 0;
const DOWN: usize = 1;

/// A proxy that, once armed, cuts every connection through it when the
/// bytes sent in one direction pass a limit.
struct Proxy {
    addr: SocketAddr,
    armed: Arc<AtomicBool>,
    sent: Arc<[AtomicU64; 2]>,
    limit: Arc<[AtomicU64; 2]>,
    cuts: Arc<AtomicU64>,
    /// 0: off; 1: cut before forwarding COMMIT; 2: forward COMMIT, then cut
    /// before its reply.
    at_commit: Arc<AtomicU64>,
    /// Set once COMMIT went through in mode 2: the server's reply is lost.
    commit_sent: Arc<AtomicBool>,
}

/// A simple-protocol `COMMIT` message, as sqlx sends it.
const COMMIT_MSG: &[u8] = b"Q\0\0\0\x0bCOMMIT\0";

impl Proxy {
    async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let proxy = Proxy {
            addr: listener.local_addr().expect("addr"),
            armed: Arc::default(),
            sent: Arc::new([AtomicU64::new(0), AtomicU64::new(0)]),
            limit: Arc::new([AtomicU64::new(u64::MAX), AtomicU64::new(u64::MAX)]),
            cuts: Arc::default(),
            at_commit: Arc::default(),
            commit_sent: Arc::default(),
        };
        let state = State {
            armed: proxy.armed.clone(),
            sent: proxy.sent.clone(),
            limit: proxy.limit.clone(),
            at_commit: proxy.at_commit.clone(),
            commit_sent: proxy.commit_sent.clone(),
        };
        let cuts = proxy.cuts.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(upstream).await else {
                    continue;
                };
                let (state, cuts) = (state.clone(), cuts.clone());
                tokio::spawn(async move {
                    let (mut cr, mut cw) = client.into_split();
                    let (mut sr, mut sw) = server.into_split();
                    let up = pump(UP, &mut cr, &mut sw, &state);
                    let down = pump(DOWN, &mut sr, &mut cw, &state);
                    // Whichever side stops (a cut or a close) ends both:
                    // the halves are dropped and both sockets close.
                    let cut = tokio::select! {
                        c = up => c,
                        c = down => c,
                    };
                    if cut {
                        cuts.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
        });
        proxy
    }

    /// Cuts at the next COMMIT: before forwarding it (`deliver` false) or
    /// after, dropping the server's reply.
    fn arm_commit(&self, deliver: bool) {
        self.commit_sent.store(false, Ordering::SeqCst);
        self.at_commit
            .store(if deliver { 2 } else { 1 }, Ordering::SeqCst);
        self.limit[UP].store(u64::MAX, Ordering::SeqCst);
        self.limit[DOWN].store(u64::MAX, Ordering::SeqCst);
        self.armed.store(true, Ordering::SeqCst);
    }

    /// Cuts at the `limit`-th byte in `dir` from now on.
    fn arm(&self, dir: usize, limit: u64) {
        self.at_commit.store(0, Ordering::SeqCst);
        self.sent[UP].store(0, Ordering::SeqCst);
        self.sent[DOWN].store(0, Ordering::SeqCst);
        self.limit[dir].store(limit, Ordering::SeqCst);
        self.limit[1 - dir].store(u64::MAX, Ordering::SeqCst);
        self.armed.store(true, Ordering::SeqCst);
    }

    /// Counts without cutting.
    fn count(&self) {
        self.arm(UP, u64::MAX);
    }

    fn disarm(&self) {
        self.armed.store(false, Ordering::SeqCst);
    }

    fn sent(&self, dir: usize) -> u64 {
        self.sent[dir].load(Ordering::SeqCst)
    }
}

/// What the pumps share.
#[derive(Clone)]
struct State {
    armed: Arc<AtomicBool>,
    sent: Arc<[AtomicU64; 2]>,
    limit: Arc<[AtomicU64; 2]>,
    at_commit: Arc<AtomicU64>,
    commit_sent: Arc<AtomicBool>,
}

/// Copies `from` to `to`; true when it cut the connection.
async fn pump(
    dir: usize,
    from: &mut tokio::net::tcp::OwnedReadHalf,
    to: &mut tokio::net::tcp::OwnedWriteHalf,
    st: &State,
) -> bool {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => n,
        };
        let mut pass = n;
        let mut cut = false;
        if st.armed.load(Ordering::SeqCst) {
            let commit_mode = st.at_commit.load(Ordering::SeqCst);
            if commit_mode != 0 {
                let has_commit = buf[..n].windows(COMMIT_MSG.len()).any(|w| w == COMMIT_MSG);
                if dir == UP && has_commit && commit_mode == 1 {
                    return true;
                }
                if dir == UP && has_commit {
                    st.commit_sent.store(true, Ordering::SeqCst);
                }
                if dir == DOWN && st.commit_sent.load(Ordering::SeqCst) {
                    return true;
                }
            } else {
                let before = st.sent[dir].fetch_add(n as u64, Ordering::SeqCst);
                let lim = st.limit[dir].load(Ordering::SeqCst);
                if before + n as u64 > lim {
                    pass = lim.saturating_sub(before) as usize;
                    cut = true;
                }
            }
        }
        if to.write_all(&buf[..pass]).await.is_err() {
            return false;
        }
        if cut {
            return true;
        }
    }
}

/// `url` with its host and port replaced by `addr`.
fn via(url: &str, addr: SocketAddr) -> String {
    let (scheme_user, rest) = url.split_once('@').expect("url with user@host");
    let (_, db) = rest.split_once('/').expect("url with /db");
    format!("{scheme_user}@{addr}/{db}")
}

fn upstream(url: &str) -> SocketAddr {
    let (_, rest) = url.split_once('@').expect("url with user@host");
    let (host, _) = rest.split_once('/').expect("url with /db");
    let host = host.replace("localhost", "127.0.0.1");
    host.parse().expect("MSSMT_PG_URL names host:port")
}

fn batch(tag: &str, round: u64, n: u64) -> Vec<(Key, Leaf)> {
    (0..n)
        .map(|i| {
            let leaf = Leaf::new(format!("{round}/{i}").into_bytes(), round * 1000 + i + 1);
            (hkey(tag, round * 10_000 + i), leaf)
        })
        .collect()
}

/// A store on a fresh pool through the proxy (no migration: the direct
/// store ran it), so every trial's write sends the same statements.
async fn through(url: &str, ns: &str) -> PostgresStore {
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .test_before_acquire(false)
        .connect(url)
        .await
        .expect("connect via proxy");
    PostgresStore::from_pool(pool, ns).with_recent_nodes(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ambiguous_commits_postgres() {
    let Some(url) = pg_url("ambiguous_commits_postgres") else {
        return;
    };
    let proxy = Proxy::start(upstream(&url)).await;
    let proxied = via(&url, proxy.addr);
    let direct = PostgresStore::connect(&url).await.expect("connect");
    let ns = unique("ambiguous");
    let tag = ns.clone();

    // One write's traffic on a fresh pool, measured without cutting.
    let mut applied = vec![batch(&tag, 0, 200)];
    CompactedTree::new(direct.open_namespace(&ns))
        .insert_many(applied[0].clone())
        .await
        .expect("seed");
    {
        let tree = CompactedTree::new(through(&proxied, &ns).await);
        tree.root().await.expect("warm the pool");
        proxy.count();
        let probe = batch(&tag, 1, 20);
        tree.insert_many(probe.clone())
            .await
            .expect("measured write");
        proxy.disarm();
        applied.push(probe);
    }
    let total = [proxy.sent(UP), proxy.sent(DOWN)];

    // Every 1/40 of the write's bytes each way, then COMMIT withheld (it
    // never ran) and COMMIT delivered with its reply lost (it ran), 10 each.
    let mut cuts: Vec<(usize, u64)> = Vec::new();
    for dir in [UP, DOWN] {
        let step = (total[dir] / 40).max(1);
        cuts.extend((0..total[dir]).step_by(step as usize).map(|l| (dir, l)));
    }
    cuts.extend((0..20).map(|i| (2, i % 2)));

    let (mut points, mut errors, mut landed_before_retry) = (0, 0, 0);
    let check = CompactedTree::new(direct.open_namespace(&ns).with_recent_nodes(0));
    for (round, (dir, limit)) in (2u64..).zip(cuts) {
        let tree = CompactedTree::new(through(&proxied, &ns).await);
        tree.root().await.expect("warm the pool");
        let b = batch(&tag, round, 20);
        let before = root_of(&applied).await;
        let after = root_of(&[applied.clone(), vec![b.clone()]].concat()).await;
        if dir == 2 {
            proxy.arm_commit(limit == 1);
        } else {
            proxy.arm(dir, limit);
        }
        let first = tree.insert_many(b.clone()).await;
        proxy.disarm();
        points += 1;
        match first {
            // The cut came after the reply: an honest success.
            Ok(root) => assert_eq!(root, after, "cut {dir}/{limit}: Ok with a wrong root"),
            Err(e) => {
                errors += 1;
                let now = check.root().await.expect("root");
                assert!(
                    now == before || now == after,
                    "cut {dir}/{limit}: after {e}, root is neither old nor new"
                );
                if now == after {
                    landed_before_retry += 1;
                }
                if dir == 2 {
                    assert_eq!(now == after, limit == 1, "cut at COMMIT {limit}");
                }
                // The retry, through the proxy (now passing everything).
                let root = tree.insert_many(b.clone()).await.expect("retry");
                assert_eq!(root, after, "cut {dir}/{limit}: retry");
            }
        }
        applied.push(b);
        assert_eq!(check.root().await.expect("root"), after, "applied once");
        assert_audit_clean(&check, &format!("cut {dir}/{limit}")).await;
    }
    println!(
        "ambiguous commits: {points} cut points ({} client bytes, {} server bytes per write), \
         {errors} errors, {landed_before_retry} writes had landed before their retry, \
         {} connections cut",
        total[UP],
        total[DOWN],
        proxy.cuts.load(Ordering::Relaxed)
    );
    assert!(
        errors > 0,
        "no cut produced an error: the proxy is not in the path"
    );
    assert!(
        landed_before_retry >= 10,
        "COMMIT ran but its reply was lost"
    );
}
