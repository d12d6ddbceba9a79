//! The TLS connector of [`UniversePeer`](super::UniversePeer): TCP to the
//! peer's address, then a rustls handshake offering only ALPN `h2` (gRPC
//! needs HTTP/2; tapd's server offers nothing else), for the host name
//! asked for. tonic's channel gets the stream as if it were plain HTTP/2:
//! its own TLS is not compiled in, so the URI it sees is `http://`.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// Connects to one address over TLS, whatever URI tonic asks for.
#[derive(Clone)]
pub(super) struct TlsConnect {
    config: Arc<rustls::ClientConfig>,
    name: ServerName<'static>,
    addr: String,
}

impl TlsConnect {
    /// A connector to `addr` (`host:port`) for the server `name`, with
    /// `config`'s trust; its ALPN is set to `h2` alone.
    pub(super) fn new(
        mut config: rustls::ClientConfig,
        name: ServerName<'static>,
        addr: String,
    ) -> Self {
        config.alpn_protocols = vec![b"h2".to_vec()];
        TlsConnect {
            config: Arc::new(config),
            name,
            addr,
        }
    }
}

type Connecting = Pin<Box<dyn Future<Output = io::Result<TokioIo<TlsStream<TcpStream>>>> + Send>>;

impl tower_service::Service<hyper::Uri> for TlsConnect {
    type Response = TokioIo<TlsStream<TcpStream>>;
    type Error = io::Error;
    type Future = Connecting;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: hyper::Uri) -> Connecting {
        let (config, name, addr) = (self.config.clone(), self.name.clone(), self.addr.clone());
        Box::pin(async move {
            let tcp = TcpStream::connect(&addr).await?;
            tcp.set_nodelay(true)?;
            let tls = TlsConnector::from(config).connect(name, tcp).await?;
            if tls.get_ref().1.alpn_protocol() != Some(b"h2") {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "the server did not agree to HTTP/2 (ALPN h2)",
                ));
            }
            Ok(TokioIo::new(tls))
        })
    }
}
