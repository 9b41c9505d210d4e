//! TLS for Isobar's own servers (xDS, the admission webhook): rustls with a certificate
//! and, for xDS, a client CA re-read from their files when they change (certgen and
//! cert-manager rotate them in place). A rotation that does not load keeps what was
//! served before, and says so.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use tokio_rustls::rustls;
use tokio_rustls::rustls::client::danger::HandshakeSignatureValid;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use tokio_rustls::rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};

/// How often the files' modification times are looked at, at most.
const RECHECK: Duration = Duration::from_secs(2);

pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificates of a PEM file.
fn certificates(file: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let pem = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let chain: Vec<CertificateDer<'static>> = pem::parse_many(&pem)
        .with_context(|| format!("{}: not PEM", file.display()))?
        .into_iter()
        .filter(|p| p.tag() == "CERTIFICATE")
        .map(|p| CertificateDer::from(p.into_contents()))
        .collect();
    anyhow::ensure!(
        !chain.is_empty(),
        "{}: no CERTIFICATE block",
        file.display()
    );
    Ok(chain)
}

/// Reads a PEM chain and key into a signing certificate.
pub fn load(cert_file: &Path, key_file: &Path) -> anyhow::Result<Arc<CertifiedKey>> {
    let chain = certificates(cert_file)?;
    let key_pem =
        std::fs::read(key_file).with_context(|| format!("reading {}", key_file.display()))?;
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

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// A value built from files, rebuilt when one of their modification times changes
/// (looked at every [`RECHECK`] at most).
#[derive(Debug)]
struct Watched<T> {
    files: Vec<PathBuf>,
    what: &'static str,
    state: Mutex<(Arc<T>, Vec<Option<SystemTime>>, Instant)>,
}

impl<T> Watched<T> {
    fn new(files: Vec<PathBuf>, what: &'static str, first: T) -> Watched<T> {
        let stamps = files.iter().map(|f| modified(f)).collect();
        Watched {
            files,
            what,
            state: Mutex::new((Arc::new(first), stamps, Instant::now())),
        }
    }

    fn current(&self, load: impl FnOnce(&[PathBuf]) -> anyhow::Result<T>) -> Arc<T> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.2.elapsed() >= RECHECK {
            state.2 = Instant::now();
            let stamps: Vec<Option<SystemTime>> = self.files.iter().map(|f| modified(f)).collect();
            if stamps != state.1 {
                match load(&self.files) {
                    Ok(value) => {
                        tracing::info!(what = self.what, "reloaded from its files");
                        state.0 = Arc::new(value);
                        state.1 = stamps;
                    }
                    Err(e) => tracing::warn!(
                        what = self.what,
                        error = %format!("{e:#}"),
                        "did not reload; keeping the previous one"
                    ),
                }
            }
        }
        state.0.clone()
    }
}

/// Serves the certificate of a chain and key file, re-read when they change.
#[derive(Debug)]
pub struct ReloadingCertificate(Watched<Arc<CertifiedKey>>);

impl ReloadingCertificate {
    pub fn new(
        cert_file: PathBuf,
        key_file: PathBuf,
        what: &'static str,
    ) -> anyhow::Result<ReloadingCertificate> {
        let first = load(&cert_file, &key_file)?;
        Ok(ReloadingCertificate(Watched::new(
            vec![cert_file, key_file],
            what,
            first,
        )))
    }
}

impl ResolvesServerCert for ReloadingCertificate {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let key = self.0.current(|files| load(&files[0], &files[1]));
        Some(Arc::clone(&key))
    }
}

/// Requires a client certificate signed by the CA of a file, re-read when it changes.
#[derive(Debug)]
pub struct ReloadingClientCa(Watched<Arc<dyn ClientCertVerifier>>);

fn client_verifier(ca_file: &Path) -> anyhow::Result<Arc<dyn ClientCertVerifier>> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in certificates(ca_file)? {
        roots
            .add(cert)
            .with_context(|| format!("{}: not a CA certificate", ca_file.display()))?;
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
        .build()
        .with_context(|| format!("{}: client verifier", ca_file.display()))
}

impl ReloadingClientCa {
    pub fn new(ca_file: PathBuf, what: &'static str) -> anyhow::Result<ReloadingClientCa> {
        let first = client_verifier(&ca_file)?;
        Ok(ReloadingClientCa(Watched::new(vec![ca_file], what, first)))
    }

    fn inner(&self) -> Arc<Arc<dyn ClientCertVerifier>> {
        self.0.current(|files| client_verifier(&files[0]))
    }
}

impl ClientCertVerifier for ReloadingClientCa {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        // Hints are optional; the roots may change under a borrowed slice.
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.inner()
            .verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner().supported_verify_schemes()
    }
}

/// The server side of xDS over mutual TLS: `cert_file`/`key_file` served, clients
/// required to present a certificate `ca_file` signed; all three re-read on change.
pub fn mutual(
    ca_file: &str,
    cert_file: &str,
    key_file: &str,
) -> anyhow::Result<rustls::ServerConfig> {
    let resolver = ReloadingCertificate::new(cert_file.into(), key_file.into(), "xds certificate")?;
    let verifier = ReloadingClientCa::new(ca_file.into(), "xds client CA")?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .context("TLS versions")?
        .with_client_cert_verifier(Arc::new(verifier))
        .with_cert_resolver(Arc::new(resolver));
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}
