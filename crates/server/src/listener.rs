//! The accept loop: what one client can hold of the server's connections.
//!
//! Every connection takes a slot ([`ListenConfig::max_connections`], at
//! most [`ListenConfig::max_per_address`] per client address); a
//! connection over either cap is answered at once (a 503 on plain HTTP,
//! closed on TLS) instead of waiting. A request's header must arrive whole
//! within [`ListenConfig::header_timeout`] of the connection (or its
//! previous answer) being ready for it, the TLS handshake included, and a
//! connection on which no byte moves either way for
//! [`ListenConfig::idle_timeout`] is closed: a half-sent request or an
//! unread answer holds its slot for seconds, not for ever.
//!
//! The same loop serves the gRPC face (feature `grpc`) over HTTP/2: there
//! the header timeout covers the TLS handshake only (HTTP/2 frames have no
//! per-request header deadline in hyper), the idle timeout holds as on
//! HTTP/1.1, and [`ListenConfig::max_streams`] caps the requests one
//! connection carries at once.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

use super::server::ClientAddr;

/// Default [`ListenConfig::max_connections`].
pub const DEFAULT_MAX_CONNECTIONS: usize = 1_024;
/// Default [`ListenConfig::max_per_address`].
pub const DEFAULT_MAX_PER_ADDRESS: usize = 64;
/// Default [`ListenConfig::header_timeout`].
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// Default [`ListenConfig::idle_timeout`].
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Default [`ListenConfig::max_streams`].
pub const DEFAULT_MAX_STREAMS: u32 = 100;

/// Largest request header (and read buffer) a connection holds.
const MAX_HEADER_BYTES: usize = 64 << 10;

/// What a listener speaks on its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protocol {
    /// HTTP/1.1 (the JSON routes).
    Http1,
    /// HTTP/2 only (gRPC): over TLS with ALPN `h2`, or with prior
    /// knowledge on plain TCP.
    #[cfg(feature = "grpc")]
    Http2,
}

/// The answer to a connection over a cap, on plain HTTP.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
connection: close\r\nretry-after: 1\r\ncontent-length: 37\r\n\r\n{\"error\":\"too many open connections\"}";

/// How the server speaks on its port.
#[derive(Clone)]
pub enum Transport {
    /// TLS with this configuration ([`TlsIdentity::server_config`](super::TlsIdentity::server_config)).
    Tls(Arc<rustls::ServerConfig>),
    /// Plain HTTP: tokens and data in clear. Only on loopback, or behind a
    /// proxy that terminates TLS.
    Plain,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Transport::Tls(_) => "Tls",
            Transport::Plain => "Plain",
        })
    }
}

/// How the server holds its connections. There is no default transport:
/// start from [`ListenConfig::tls`] or, when asked for, [`ListenConfig::plain`].
#[derive(Debug, Clone)]
pub struct ListenConfig {
    /// TLS or plain HTTP.
    pub transport: Transport,
    /// Connections open at most (default [`DEFAULT_MAX_CONNECTIONS`]).
    pub max_connections: usize,
    /// Connections open at most from one client address (default
    /// [`DEFAULT_MAX_PER_ADDRESS`]).
    pub max_per_address: usize,
    /// Time a request header (and a TLS handshake) may take to arrive
    /// whole, counted from when the connection is ready for it; also how
    /// long a kept-alive connection may wait for its next request
    /// (default [`DEFAULT_HEADER_TIMEOUT`]).
    pub header_timeout: Duration,
    /// A connection on which no byte moves either way for this long is
    /// closed (default [`DEFAULT_IDLE_TIMEOUT`]).
    pub idle_timeout: Duration,
    /// Requests open at once on one HTTP/2 connection (the gRPC face;
    /// default [`DEFAULT_MAX_STREAMS`]); more are refused by the protocol
    /// (`REFUSED_STREAM`). HTTP/1.1 has one at a time.
    pub max_streams: u32,
}

impl ListenConfig {
    fn with(transport: Transport) -> Self {
        ListenConfig {
            transport,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_per_address: DEFAULT_MAX_PER_ADDRESS,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_streams: DEFAULT_MAX_STREAMS,
        }
    }

    /// TLS with `config`, default limits.
    pub fn tls(config: Arc<rustls::ServerConfig>) -> Self {
        Self::with(Transport::Tls(config))
    }

    /// Plain HTTP, default limits: for loopback, or behind a TLS proxy.
    pub fn plain() -> Self {
        Self::with(Transport::Plain)
    }

    /// At most `n` connections open.
    pub fn max_connections(mut self, n: usize) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// At most `n` connections open from one address.
    pub fn max_per_address(mut self, n: usize) -> Self {
        self.max_per_address = n.max(1);
        self
    }

    /// A request header must arrive within `t`.
    pub fn header_timeout(mut self, t: Duration) -> Self {
        self.header_timeout = t;
        self
    }

    /// A connection idle for `t` is closed.
    pub fn idle_timeout(mut self, t: Duration) -> Self {
        self.idle_timeout = t;
        self
    }

    /// At most `n` requests open at once on one HTTP/2 connection.
    pub fn max_streams(mut self, n: u32) -> Self {
        self.max_streams = n.max(1);
        self
    }
}

/// Connections open per client address.
#[derive(Default)]
struct PerAddress(Mutex<HashMap<IpAddr, usize>>);

impl PerAddress {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, usize>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One more for `ip`, unless it has `max` already.
    fn enter(self: &Arc<Self>, ip: IpAddr, max: usize) -> Option<AddressSlot> {
        let mut map = self.lock();
        let n = map.entry(ip).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(AddressSlot {
            map: self.clone(),
            ip,
        })
    }
}

/// A connection's place in its address's count, given back on drop.
struct AddressSlot {
    map: Arc<PerAddress>,
    ip: IpAddr,
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut map = self.map.lock();
        if let Some(n) = map.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                map.remove(&self.ip);
            }
        }
    }
}

/// A stream that notes when a byte last moved.
struct Watched<T> {
    inner: T,
    epoch: Instant,
    /// Milliseconds since `epoch` of the last byte moved.
    last: Arc<AtomicU64>,
}

impl<T> Watched<T> {
    fn touch(&self) {
        let ms = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(ms, Ordering::Relaxed);
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let out = Pin::new(&mut this.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.touch();
        }
        out
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let out = Pin::new(&mut this.inner).poll_write(cx, buf);
        if matches!(out, Poll::Ready(Ok(n)) if n > 0) {
            this.touch();
        }
        out
    }

    /// Forwarded, so TLS records and HTTP heads go out in one call.
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let out = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if matches!(out, Poll::Ready(Ok(n)) if n > 0) {
            this.touch();
        }
        out
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// Serves `router` on `listener` as `config` says until `shutdown`
/// resolves; then stops accepting, lets every open connection finish its
/// request in hand, and returns.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    config: ListenConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    serve_as(listener, router, config, Protocol::Http1, shutdown).await
}

/// [`serve`] speaking `protocol`.
pub(crate) async fn serve_as(
    listener: TcpListener,
    router: Router,
    config: ListenConfig,
    protocol: Protocol,
    shutdown: impl Future<Output = ()> + Send,
) -> io::Result<()> {
    let slots = Arc::new(Semaphore::new(config.max_connections));
    let per_address = Arc::new(PerAddress::default());
    let acceptor = match &config.transport {
        Transport::Tls(tls) => Some(tokio_rustls::TlsAcceptor::from(tls.clone())),
        Transport::Plain => None,
    };
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        while tasks.try_join_next().is_some() {}
        let (stream, addr) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                // Out of descriptors or a connection reset before it was
                // taken: wait a little and go on.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
        };
        let slot = slots.clone().try_acquire_owned().ok();
        let address = per_address.enter(addr.ip(), config.max_per_address);
        let (Some(slot), Some(address)) = (slot, address) else {
            if acceptor.is_none() {
                // Best effort: a full socket buffer just gets the close.
                let _ = stream.try_write(BUSY);
            }
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let connection = Connection {
            router: router.clone(),
            addr,
            header_timeout: config.header_timeout,
            idle_timeout: config.idle_timeout,
            #[cfg(feature = "grpc")]
            max_streams: config.max_streams,
            protocol,
            stop: stop_rx.clone(),
        };
        let acceptor = acceptor.clone();
        tasks.spawn(async move {
            let _held = (slot, address);
            connection.run(stream, acceptor).await;
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    while tasks.join_next().await.is_some() {}
    Ok(())
}

/// One accepted connection.
struct Connection {
    router: Router,
    addr: SocketAddr,
    header_timeout: Duration,
    idle_timeout: Duration,
    #[cfg(feature = "grpc")]
    max_streams: u32,
    protocol: Protocol,
    stop: watch::Receiver<bool>,
}

impl Connection {
    async fn run(self, stream: TcpStream, acceptor: Option<tokio_rustls::TlsAcceptor>) {
        let last = Arc::new(AtomicU64::new(0));
        let epoch = Instant::now();
        let io = Watched {
            inner: stream,
            epoch,
            last: last.clone(),
        };
        match acceptor {
            None => self.http(io, epoch, last).await,
            Some(acceptor) => {
                let Ok(Ok(tls)) =
                    tokio::time::timeout(self.header_timeout, acceptor.accept(io)).await
                else {
                    return;
                };
                self.http(tls, epoch, last).await;
            }
        }
    }

    /// The connection's protocol on `io` until the client leaves, a
    /// timeout, or shutdown.
    async fn http<T>(self, io: T, epoch: Instant, last: Arc<AtomicU64>)
    where
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let router = self.router.clone();
        let addr = self.addr;
        let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
            request.extensions_mut().insert(ClientAddr(addr));
            let mut router = router.clone();
            tower_service::Service::call(&mut router, request)
        });
        match self.protocol {
            Protocol::Http1 => {
                let mut builder = hyper::server::conn::http1::Builder::new();
                builder
                    .timer(TokioTimer::new())
                    .header_read_timeout(self.header_timeout)
                    .max_buf_size(MAX_HEADER_BYTES)
                    .keep_alive(true);
                let conn = builder.serve_connection(TokioIo::new(io), service);
                self.drive(conn, epoch, last).await;
            }
            #[cfg(feature = "grpc")]
            Protocol::Http2 => {
                let mut builder =
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new());
                builder
                    .timer(TokioTimer::new())
                    .max_concurrent_streams(self.max_streams)
                    .max_header_list_size(u32::try_from(MAX_HEADER_BYTES).unwrap_or(u32::MAX));
                let conn = builder.serve_connection(TokioIo::new(io), service);
                self.drive(conn, epoch, last).await;
            }
        }
    }

    /// Runs `conn` until it ends, no byte has moved for the idle timeout,
    /// or shutdown (which lets its requests in hand finish).
    async fn drive<F: Served>(mut self, conn: F, epoch: Instant, last: Arc<AtomicU64>) {
        let mut conn = std::pin::pin!(conn);
        let idle_ms = u64::try_from(self.idle_timeout.as_millis()).unwrap_or(u64::MAX);
        let tick =
            (self.idle_timeout / 4).clamp(Duration::from_millis(100), Duration::from_secs(1));
        let mut watchdog = tokio::time::interval(tick);
        let mut stopping = false;
        loop {
            tokio::select! {
                _ = conn.as_mut() => return,
                _ = watchdog.tick() => {
                    let now = u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
                    if now.saturating_sub(last.load(Ordering::Relaxed)) > idle_ms {
                        return;
                    }
                }
                changed = self.stop.changed(), if !stopping => {
                    stopping = true;
                    if changed.is_ok() {
                        conn.as_mut().shut_down();
                    }
                }
            }
        }
    }
}

/// A served connection of either protocol: a future that ends with the
/// connection, and can be asked to finish what it holds and close.
trait Served: Future {
    /// hyper's `graceful_shutdown`.
    fn shut_down(self: Pin<&mut Self>);
}

impl<I, S, B> Served for hyper::server::conn::http1::Connection<I, S>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
    S: hyper::service::HttpService<Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: hyper::body::Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    fn shut_down(self: Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

#[cfg(feature = "grpc")]
impl<I, S, B> Served for hyper::server::conn::http2::Connection<I, S, hyper_util::rt::TokioExecutor>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
    S: hyper::service::HttpService<Incoming, ResBody = B>,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    fn shut_down(self: Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}
