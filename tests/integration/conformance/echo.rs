//! The conformance suite's backends, as servers of our own: an HTTP echo server (plain
//! HTTP/1.1 and HTTP/2, h2c, TLS) answering with a JSON account of the request it saw,
//! and a TCP line server. Each "pod" listens on a loopback address of its own at the
//! suite's container ports, so a Service's EndpointSlice lists pods as a cluster's does.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio_rustls::rustls;

/// Who a pod is: the echo servers report it.
#[derive(Debug, Clone)]
pub struct PodInfo {
    pub namespace: String,
    pub pod: String,
}

/// What every pod of the suite has seen, for the tests that look at backends' logs
/// (mirrors): by pod name, the request URIs echoed.
#[derive(Debug, Default, Clone)]
pub struct Logs(Arc<Mutex<BTreeMap<String, Vec<String>>>>);

impl Logs {
    fn record(&self, pod: &str, uri: &str) {
        let mut logs = self.0.lock().unwrap_or_else(|e| e.into_inner());
        logs.entry(pod.to_string())
            .or_default()
            .push(uri.to_string());
    }

    /// The request URIs pods whose name starts with `prefix` echoed.
    pub fn of(&self, prefix: &str) -> Vec<String> {
        let logs = self.0.lock().unwrap_or_else(|e| e.into_inner());
        logs.iter()
            .filter(|(pod, _)| pod.starts_with(prefix))
            .flat_map(|(_, uris)| uris.iter().cloned())
            .collect()
    }
}

/// An HTTP echo pod: plain HTTP on `ip:3000`, h2c on `ip:3001` and, with a certificate,
/// HTTPS on `ip:8443`.
pub async fn http_pod(
    ip: IpAddr,
    info: PodInfo,
    tls: Option<Arc<rustls::ServerConfig>>,
    logs: Logs,
) {
    let retries = Arc::new(Mutex::new(BTreeMap::new()));
    let pod = Pod {
        info: Arc::new(info),
        logs,
        retries,
    };
    serve_http(SocketAddr::new(ip, 3000), pod.clone(), Port::Plain).await;
    serve_http(SocketAddr::new(ip, 3001), pod.clone(), Port::H2c).await;
    if let Some(tls) = tls {
        serve_http(SocketAddr::new(ip, 8443), pod, Port::Tls(tls)).await;
    }
}

#[derive(Clone)]
struct Pod {
    info: Arc<PodInfo>,
    logs: Logs,
    /// The retry simulator's attempts, by uuid.
    retries: Arc<Mutex<BTreeMap<String, u32>>>,
}

#[derive(Clone)]
enum Port {
    Plain,
    H2c,
    Tls(Arc<rustls::ServerConfig>),
}

/// What a TLS connection was, for the echo's `tls` field.
#[derive(Clone, Default)]
struct TlsSeen {
    version: String,
    server_name: String,
    alpn: String,
    peer_certificates: Vec<String>,
}

async fn bind(addr: SocketAddr) -> tokio::net::TcpListener {
    tokio::net::TcpListener::bind(addr)
        .await
        .unwrap_or_else(|e| panic!("bind {addr}: {e}"))
}

async fn serve_http(addr: SocketAddr, pod: Pod, port: Port) {
    let listener = bind(addr).await;
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let pod = pod.clone();
            let port = port.clone();
            tokio::spawn(async move {
                match port {
                    Port::Tls(config) => {
                        let acceptor = tokio_rustls::TlsAcceptor::from(config);
                        let Ok(stream) = acceptor.accept(tcp).await else {
                            return;
                        };
                        let (_, conn) = stream.get_ref();
                        let seen = TlsSeen {
                            version: match conn.protocol_version() {
                                Some(rustls::ProtocolVersion::TLSv1_3) => "TLSv1.3",
                                Some(rustls::ProtocolVersion::TLSv1_2) => "TLSv1.2",
                                _ => "",
                            }
                            .to_string(),
                            server_name: conn.server_name().unwrap_or_default().to_string(),
                            alpn: conn
                                .alpn_protocol()
                                .map(|a| String::from_utf8_lossy(a).into_owned())
                                .unwrap_or_default(),
                            peer_certificates: conn
                                .peer_certificates()
                                .into_iter()
                                .flatten()
                                .map(|c| pem_of(c.as_ref()))
                                .collect(),
                        };
                        connection(TokioIo::new(stream), pod, Some(seen), false).await;
                    }
                    Port::H2c => connection(TokioIo::new(tcp), pod, None, true).await,
                    Port::Plain => connection(TokioIo::new(tcp), pod, None, false).await,
                }
            });
        }
    });
}

/// A DER certificate as PEM (64-column lines).
pub fn pem_of(der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

async fn connection<I>(io: I, pod: Pod, tls: Option<TlsSeen>, h2c_only: bool)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let pod = pod.clone();
        let tls = tls.clone();
        async move { answer(request, &pod, tls, h2c_only).await }
    });
    let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    let _ = builder.serve_connection_with_upgrades(io, service).await;
}

fn response(status: u16, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .body(Full::new(body.into()))
        .unwrap_or_default()
}

/// The retry simulator's failure: the connection is dropped without an answer.
#[derive(Debug)]
struct Reset;

impl std::fmt::Display for Reset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection reset by the retry simulator")
    }
}

impl std::error::Error for Reset {}

async fn answer(
    mut request: Request<Incoming>,
    pod: &Pod,
    tls: Option<TlsSeen>,
    h2c_only: bool,
) -> Result<Response<Full<Bytes>>, Reset> {
    let is_h2 = request.version() == hyper::Version::HTTP_2;
    if h2c_only && !is_h2 && !request.headers().contains_key("upgrade") {
        return Ok(response(400, "Expected h2c request"));
    }
    let uri = request
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".to_string());
    let path = request.uri().path().replace("//", "/");
    let query: BTreeMap<String, String> =
        form_urlencoded::parse(request.uri().query().unwrap_or_default().as_bytes())
            .into_owned()
            .collect();
    if path == "/health" {
        return Ok(response(200, "OK"));
    }
    if let Some(code) = path.strip_prefix("/status/") {
        return match code.parse::<u16>() {
            Ok(code) if (100..=599).contains(&code) && request.uri().query().is_none() => {
                Ok(response(code, ""))
            }
            _ => Ok(response(400, "")),
        };
    }
    if path == "/ws" {
        return Ok(crate::conformance::ws::upgrade(&mut request));
    }
    if path.starts_with("/retry/")
        && let Some(failure) = retry(pod, &query).await?
    {
        return Ok(failure);
    }
    if let Some(delay) = query.get("delay") {
        match humantime::parse_duration(delay) {
            Ok(d) => tokio::time::sleep(d).await,
            Err(e) => {
                return Ok(response(500, json!({"message": e.to_string()}).to_string()));
            }
        }
    }
    pod.logs.record(&pod.info.pod, &uri);
    let mut headers: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, value) in request.headers() {
        if name == "host" {
            continue;
        }
        headers
            .entry(canonical(name.as_str()))
            .or_default()
            .push(value.to_str().unwrap_or_default().to_string());
    }
    let host = request
        .headers()
        .get("host")
        .and_then(|h| h.to_str().ok())
        .map(str::to_string)
        .or_else(|| request.uri().authority().map(|a| a.to_string()))
        .unwrap_or_default();
    let mut body = json!({
        "path": uri,
        "host": host,
        "method": request.method().as_str(),
        "proto": if is_h2 { "HTTP/2.0" } else { "HTTP/1.1" },
        "headers": headers,
        "httpPort": "3000",
        "namespace": pod.info.namespace,
        "ingress": "",
        "service": "",
        "pod": pod.info.pod,
    });
    if let Some(tls) = tls {
        body["tls"] = json!({
            "version": tls.version,
            "serverName": tls.server_name,
            "negotiatedProtocol": tls.alpn,
            "peerCertificates": tls.peer_certificates,
        });
    }
    let mut builder = Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .header("x-content-type-options", "nosniff");
    // `X-Echo-Close`: the connection closes after the answer (the next request through
    // a proxy comes on a new one).
    if request.headers().contains_key("x-echo-close") {
        builder = builder.header("connection", "close");
    }
    // `X-Echo-Set-Header: name:value,…` (the suite's echo) and `X-Echo-Header` (the
    // echo server of Contour's e2e suite) set response headers.
    let headers = request.headers();
    let set: Vec<String> = headers
        .get_all("x-echo-set-header")
        .iter()
        .chain(headers.get_all("x-echo-header").iter())
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::to_string)
        .collect();
    for item in set {
        if let Some((name, value)) = item.trim().split_once(':')
            && !name.is_empty()
        {
            // Set, as the echo servers do: one replaces the echo's own (`Content-Type`).
            if let (Some(headers), Ok(name), Ok(value)) = (
                builder.headers_mut(),
                hyper::header::HeaderName::try_from(name.trim()),
                hyper::header::HeaderValue::try_from(value.trim()),
            ) {
                headers.insert(name, value);
            }
        }
    }
    // The body is read (and dropped): a request with one is answered after it.
    let _ = request.body_mut().collect().await;
    Ok(builder
        .body(Full::new(Bytes::from(
            serde_json::to_string_pretty(&body).unwrap_or_default(),
        )))
        .unwrap_or_default())
}

/// The retry simulator (`/retry/?uuid=…&succeedAfter=N[&responseCode=C][&delayRetry=D]`):
/// the first N attempts of a uuid fail (answered C, or the connection dropped), later
/// ones echo.
async fn retry(
    pod: &Pod,
    query: &BTreeMap<String, String>,
) -> Result<Option<Response<Full<Bytes>>>, Reset> {
    let Some(uuid) = query.get("uuid") else {
        return Ok(Some(response(400, "uuid is required")));
    };
    let Some(after) = query
        .get("succeedAfter")
        .and_then(|n| n.parse::<u32>().ok())
    else {
        return Ok(Some(response(400, "succeedAfter is required")));
    };
    let failing = {
        let mut attempts = pod.retries.lock().unwrap_or_else(|e| e.into_inner());
        let n = attempts.entry(uuid.clone()).or_insert(0);
        let failing = *n < after;
        if failing {
            *n += 1;
        }
        failing
    };
    if !failing {
        return Ok(None);
    }
    if let Some(d) = query
        .get("delayRetry")
        .and_then(|d| humantime::parse_duration(d).ok())
    {
        tokio::time::sleep(d).await;
    }
    match query
        .get("responseCode")
        .and_then(|c| c.parse::<u16>().ok())
    {
        Some(code) => Ok(Some(response(code, ""))),
        None => Err(Reset),
    }
}

/// A header name as Go's `CanonicalMIMEHeaderKey` spells it (`x-foo-bar` → `X-Foo-Bar`).
fn canonical(name: &str) -> String {
    name.split('-')
        .map(|part| {
            let mut chars = part.chars();
            match chars.next() {
                Some(first) => first.to_ascii_uppercase().to_string() + chars.as_str(),
                None => String::new(),
            }
        })
        .collect::<Vec<_>>()
        .join("-")
}

/// A TCP line pod on `ip:3000` (and over TLS on `ip:8443` with a certificate): it
/// greets, then answers `TEST` with a JSON account of itself, `IS_TLS` and `PING`.
pub async fn tcp_pod(ip: IpAddr, info: PodInfo, tls: Option<Arc<rustls::ServerConfig>>) {
    let info = Arc::new(info);
    for (port, tls) in [(3000, None), (8443, tls)] {
        if port == 8443 && tls.is_none() {
            continue;
        }
        let listener = bind(SocketAddr::new(ip, port)).await;
        let info = info.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let info = info.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    match tls {
                        None => lines(tcp, &info, None).await,
                        Some(config) => {
                            let acceptor = tokio_rustls::TlsAcceptor::from(config);
                            if let Ok(stream) = acceptor.accept(tcp).await {
                                let sni = stream.get_ref().1.server_name().map(str::to_string);
                                lines(stream, &info, Some(sni.unwrap_or_default())).await;
                            }
                        }
                    }
                });
            }
        });
    }
}

async fn lines<S>(stream: S, info: &PodInfo, sni: Option<String>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (read, mut write) = tokio::io::split(stream);
    if write
        .write_all(b"Gateway API Test TCP Server\n")
        .await
        .is_err()
    {
        return;
    }
    let mut reader = BufReader::new(read).lines();
    while let Ok(Some(line)) = reader.next_line().await {
        let reply = match line.trim_end_matches('\r') {
            "TEST" => {
                let mut doc = json!({
                    "namespace": info.namespace,
                    "pod": info.pod,
                    "tcpport": "3000",
                    "tlsport": "8443",
                    "isTLS": sni.is_some(),
                });
                if let Some(sni) = &sni {
                    doc["tls"] = json!({"serverName": sni});
                }
                format!("{doc}\n")
            }
            "IS_TLS" => format!("{}\n", sni.is_some()),
            "PING" => "PONG\n".to_string(),
            _ => continue,
        };
        if write.write_all(reply.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// Reads a TCP echo pod's greeting and its answer to `TEST` on `stream`.
pub async fn tcp_test<S>(stream: S) -> Result<Value, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (read, mut write) = tokio::io::split(stream);
    let mut reader = BufReader::new(read);
    let mut greeting = String::new();
    tokio::time::timeout(Duration::from_secs(5), reader.read_line(&mut greeting))
        .await
        .map_err(|_| "no greeting".to_string())?
        .map_err(|e| e.to_string())?;
    if greeting.trim() != "Gateway API Test TCP Server" {
        return Err(format!("greeting {greeting:?}"));
    }
    write
        .write_all(b"TEST\n")
        .await
        .map_err(|e| e.to_string())?;
    let mut line = String::new();
    tokio::time::timeout(Duration::from_secs(5), reader.read_line(&mut line))
        .await
        .map_err(|_| "no answer to TEST".to_string())?
        .map_err(|e| e.to_string())?;
    serde_json::from_str(&line).map_err(|e| format!("{line:?}: {e}"))
}

/// A UDP echo pod on `ip:8080`: each datagram is answered with a JSON account of it
/// (`request`, as received) and of the pod (`namespace`, `service`, `pod`).
pub async fn udp_pod(ip: IpAddr, info: PodInfo, service: &str) {
    let addr = SocketAddr::new(ip, 8080);
    let socket = tokio::net::UdpSocket::bind(addr)
        .await
        .unwrap_or_else(|e| panic!("bind udp {addr}: {e}"));
    let service = service.to_string();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        while let Ok((n, from)) = socket.recv_from(&mut buf).await {
            let reply = json!({
                "request": String::from_utf8_lossy(&buf[..n]),
                "namespace": info.namespace,
                "ingress": "",
                "service": service,
                "pod": info.pod,
            });
            let _ = socket.send_to(reply.to_string().as_bytes(), from).await;
        }
    });
}

/// A DNS pod on `ip:port` (UDP) standing in for the suite's CoreDNS: every query is
/// answered, with its question and no records (`NOERROR`).
pub async fn dns_pod(ip: IpAddr, port: u16) {
    let addr = SocketAddr::new(ip, port);
    let socket = tokio::net::UdpSocket::bind(addr)
        .await
        .unwrap_or_else(|e| panic!("bind udp {addr}: {e}"));
    tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        while let Ok((n, from)) = socket.recv_from(&mut buf).await {
            // A header (12 bytes) at least; the reply is the query with QR and RA set,
            // no answer, authority or additional records.
            if n < 12 {
                continue;
            }
            let mut reply = buf[..n].to_vec();
            reply[2] |= 0x80;
            reply[3] = 0x80;
            reply[6..12].fill(0);
            let _ = socket.send_to(&reply, from).await;
        }
    });
}
