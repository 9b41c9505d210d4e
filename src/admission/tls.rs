//! HTTPS for the webhook: rustls with a certificate re-read from its files when they
//! change (cert-manager rotates them in place; [`crate::tls`]), handshakes off the
//! accept loop.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tokio_rustls::server::TlsStream;

/// A client that has not finished its handshake by then is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether the webhook's certificate and key load; the error names the file.
pub fn check_certificate(cert_file: &str, key_file: &str) -> anyhow::Result<()> {
    crate::tls::load(Path::new(cert_file), Path::new(key_file)).map(|_| ())
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

/// Serves `router` over HTTPS on `listener` until the task is dropped, with the
/// certificate of `files` (chain, key, and the CA whose certificate clients must
/// present, when given). Fails at once when a file cannot be read.
pub async fn serve(
    listener: TcpListener,
    files: (PathBuf, PathBuf, Option<PathBuf>),
    router: Router,
) -> anyhow::Result<()> {
    serve_https(listener, files, router, "admission webhook").await
}

/// Serves `router` over HTTPS on `listener` with the certificate of `files` (chain,
/// key, and a CA whose certificate clients must present, when given), each re-read
/// when it changes. Fails at once when a file cannot be read.
pub async fn serve_https(
    listener: TcpListener,
    files: (PathBuf, PathBuf, Option<PathBuf>),
    router: Router,
    what: &'static str,
) -> anyhow::Result<()> {
    let (cert_file, key_file, ca_file) = files;
    let resolver = crate::tls::ReloadingCertificate::new(cert_file, key_file, what)?;
    let builder = rustls::ServerConfig::builder_with_provider(crate::tls::provider())
        .with_safe_default_protocol_versions()
        .context("TLS versions")?;
    let config = match ca_file {
        Some(ca) => builder
            .with_client_cert_verifier(Arc::new(crate::tls::ReloadingClientCa::new(ca, what)?))
            .with_cert_resolver(Arc::new(resolver)),
        None => builder
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(resolver)),
    };
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
                        tracing::debug!(%peer, error = %e, what, "TLS handshake failed")
                    }
                    Err(_) => tracing::debug!(%peer, what, "TLS handshake timed out"),
                }
            });
        }
    });
    tracing::info!(address = %local, what, "serving over HTTPS");
    let result = axum::serve(TlsListener { accepted, local }, router).await;
    accepting.abort();
    result.context(what)
}
