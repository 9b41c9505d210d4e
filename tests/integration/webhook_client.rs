//! A minimal HTTPS client for the admission webhook (tests and benchmarks): one POST to
//! `/validate` per connection, the server's certificate verified against `ca` for the
//! name the deploy manifests give it.

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};

pub const NAME: &str = "isobar-webhook.projectcontour.svc";

/// POSTs `body`; the status code and the response body.
pub async fn post(
    addr: std::net::SocketAddr,
    ca: &CertificateDer<'static>,
    body: &str,
) -> (u16, String) {
    try_post(addr, ca, None, body)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// POSTs `body`, presenting `identity` (certificate, key PEM) when given; the status code
/// and the response body, or why the exchange failed (TLS refused, connection closed).
pub async fn try_post(
    addr: std::net::SocketAddr,
    ca: &CertificateDer<'static>,
    identity: Option<(CertificateDer<'static>, String)>,
    body: &str,
) -> Result<(u16, String), String> {
    let mut roots = RootCertStore::empty();
    roots.add(ca.clone()).map_err(|e| e.to_string())?;
    let builder =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots);
    let config = match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            use rustls::pki_types::pem::PemObject;
            let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(key.as_bytes())
                .map_err(|e| e.to_string())?;
            builder
                .with_client_auth_cert(vec![cert], key)
                .map_err(|e| e.to_string())?
        }
    };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let name = ServerName::try_from(NAME).map_err(|e| e.to_string())?;
    let mut tls = connector
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS: {e}"))?;
    let request = format!(
        "POST /validate HTTP/1.1\r\nHost: isobar\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    tls.write_all(request.as_bytes())
        .await
        .map_err(|e| format!("write: {e}"))?;
    // The webhook answers within its review timeout (4 s); a connection left open
    // without an answer fails the test instead of stalling it.
    let mut raw = Vec::new();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        tls.read_to_end(&mut raw),
    )
    .await;
    assert!(
        read.is_ok(),
        "no answer (or the connection left open) within 20 s; read so far: {:?}",
        String::from_utf8_lossy(&raw)
    );
    if let Ok(Err(e)) = read
        && raw.is_empty()
    {
        return Err(format!("read: {e}"));
    }
    let text = String::from_utf8_lossy(&raw).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Ok((status, body.to_string()))
}

/// A self-signed certificate for [`NAME`], written as `tls.crt` / `tls.key` in `dir`.
pub fn certificate(dir: &std::path::Path) -> CertificateDer<'static> {
    let params = rcgen::CertificateParams::new(vec![NAME.into()]).unwrap_or_else(|e| panic!("{e}"));
    let key = rcgen::KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
    let cert = params.self_signed(&key).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(dir.join("tls.crt"), cert.pem()).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(dir.join("tls.key"), key.serialize_pem()).unwrap_or_else(|e| panic!("{e}"));
    cert.der().clone()
}

/// A controller on the manifest directory `objects` with its webhook on a loopback port
/// (certificate from [`certificate`] in `dir`), ready once the first snapshot is built.
pub struct Running {
    /// Kept running while the webhook serves (benches read its metrics).
    #[allow(dead_code)]
    pub controller: isobar::cli::serve::Controller,
    pub addr: std::net::SocketAddr,
    pub ca: CertificateDer<'static>,
    server: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.server.abort();
    }
}

pub async fn start(
    config: &isobar::config::Config,
    objects: std::path::PathBuf,
    dir: &std::path::Path,
) -> Running {
    let ca = certificate(dir);
    let pipeline =
        isobar::runner::pipeline::Pipeline::for_config(config).unwrap_or_else(|e| panic!("{e}"));
    let controller = isobar::cli::serve::Controller::start(
        config,
        pipeline,
        isobar::cli::serve::ProviderChoice::Files {
            dir: Some(objects),
            namespaces: Vec::new(),
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let router = isobar::admission::routes().with_state(isobar::admission::Webhook::new(
        controller.admission.clone(),
    ));
    let client_ca = Some(&config.admission_webhook.client_ca_file)
        .filter(|f| !f.is_empty())
        .map(Into::into);
    let server = tokio::spawn(isobar::admission::serve(
        listener,
        (dir.join("tls.crt"), dir.join("tls.key"), client_ca),
        router,
    ));
    let mut snapshots = controller.snapshots.clone();
    let built = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        snapshots.wait_for(|s| s.is_some()),
    )
    .await;
    assert!(matches!(built, Ok(Ok(_))), "the controller never built");
    Running {
        controller,
        addr,
        ca,
        server,
    }
}
