//! A TCP proxy in front of the test Postgres, to take the server out of
//! reach in the ways a failover does: every connection cut and new ones
//! refused ([`Gate::Cut`]), or every connection held open with nothing
//! forwarded either way, new ones accepted the same way ([`Gate::Frozen`]:
//! a server whose processes are stopped, whose kernel still answers TCP),
//! or cut at the moment a client asks to commit ([`Gate::CutAtCommit`]: the
//! client cannot know whether its transaction landed, every time, not only
//! when a timed cut happens to fall inside a commit).

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does with the connections it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Forwards both ways.
    Open,
    /// Closes every connection and refuses new ones.
    Cut,
    /// Holds every connection (and accepts new ones) without forwarding
    /// a byte until the gate opens again.
    Frozen,
    /// Forwards both ways until a client sends `COMMIT`; that message is
    /// dropped and the gate turns to [`Gate::Cut`].
    CutAtCommit,
}

/// The proxy: its port, and the gate.
pub struct Proxy {
    pub port: u16,
    gate: watch::Sender<Gate>,
}

impl Proxy {
    /// A proxy on a free loopback port forwarding to `upstream`
    /// (`host:port`).
    pub async fn start(upstream: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let (gate, _) = watch::channel(Gate::Open);
        let watch = gate.clone();
        tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let gate = watch.subscribe();
                let sender = watch.clone();
                if *gate.borrow() == Gate::Cut {
                    drop(client);
                    continue;
                }
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(&upstream).await else {
                        return;
                    };
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    // Either direction ending ends the connection.
                    tokio::select! {
                        _ = pump(client_read, server_write, gate.clone(), Some(sender)) => {}
                        _ = pump(server_read, client_write, gate, None) => {}
                    }
                });
            }
        });
        Proxy { port, gate }
    }

    /// Sets the gate for every connection, carried or new.
    pub fn set(&self, gate: Gate) {
        self.gate.send_replace(gate);
    }

    /// Returns once the gate is `gate` (a [`Gate::CutAtCommit`] that has
    /// fired reads [`Gate::Cut`]).
    pub async fn wait_for(&self, gate: Gate) {
        let mut watch = self.gate.subscribe();
        // The sender lives in `self`: the watch cannot close meanwhile.
        let _ = watch.wait_for(|g| *g == gate).await;
    }
}

/// Whether the gate lets bytes through.
fn forwards(gate: Gate) -> bool {
    matches!(gate, Gate::Open | Gate::CutAtCommit)
}

/// Copies `from` to `to` while the gate is open; holds while it is frozen;
/// returns when it is cut or either side closes. `client_side`, the gate's
/// sender, is given for the client-to-server direction, which is where a
/// [`Gate::CutAtCommit`] watches for a `COMMIT`.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut gate: watch::Receiver<Gate>,
    client_side: Option<watch::Sender<Gate>>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match gate.wait_for(|g| *g != Gate::Frozen).await.map(|g| *g) {
            Ok(g) if forwards(g) => {}
            _ => return,
        }
        tokio::select! {
            read = from.read(&mut buf) => {
                let n = match read {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                // Frozen meanwhile: the bytes wait with the rest.
                let now = match gate.wait_for(|g| *g != Gate::Frozen).await.map(|g| *g) {
                    Ok(g) if forwards(g) => g,
                    _ => return,
                };
                if now == Gate::CutAtCommit
                    && asks_to_commit(&buf[..n])
                    && let Some(sender) = &client_side
                {
                    sender.send_replace(Gate::Cut);
                    return;
                }
                if to.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
            changed = gate.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
    }
}

/// Whether `bytes` (what a client sent) hold a `COMMIT`: sqlx commits with
/// a simple query message (`Q`, its length 11 as a big-endian `u32`, then
/// `COMMIT` and a NUL).
fn asks_to_commit(bytes: &[u8]) -> bool {
    const COMMIT: &[u8] = b"Q\0\0\0\x0bCOMMIT\0";
    bytes.windows(COMMIT.len()).any(|w| w == COMMIT)
}

/// `url` rewritten to reach its server through a new proxy.
pub async fn through_proxy(url: &str) -> (Proxy, String) {
    let rest = url.split_once("://").expect("scheme").1;
    let host_port = rest.split(['/', '?']).next().expect("host");
    let host_port = host_port.rsplit_once('@').map_or(host_port, |(_, h)| h);
    let proxy = Proxy::start(host_port.to_owned()).await;
    let proxied = url.replacen(host_port, &format!("127.0.0.1:{}", proxy.port), 1);
    (proxy, proxied)
}
