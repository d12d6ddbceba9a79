//! What the hostile-client campaigns share (`federation_campaign`,
//! `grpc_campaign`): the server process's memory and descriptors, watched
//! through a phase; attacker addresses on loopback; latency figures.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::task::JoinHandle;

/// Process `pid`'s resident memory (KiB) and open descriptors, from
/// `/proc` (0 where it cannot be read).
pub fn usage(pid: u32) -> (u64, u64) {
    let rss = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0);
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count() as u64)
        .unwrap_or(0);
    (rss, fds)
}

/// One phase's clock and watch: `stop` is set once `phase` has passed
/// (`timer` ends then), and until it is set `sampler` reads [`usage`]
/// every 100 ms into `peak`, starting from `before`.
pub struct PhaseWatch {
    /// Set when the phase is over.
    pub stop: Arc<AtomicBool>,
    /// The largest RSS and descriptor count seen.
    pub peak: Arc<Mutex<(u64, u64)>>,
    /// The sampling task.
    pub sampler: JoinHandle<()>,
    /// The task that sets `stop`.
    pub timer: JoinHandle<()>,
}

impl PhaseWatch {
    /// Starts watching `pid` for `phase`.
    pub fn start(pid: u32, before: (u64, u64), phase: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(Mutex::new(before));
        let sampler = {
            let (stop, peak) = (stop.clone(), peak.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let (rss, fds) = usage(pid);
                    let mut p = peak.lock().await;
                    *p = (p.0.max(rss), p.1.max(fds));
                    drop(p);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        };
        let timer = {
            let stop = stop.clone();
            tokio::spawn(async move {
                tokio::time::sleep(phase).await;
                stop.store(true, Ordering::Relaxed);
            })
        };
        PhaseWatch {
            stop,
            peak,
            sampler,
            timer,
        }
    }
}

/// The `i`-th attacker address of `block`: 127.`block`.x.y, 250 to an x.
pub fn attacker_ip(block: u8, i: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, block, (i / 250) as u8, (i % 250 + 1) as u8)
}

/// The `p` quantile (0 to 1) of `sorted` (zero when empty).
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

/// `d` in milliseconds, one decimal.
pub fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}
