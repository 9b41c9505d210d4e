//! HTTPS for the webhook: rustls with a certificate re-read from its files when they
//! change (cert-manager rotates them in place), handshakes off the accept loop.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use axum::Router;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::server::TlsStream;

/// How often the files' modification times are looked at, at most.
const RECHECK: Duration = Duration::from_secs(2);
/// A client that has not finished its handshake by then is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Reads a PEM chain and key into a signing certificate.
fn load(cert_file: &PathBuf, key_file: &PathBuf) -> anyhow::Result<Arc<CertifiedKey>> {
    let chain_pem =
        std::fs::read(cert_file).with_context(|| format!("reading {}", cert_file.display()))?;
    let key_pem =
        std::fs::read(key_file).with_context(|| format!("reading {}", key_file.display()))?;
    let chain: Vec<CertificateDer<'static>> = pem::parse_many(&chain_pem)
        .with_context(|| format!("{}: not PEM", cert_file.display()))?
        .into_iter()
        .filter(|p| p.tag() == "CERTIFICATE")
        .map(|p| CertificateDer::from(p.into_contents()))
        .collect();
    anyhow::ensure!(
        !chain.is_empty(),
        "{}: no CERTIFICATE block",
        cert_file.display()
    );
    let key = pem::parse_many(&key_pem)
        .with_context(|| format!("{}: not PEM", key_file.display()))?
        .into_iter()
        .find_map(|p| match p.tag() {
            "PRIVATE KEY" => Some(PrivateKeyDer::Pkcs8(p.into_contents().into())),
            "RSA PRIVATE KEY" => Some(PrivateKeyDer::Pkcs1(p.into_contents().into())),
            "EC PRIVATE KEY" => Some(PrivateKeyDer::Sec1(p.into_contents().into())),
            _ => None,
        })
        .with_context(|| format!("{}: no private key block", key_file.display()))?;
    let certified = CertifiedKey::from_der(chain, key, &provider())
        .with_context(|| format!("{} and {}", cert_file.display(), key_file.display()))?;
    Ok(Arc::new(certified))
}

/// Whether the webhook's certificate and key load; the error names the file.
pub fn check_certificate(cert_file: &str, key_file: &str) -> anyhow::Result<()> {
    load(&cert_file.into(), &key_file.into()).map(|_| ())
}

fn modified(path: &PathBuf) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Serves the current certificate, re-reading the files when their mtimes change; a
/// rotation that does not load keeps the previous certificate (and says so).
#[derive(Debug)]
struct Reloading {
    cert_file: PathBuf,
    key_file: PathBuf,
    state: Mutex<Loaded>,
}

#[derive(Debug)]
struct Loaded {
    key: Arc<CertifiedKey>,
    stamps: (Option<SystemTime>, Option<SystemTime>),
    checked: Instant,
}

impl ResolvesServerCert for Reloading {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.checked.elapsed() >= RECHECK {
            state.checked = Instant::now();
            let stamps = (modified(&self.cert_file), modified(&self.key_file));
            if stamps != state.stamps {
                match load(&self.cert_file, &self.key_file) {
                    Ok(key) => {
                        tracing::info!("admission webhook certificate reloaded");
                        state.key = key;
                        state.stamps = stamps;
                    }
                    Err(e) => {
                        tracing::warn!(error = %format!("{e:#}"), "admission webhook certificate did not reload; keeping the previous one")
                    }
                }
            }
        }
        Some(state.key.clone())
    }
}

/// Accepted TLS connections, handed to axum.
struct TlsListener {
    accepted: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.accepted.recv().await {
            Some(conn) => conn,
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.local)
    }
}

/// Serves `router` over HTTPS on `listener` until the task is dropped. Fails at once
/// when the certificate or key cannot be read.
pub async fn serve(
    listener: TcpListener,
    cert_file: PathBuf,
    key_file: PathBuf,
    router: Router,
) -> anyhow::Result<()> {
    let key = load(&cert_file, &key_file)?;
    let stamps = (modified(&cert_file), modified(&key_file));
    let resolver = Reloading {
        cert_file,
        key_file,
        state: Mutex::new(Loaded {
            key,
            stamps,
            checked: Instant::now(),
        }),
    };
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .context("TLS versions")?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(resolver));
    let mut config = config;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let local = listener.local_addr()?;
    let (tx, accepted) = mpsc::channel(64);
    let accepting = tokio::spawn(async move {
        loop {
            let Ok((tcp, peer)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            // Handshake flights and small answers must not wait for delayed ACKs.
            let _ = tcp.set_nodelay(true);
            let acceptor = acceptor.clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(tls)) => {
                        let _ = tx.send((tls, peer)).await;
                    }
                    Ok(Err(e)) => {
                        tracing::debug!(%peer, error = %e, "admission webhook TLS handshake failed")
                    }
                    Err(_) => tracing::debug!(%peer, "admission webhook TLS handshake timed out"),
                }
            });
        }
    });
    tracing::info!(address = %local, "serving the admission webhook");
    let result = axum::serve(TlsListener { accepted, local }, router).await;
    accepting.abort();
    result.context("admission webhook")
}
