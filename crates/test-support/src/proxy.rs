//! A TCP proxy in front of the test Postgres, to take the server out of
//! reach in the ways a failover does: every connection cut and new ones
//! refused ([`Gate::Cut`]), or every connection held open with nothing
//! forwarded either way, new ones accepted the same way ([`Gate::Frozen`]:
//! a server whose processes are stopped, whose kernel still answers TCP).

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
                        _ = pump(client_read, server_write, gate.clone()) => {}
                        _ = pump(server_read, client_write, gate) => {}
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
}

/// Copies `from` to `to` while the gate is open; holds while it is frozen;
/// returns when it is cut or either side closes.
async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, mut gate: watch::Receiver<Gate>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match gate.wait_for(|g| *g != Gate::Frozen).await.map(|g| *g) {
            Ok(Gate::Open) => {}
            _ => return,
        }
        tokio::select! {
            read = from.read(&mut buf) => {
                let n = match read {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                // Frozen meanwhile: the bytes wait with the rest.
                match gate.wait_for(|g| *g != Gate::Frozen).await.map(|g| *g) {
                    Ok(Gate::Open) => {}
                    _ => return,
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

/// `url` rewritten to reach its server through a new proxy.
pub async fn through_proxy(url: &str) -> (Proxy, String) {
    let rest = url.split_once("://").expect("scheme").1;
    let host_port = rest.split(['/', '?']).next().expect("host");
    let host_port = host_port.rsplit_once('@').map_or(host_port, |(_, h)| h);
    let proxy = Proxy::start(host_port.to_owned()).await;
    let proxied = url.replacen(host_port, &format!("127.0.0.1:{}", proxy.port), 1);
    (proxy, proxied)
}
