//! TLS through rustls (ring; no OpenSSL): the server's certificate and
//! key from PEM files, or a self-signed pair made at a first start (as
//! tapd does), and what a client trusts ([`Trust`]).

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// Why TLS material could not be read, made or used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// A PEM file holds no certificate or key, or does not parse.
    #[error("{path}: not a PEM {what}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What it should hold.
        what: &'static str,
    },
    /// Only one of the certificate and key files exists.
    #[error("{present} exists but {missing} does not: give both, or neither to generate a pair")]
    HalfPair {
        /// The file that exists.
        present: PathBuf,
        /// The one that does not.
        missing: PathBuf,
    },
    /// The self-signed pair could not be made.
    #[error("generating a self-signed certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// rustls refused the configuration (a key that does not match its
    /// certificate, for example).
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    /// The system's root certificates could not be loaded.
    #[error("no usable root certificates in the system store")]
    NoRoots,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> TlsError + '_ {
    move |source| TlsError::Io {
        path: path.to_owned(),
        source,
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The names a generated certificate always covers: loopback.
const LOOPBACK_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// A server's certificate chain and private key.
pub struct TlsIdentity {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl fmt::Debug for TlsIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsIdentity")
            .field("certificates", &self.chain.len())
            .finish_non_exhaustive()
    }
}

impl TlsIdentity {
    /// The chain in `cert` (PEM, leaf first) and the key in `key` (PEM:
    /// PKCS#8, PKCS#1 or SEC1).
    pub fn from_pem_files(cert: &Path, key: &Path) -> Result<Self, TlsError> {
        let chain = read_certificates(cert)?;
        let pem = std::fs::read(key).map_err(io(key))?;
        let key = PrivateKeyDer::from_pem_slice(&pem).map_err(|_| TlsError::Pem {
            path: key.to_owned(),
            what: "private key",
        })?;
        Ok(TlsIdentity { chain, key })
    }

    /// A new self-signed certificate for `names` (DNS names or IP
    /// addresses) and loopback, with its key: the identity and both as PEM
    /// (certificate, key).
    pub fn self_signed(names: &[String]) -> Result<(Self, String, String), TlsError> {
        let mut all: Vec<String> = LOOPBACK_NAMES.iter().map(|s| (*s).to_owned()).collect();
        all.extend(
            names
                .iter()
                .filter(|n| !all.contains(n))
                .cloned()
                .collect::<Vec<_>>(),
        );
        let made = rcgen::generate_simple_self_signed(all)?;
        let cert_pem = made.cert.pem();
        let key_pem = made.signing_key.serialize_pem();
        let key = PrivateKeyDer::try_from(made.signing_key.serialize_der()).map_err(|_| {
            TlsError::Pem {
                path: PathBuf::new(),
                what: "private key",
            }
        })?;
        let identity = TlsIdentity {
            chain: vec![made.cert.der().clone()],
            key,
        };
        Ok((identity, cert_pem, key_pem))
    }

    /// The pair in `cert` and `key`; when neither file exists, a
    /// self-signed pair for `names` and loopback is made and written there
    /// first (the key readable by its owner only), as tapd does on a
    /// first start. True when it was made.
    pub fn load_or_generate(
        cert: &Path,
        key: &Path,
        names: &[String],
    ) -> Result<(Self, bool), TlsError> {
        match (cert.exists(), key.exists()) {
            (true, true) => Ok((Self::from_pem_files(cert, key)?, false)),
            (false, false) => {
                let (identity, cert_pem, key_pem) = Self::self_signed(names)?;
                write_new(key, key_pem.as_bytes(), 0o600)?;
                write_new(cert, cert_pem.as_bytes(), 0o644)?;
                Ok((identity, true))
            }
            (true, false) => Err(TlsError::HalfPair {
                present: cert.to_owned(),
                missing: key.to_owned(),
            }),
            (false, true) => Err(TlsError::HalfPair {
                present: key.to_owned(),
                missing: cert.to_owned(),
            }),
        }
    }

    /// The leaf certificate (DER), for a client to pin.
    pub fn certificate(&self) -> Option<&CertificateDer<'static>> {
        self.chain.first()
    }

    /// The rustls server configuration of the HTTP server: TLS 1.2 and
    /// 1.3, ALPN `http/1.1`.
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        self.config_with_alpn(b"http/1.1")
    }

    /// The rustls server configuration of the gRPC universe service: TLS
    /// 1.2 and 1.3, ALPN `h2` (gRPC clients, tapd's among them, refuse a
    /// server that does not select it).
    pub fn grpc_server_config(&self) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        self.config_with_alpn(b"h2")
    }

    fn config_with_alpn(&self, protocol: &[u8]) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(self.chain.clone(), self.key.clone_key())?;
        config.alpn_protocols = vec![protocol.to_vec()];
        Ok(Arc::new(config))
    }
}

/// Writes `bytes` to a new file at `path` with Unix permissions `mode`.
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), TlsError> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    let mut file = options.open(path).map_err(io(path))?;
    file.write_all(bytes).map_err(io(path))?;
    file.sync_all().map_err(io(path))
}

/// Every certificate in the PEM file at `path` (at least one).
fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = std::fs::read(path).map_err(io(path))?;
    let bad = || TlsError::Pem {
        path: path.to_owned(),
        what: "certificate",
    };
    let chain = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| bad())?;
    if chain.is_empty() {
        return Err(bad());
    }
    Ok(chain)
}

/// Which servers a client believes.
#[derive(Debug, Clone)]
pub enum Trust {
    /// Certificates signed by the system's root authorities, for the host
    /// name asked for (the default).
    SystemRoots,
    /// Certificates signed by one of these authorities (a private CA),
    /// for the host name asked for.
    Authorities(Vec<CertificateDer<'static>>),
    /// Exactly this certificate, whatever name it carries (a self-signed
    /// server's, copied from its `tls.cert`).
    Pinned(CertificateDer<'static>),
}

impl Trust {
    /// The authorities in the PEM file at `path`.
    pub fn ca_file(path: &Path) -> Result<Self, TlsError> {
        Ok(Trust::Authorities(read_certificates(path)?))
    }

    /// The first certificate in the PEM file at `path`, pinned.
    pub fn pinned_file(path: &Path) -> Result<Self, TlsError> {
        let mut chain = read_certificates(path)?;
        Ok(Trust::Pinned(chain.swap_remove(0)))
    }

    /// The rustls client configuration that believes what this says (no
    /// ALPN set: the HTTP connector sets its own).
    pub fn client_config(&self) -> Result<rustls::ClientConfig, TlsError> {
        let builder = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?;
        let config = match self {
            Trust::SystemRoots | Trust::Authorities(_) => {
                let mut roots = rustls::RootCertStore::empty();
                let certs = match self {
                    Trust::Authorities(certs) => certs.clone(),
                    _ => rustls_native_certs::load_native_certs().certs,
                };
                let (added, _) = roots.add_parsable_certificates(certs);
                if added == 0 {
                    return Err(TlsError::NoRoots);
                }
                builder.with_root_certificates(roots).with_no_client_auth()
            }
            Trust::Pinned(cert) => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(PinnedVerifier {
                    cert: cert.clone(),
                    provider: provider(),
                }))
                .with_no_client_auth(),
        };
        Ok(config)
    }
}

/// A client configuration that believes no server (the unused TLS side of
/// a plain-HTTP client).
pub(crate) fn trust_nothing() -> Result<rustls::ClientConfig, TlsError> {
    Ok(rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth())
}

/// Accepts exactly one certificate (byte for byte), and checks that the
/// server holds its key (the handshake signature).
#[derive(Debug)]
struct PinnedVerifier {
    cert: CertificateDer<'static>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for PinnedVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if end_entity.as_ref() == self.cert.as_ref() {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
