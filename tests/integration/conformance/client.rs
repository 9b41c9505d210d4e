//! The conformance suite's client side: a request as a test describes it, sent over
//! HTTP/1.1, h2c, HTTPS or HTTP/2 over TLS with the Host, SNI and client certificate it
//! names; what the answer must be (status, the backend and namespace that answered, what
//! that backend saw, response headers, a redirect's `Location`); and the suite's
//! eventual consistency (three answers in a row as expected, within 30 s).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::Value;
use tokio_rustls::rustls::{self, pki_types};

/// How long a request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long an expectation may take to hold.
pub const CONSISTENCY: Duration = Duration::from_secs(30);
/// How many answers in a row must be as expected.
const IN_A_ROW: u32 = 3;

/// TLS as a test's client speaks it: the server name it sends and checks, the CA it
/// trusts, and the certificate it presents when asked.
#[derive(Clone)]
pub struct Tls {
    pub server_name: String,
    pub roots: Vec<pki_types::CertificateDer<'static>>,
    pub identity: Option<(pki_types::CertificateDer<'static>, String)>,
    /// Whether the server asked for a client certificate (set by a request).
    pub asked: Arc<AtomicBool>,
    /// Whether the server's certificate is checked (against `roots`, for the name).
    pub verify: bool,
    /// Certificates sent after the identity's own (its issuers).
    pub chain: Vec<pki_types::CertificateDer<'static>>,
}

impl Tls {
    pub fn new(server_name: &str, roots: &[pki_types::CertificateDer<'static>]) -> Tls {
        Tls {
            server_name: server_name.to_string(),
            roots: roots.to_vec(),
            identity: None,
            asked: Arc::new(AtomicBool::new(false)),
            verify: true,
            chain: Vec::new(),
        }
    }

    /// Presents `intermediates` after the identity's certificate.
    pub fn with_chain(mut self, intermediates: &[pki_types::CertificateDer<'static>]) -> Tls {
        self.chain = intermediates.to_vec();
        self
    }

    /// Sends `server_name` as SNI and takes any certificate (Contour's e2e client's
    /// `InsecureSkipVerify`).
    pub fn insecure(server_name: &str) -> Tls {
        Tls {
            verify: false,
            ..Tls::new(server_name, &[])
        }
    }

    pub fn with_identity(
        mut self,
        cert: &pki_types::CertificateDer<'static>,
        key_pem: &str,
    ) -> Tls {
        self.identity = Some((cert.clone(), key_pem.to_string()));
        self
    }

    fn config(&self, alpn: &[&[u8]]) -> Result<rustls::ClientConfig, String> {
        let mut store = rustls::RootCertStore::empty();
        for root in &self.roots {
            store.add(root.clone()).map_err(|e| e.to_string())?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let versions = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?;
        let builder = if self.verify {
            versions.with_root_certificates(store)
        } else {
            versions
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        };
        let mut config = match &self.identity {
            None => builder.with_client_cert_resolver(Arc::new(Recording {
                asked: self.asked.clone(),
                key: None,
            })),
            Some((cert, key)) => {
                use pki_types::pem::PemObject;
                let key = pki_types::PrivateKeyDer::from_pem_slice(key.as_bytes())
                    .map_err(|e| e.to_string())?;
                let signing = rustls::crypto::ring::sign::any_supported_type(&key)
                    .map_err(|e| e.to_string())?;
                builder.with_client_cert_resolver(Arc::new(Recording {
                    asked: self.asked.clone(),
                    key: Some(Arc::new(rustls::sign::CertifiedKey::new(
                        std::iter::once(cert.clone())
                            .chain(self.chain.iter().cloned())
                            .collect(),
                        signing,
                    ))),
                }))
            }
        };
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(config)
    }

    /// A TLS connection to `addr` (ALPN `alpn`).
    pub async fn connect(
        &self,
        addr: SocketAddr,
        alpn: &[&[u8]],
    ) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, String> {
        let connector = tokio_rustls::TlsConnector::from(Arc::new(self.config(alpn)?));
        let tcp = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect {addr}: {e}"))?;
        let name =
            pki_types::ServerName::try_from(self.server_name.clone()).map_err(|e| e.to_string())?;
        tokio::time::timeout(REQUEST_TIMEOUT, connector.connect(name, tcp))
            .await
            .map_err(|_| "handshake timed out".to_string())?
            .map_err(|e| format!("handshake: {e}"))
    }
}

/// Takes any server certificate (signatures are still checked).
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &pki_types::CertificateDer<'_>,
        _intermediates: &[pki_types::CertificateDer<'_>],
        _server_name: &pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Presents its certificate (if any) when the server asks, and remembers that it did.
#[derive(Debug)]
struct Recording {
    asked: Arc<AtomicBool>,
    key: Option<Arc<rustls::sign::CertifiedKey>>,
}

impl rustls::client::ResolvesClientCert for Recording {
    fn resolve(
        &self,
        _hints: &[&[u8]],
        _schemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        self.asked.store(true, Ordering::SeqCst);
        self.key.clone()
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// How a request goes.
#[derive(Clone)]
pub enum Protocol {
    /// HTTP/1.1 in clear text (a new connection per request).
    Http,
    /// HTTP/2 in clear text, with prior knowledge.
    H2c,
    /// HTTP/1.1 over TLS.
    Https(Tls),
    /// HTTP/2 over TLS (ALPN `h2`).
    H2(Tls),
}

/// One request: `Host` (the address when `None`), method, path with its query, headers.
#[derive(Clone, Debug, Default)]
pub struct Request {
    pub host: Option<String>,
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
}

/// What a backend must have seen.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    pub host: Option<String>,
    pub path: Option<String>,
    pub method: Option<String>,
    pub headers: Vec<(String, String)>,
    pub absent: Vec<String>,
    /// The SNI Envoy sent a TLS backend.
    pub sni: Option<String>,
    /// A certificate (PEM) Envoy presented to a TLS backend.
    pub client_cert: Option<String>,
}

/// A redirect's `Location`: each part `None` is the request's (the host: any).
#[derive(Clone, Debug, Default)]
pub struct Location {
    pub scheme: Option<String>,
    pub host: Option<String>,
    /// `None`: absent or the scheme's well-known port.
    pub port: Option<String>,
    pub path: Option<String>,
}

/// A request and what its answer must be.
#[derive(Clone, Debug)]
pub struct Expect {
    pub request: Request,
    pub statuses: Vec<u16>,
    /// What the backend saw; `None`: the request as sent.
    pub seen: Option<Seen>,
    pub redirect: Option<Location>,
    pub headers: Vec<(String, String)>,
    /// Response headers with any of these values, spaces aside.
    pub header_choices: Vec<(String, Vec<String>)>,
    pub absent_headers: Vec<String>,
    /// The answering pod's name starts with this ("" any).
    pub backend: String,
    /// The answering pod's namespace.
    pub namespace: String,
    /// Response headers the backend is asked to set (`X-Echo-Set-Header`).
    pub backend_sets: Vec<(String, String)>,
}

/// `GET path`, answered 200 by a backend of namespace `gateway-conformance-infra`.
pub fn get(path: &str) -> Expect {
    Expect {
        request: Request {
            host: None,
            method: "GET".to_string(),
            path: path.to_string(),
            headers: Vec::new(),
        },
        statuses: vec![200],
        seen: None,
        redirect: None,
        headers: Vec::new(),
        header_choices: Vec::new(),
        absent_headers: Vec::new(),
        backend: String::new(),
        namespace: crate::conformance::suite::INFRA.to_string(),
        backend_sets: Vec::new(),
    }
}

impl Expect {
    pub fn host(mut self, host: &str) -> Expect {
        self.request.host = Some(host.to_string());
        self
    }

    pub fn method(mut self, method: &str) -> Expect {
        self.request.method = method.to_string();
        self
    }

    pub fn header(mut self, name: &str, value: &str) -> Expect {
        self.request
            .headers
            .push((name.to_string(), value.to_string()));
        self
    }

    pub fn backend(mut self, backend: &str) -> Expect {
        self.backend = backend.to_string();
        self
    }

    pub fn namespace(mut self, namespace: &str) -> Expect {
        self.namespace = namespace.to_string();
        self
    }

    pub fn status(mut self, status: u16) -> Expect {
        self.statuses = vec![status];
        self
    }

    fn seen_mut(&mut self) -> &mut Seen {
        let request = self.request.clone();
        self.seen.get_or_insert_with(|| Seen {
            host: request.host,
            path: Some(request.path),
            method: Some(request.method),
            headers: request.headers,
            ..Seen::default()
        })
    }

    /// The backend sees `path` (the request's otherwise).
    pub fn sees_path(mut self, path: &str) -> Expect {
        self.seen_mut().path = Some(path.to_string());
        self
    }

    /// The backend sees `Host: host`.
    pub fn sees_host(mut self, host: &str) -> Expect {
        self.seen_mut().host = Some(host.to_string());
        self
    }

    /// The backend sees exactly these headers among others (instead of the request's).
    pub fn sees_headers(mut self, headers: &[(&str, &str)]) -> Expect {
        self.seen_mut().headers = headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        self
    }

    /// The backend does not see these headers.
    pub fn sees_no(mut self, headers: &[&str]) -> Expect {
        self.seen_mut().absent = headers.iter().map(|h| h.to_string()).collect();
        self
    }

    /// A TLS backend saw SNI `sni`.
    pub fn sees_sni(mut self, sni: &str) -> Expect {
        self.seen_mut().sni = Some(sni.to_string());
        self
    }

    /// A TLS backend was presented the certificate `pem`.
    pub fn sees_client_cert(mut self, pem: &str) -> Expect {
        self.seen_mut().client_cert = Some(pem.to_string());
        self
    }

    /// A redirect (the status says which) to `location`.
    pub fn redirect(mut self, status: u16, location: Location) -> Expect {
        self.statuses = vec![status];
        self.redirect = Some(location);
        self
    }

    pub fn response_header(mut self, name: &str, value: &str) -> Expect {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    /// A response header with one of `values` (spaces aside).
    pub fn response_header_in(mut self, name: &str, values: &[&str]) -> Expect {
        self.header_choices.push((
            name.to_string(),
            values.iter().map(|v| v.to_string()).collect(),
        ));
        self
    }

    /// A CORS preflight: answered by Envoy itself (no backend saw it).
    pub fn preflight(mut self) -> Expect {
        self.request.method = "OPTIONS".to_string();
        self.namespace = String::new();
        self.seen = Some(Seen {
            path: Some(String::new()),
            method: Some("OPTIONS".to_string()),
            ..Seen::default()
        });
        self
    }

    pub fn no_response_headers(mut self, names: &[&str]) -> Expect {
        self.absent_headers = names.iter().map(|h| h.to_string()).collect();
        self
    }

    /// Asks the backend to set these response headers.
    pub fn backend_sets(mut self, headers: &[(&str, &str)]) -> Expect {
        self.backend_sets = headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        self
    }
}

/// An answer as the comparison reads it.
#[derive(Debug, Default)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// The echo's account of the request (a JSON answer only).
    pub echo: Option<Value>,
    pub body: String,
}

impl Answer {
    /// A response header's values, joined with `,`.
    pub fn header(&self, name: &str) -> Option<String> {
        let values: Vec<&str> = self
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect();
        (!values.is_empty()).then(|| values.join(","))
    }
}

/// Sends `request` to `addr` over `protocol`.
pub async fn send(
    addr: SocketAddr,
    protocol: &Protocol,
    request: &Request,
    extra: &[(String, String)],
) -> Result<Answer, String> {
    tokio::time::timeout(REQUEST_TIMEOUT, send_once(addr, protocol, request, extra))
        .await
        .map_err(|_| "request timed out".to_string())?
}

/// The `Host` of `addr` as a URL spells it: without the scheme's well-known port.
pub fn url_host(addr: SocketAddr, https: bool) -> String {
    let well_known = if https { 443 } else { 80 };
    match (addr, addr.port() == well_known) {
        (SocketAddr::V4(a), true) => a.ip().to_string(),
        (SocketAddr::V6(a), true) => format!("[{}]", a.ip()),
        (a, false) => a.to_string(),
    }
}

async fn send_once(
    addr: SocketAddr,
    protocol: &Protocol,
    request: &Request,
    extra: &[(String, String)],
) -> Result<Answer, String> {
    let https = matches!(protocol, Protocol::Https(_) | Protocol::H2(_));
    let host = request
        .host
        .clone()
        .unwrap_or_else(|| url_host(addr, https));
    let h2 = matches!(protocol, Protocol::H2c | Protocol::H2(_));
    let uri = if h2 {
        let scheme = if https { "https" } else { "http" };
        format!("{scheme}://{host}{}", request.path)
    } else {
        request.path.clone()
    };
    let mut builder = hyper::Request::builder()
        .method(request.method.as_str())
        .uri(uri.as_str());
    if !h2 {
        builder = builder.header("host", &host).header("connection", "close");
    }
    for (name, value) in request.headers.iter().chain(extra) {
        builder = builder.header(name.as_str(), value.as_str());
    }
    let outgoing = builder
        .body(Empty::<Bytes>::new())
        .map_err(|e| format!("request {uri}: {e}"))?;
    let response = match protocol {
        Protocol::Http => {
            let tcp = tokio::net::TcpStream::connect(addr)
                .await
                .map_err(|e| format!("connect {addr}: {e}"))?;
            http1(TokioIo::new(tcp), outgoing).await?
        }
        Protocol::H2c => {
            let tcp = tokio::net::TcpStream::connect(addr)
                .await
                .map_err(|e| format!("connect {addr}: {e}"))?;
            http2(TokioIo::new(tcp), outgoing).await?
        }
        Protocol::Https(tls) => {
            let stream = tls.connect(addr, &[b"http/1.1"]).await?;
            http1(TokioIo::new(stream), outgoing).await?
        }
        Protocol::H2(tls) => {
            let stream = tls.connect(addr, &[b"h2"]).await?;
            http2(TokioIo::new(stream), outgoing).await?
        }
    };
    let (parts, body) = response.into_parts();
    let body = body
        .collect()
        .await
        .map_err(|e| format!("body: {e}"))?
        .to_bytes();
    let headers: Vec<(String, String)> = parts
        .headers
        .iter()
        .map(|(n, v)| {
            (
                n.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let json = parts
        .headers
        .get("content-type")
        .is_some_and(|v| v.as_bytes() == b"application/json");
    Ok(Answer {
        status: parts.status.as_u16(),
        headers,
        echo: json.then(|| serde_json::from_slice(&body).unwrap_or_default()),
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

async fn http1<I>(
    io: I,
    request: hyper::Request<Empty<Bytes>>,
) -> Result<hyper::Response<hyper::body::Incoming>, String>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| format!("http/1.1: {e}"))?;
    tokio::spawn(conn);
    sender
        .send_request(request)
        .await
        .map_err(|e| format!("http/1.1 request: {e}"))
}

async fn http2<I>(
    io: I,
    request: hyper::Request<Empty<Bytes>>,
) -> Result<hyper::Response<hyper::body::Incoming>, String>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
        .await
        .map_err(|e| format!("http/2: {e}"))?;
    tokio::spawn(conn);
    sender
        .send_request(request)
        .await
        .map_err(|e| format!("http/2 request: {e}"))
}

/// Whether `answer` to `expect`'s request (sent to `addr`) is what the test expects; why
/// not otherwise.
pub fn compare(
    expect: &Expect,
    addr: SocketAddr,
    https: bool,
    answer: &Answer,
) -> Result<(), String> {
    let timeouts = [408, 504];
    if timeouts.contains(&answer.status) && expect.statuses.iter().any(|s| timeouts.contains(s)) {
        return Ok(());
    }
    if !expect.statuses.contains(&answer.status) {
        return Err(format!(
            "status {} (expected {:?}); body {:?}",
            answer.status,
            expect.statuses,
            answer.body.chars().take(300).collect::<String>()
        ));
    }
    match answer.status {
        200 | 204 => compare_echo(expect, answer),
        300..=308 => match &expect.redirect {
            Some(location) => compare_location(location, addr, https, expect, answer),
            None => Ok(()),
        },
        _ => Ok(()),
    }
}

fn compare_echo(expect: &Expect, answer: &Answer) -> Result<(), String> {
    let echo = answer.echo.clone().unwrap_or_default();
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let seen = expect.seen.clone().unwrap_or_else(|| Seen {
        host: expect.request.host.clone(),
        path: Some(expect.request.path.clone()),
        method: Some(expect.request.method.clone()),
        headers: expect.request.headers.clone(),
        ..Seen::default()
    });
    if let Some(host) = &seen.host
        && text(&echo["host"]) != *host
    {
        return Err(format!("backend saw Host {:?}, not {host:?}", echo["host"]));
    }
    let path = seen.path.clone().unwrap_or_default();
    if text(&echo["path"]) != path {
        return Err(format!("backend saw path {:?}, not {path:?}", echo["path"]));
    }
    let method = seen.method.clone().unwrap_or_else(|| "GET".to_string());
    // Without an echo the method is the request's (what the suite's client records).
    let echoed_method = match &answer.echo {
        Some(_) => text(&echo["method"]),
        None => expect.request.method.clone(),
    };
    if echoed_method != method {
        return Err(format!(
            "backend saw method {:?}, not {method}",
            echo["method"]
        ));
    }
    if text(&echo["namespace"]) != expect.namespace {
        return Err(format!(
            "answered from namespace {:?}, not {:?}",
            echo["namespace"], expect.namespace
        ));
    }
    let echoed = |name: &str| -> Option<String> {
        echo["headers"].as_object().and_then(|headers| {
            headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| {
                    v.as_array()
                        .into_iter()
                        .flatten()
                        .map(text)
                        .collect::<Vec<_>>()
                        .join(",")
                })
        })
    };
    for (name, value) in &seen.headers {
        match echoed(name) {
            Some(v) if v == *value => {}
            other => {
                return Err(format!(
                    "backend saw {name}: {other:?}, not {value:?}; it saw {}",
                    echo["headers"]
                ));
            }
        }
    }
    for (name, value) in &expect.headers {
        match answer.header(name) {
            Some(v) if v == *value => {}
            other => return Err(format!("response {name}: {other:?}, not {value:?}")),
        }
    }
    if let Some(name) = expect
        .absent_headers
        .iter()
        .find(|h| answer.header(h).is_some())
    {
        return Err(format!("response has {name}: {:?}", answer.header(name)));
    }
    if let Some(name) = seen.absent.iter().find(|h| echoed(h).is_some()) {
        return Err(format!("backend saw {name}: {:?}", echoed(name)));
    }
    if !text(&echo["pod"]).starts_with(&expect.backend) {
        return Err(format!(
            "answered by {:?}, not {}",
            echo["pod"], expect.backend
        ));
    }
    if let Some(sni) = &seen.sni
        && text(&echo["tls"]["serverName"]) != *sni
    {
        return Err(format!("backend saw SNI {:?}, not {sni:?}", echo["tls"]));
    }
    if let Some(pem) = &seen.client_cert {
        let presented = echo["tls"]["peerCertificates"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if !presented.iter().any(|c| text(c) == *pem) {
            return Err(format!(
                "backend was not presented the client certificate: {}",
                echo["tls"]
            ));
        }
    }
    Ok(())
}

fn compare_location(
    want: &Location,
    addr: SocketAddr,
    https: bool,
    expect: &Expect,
    answer: &Answer,
) -> Result<(), String> {
    let location = answer
        .header("location")
        .ok_or_else(|| format!("a {} without a Location", answer.status))?;
    let request_scheme = if https { "https" } else { "http" };
    let base = format!(
        "{request_scheme}://{}",
        expect
            .request
            .host
            .clone()
            .unwrap_or_else(|| url_host(addr, https))
    );
    let absolute = if location.starts_with('/') {
        format!("{base}{location}")
    } else {
        location.clone()
    };
    let (scheme, rest) = absolute
        .split_once("://")
        .ok_or_else(|| format!("Location {location:?} is not a URL"))?;
    let scheme = scheme.to_ascii_lowercase();
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let path = path.split('?').next().unwrap_or_default();
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || authority.starts_with('[') => (h, p),
        _ => (authority, ""),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if let Some(h) = &want.host
        && host != h
    {
        return Err(format!("Location {location:?}: host is not {h}"));
    }
    let want_scheme = want.scheme.as_deref().unwrap_or(request_scheme);
    if scheme != want_scheme {
        return Err(format!(
            "Location {location:?}: scheme is not {want_scheme}"
        ));
    }
    match &want.port {
        Some(p) if port != p => {
            return Err(format!("Location {location:?}: port is not {p}"));
        }
        None if !(port.is_empty()
            || (scheme == "http" && port == "80")
            || (scheme == "https" && port == "443")) =>
        {
            return Err(format!(
                "Location {location:?}: port is neither absent nor the scheme's"
            ));
        }
        _ => {}
    }
    let request_path = expect.request.path.split('?').next().unwrap_or_default();
    let want_path = want.path.as_deref().unwrap_or(request_path);
    if path != want_path {
        return Err(format!("Location {location:?}: path is not {want_path}"));
    }
    Ok(())
}

/// Sends `expect`'s request until it is answered as expected three times in a row, for
/// at most 30 s; the last failure otherwise.
pub async fn eventually(
    addr: SocketAddr,
    protocol: &Protocol,
    expect: &Expect,
) -> Result<(), String> {
    converge(addr, protocol, expect, IN_A_ROW).await
}

/// [`eventually`] needing one answer as expected (the suite's percentage checks).
pub async fn eventually_once(addr: SocketAddr, expect: &Expect) -> Result<(), String> {
    converge(addr, &Protocol::Http, expect, 1).await
}

/// How many of `n` requests (ten at a time, half of them with an `X-Jitter` header)
/// each backend answered, by backend (the pod's name without its last two parts). Each
/// must be answered as `expect` says.
pub async fn distribution(
    addr: SocketAddr,
    expect: &Expect,
    n: usize,
) -> Result<std::collections::BTreeMap<String, usize>, String> {
    let mut counts = std::collections::BTreeMap::new();
    for batch in 0..n.div_ceil(10) {
        let requests = (0..10.min(n - batch * 10)).map(|i| {
            let mut request = expect.request.clone();
            if (batch + i) % 2 == 0 {
                request.headers = vec![("X-Jitter".to_string(), format!("{}", batch * 10 + i))];
            }
            async move {
                let answer = send(addr, &Protocol::Http, &request, &[]).await?;
                let mut expect = expect.clone();
                expect.request = request;
                expect.seen = None;
                compare(&expect, addr, false, &answer)?;
                let pod = answer
                    .echo
                    .as_ref()
                    .and_then(|e| e["pod"].as_str())
                    .unwrap_or_default()
                    .to_string();
                let parts: Vec<&str> = pod.split('-').collect();
                Ok::<String, String>(parts[..parts.len().saturating_sub(2)].join("-"))
            }
        });
        for backend in futures::future::join_all(requests).await {
            *counts.entry(backend?).or_insert(0) += 1;
        }
    }
    Ok(counts)
}

async fn converge(
    addr: SocketAddr,
    protocol: &Protocol,
    expect: &Expect,
    needed: u32,
) -> Result<(), String> {
    let https = matches!(protocol, Protocol::Https(_) | Protocol::H2(_));
    let set: Vec<(String, String)> = vec![(
        "X-Echo-Set-Header".to_string(),
        expect
            .backend_sets
            .iter()
            .map(|(n, v)| format!("{n}:{v}"))
            .collect::<Vec<_>>()
            .join(","),
    )];
    let start = Instant::now();
    let mut in_a_row = 0;
    loop {
        let outcome = send(addr, protocol, &expect.request, &set)
            .await
            .and_then(|answer| compare(expect, addr, https, &answer));
        match outcome {
            Ok(()) => {
                in_a_row += 1;
                if in_a_row >= needed {
                    return Ok(());
                }
            }
            Err(e) => {
                in_a_row = 0;
                if start.elapsed() > CONSISTENCY {
                    return Err(format!(
                        "{} {}{} (Host {:?}) to {addr}: {e}",
                        expect.request.method,
                        url_host(addr, https),
                        expect.request.path,
                        expect.request.host
                    ));
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}
