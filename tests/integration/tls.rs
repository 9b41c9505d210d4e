//! TLS end to end through a real Envoy, with certificates made in the test (rcgen):
//! HTTPS by SNI, the fallback certificate without SNI, the HTTP → HTTPS redirect and `permitInsecure`, 421 for a Host that is
//! not the SNI's vhost, a TLS 1.3-only vhost refusing TLS 1.2, a delegation added live,
//! a certificate rotation that never touches the listener, passthrough to a TLS backend,
//! a TLS-terminating TCP proxy, client certificates, upstream TLS with validation, and a
//! broken secret Envoy never sees.

use std::sync::Arc;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore, SupportedProtocolVersion};

use crate::support::{eventually, service_yaml, write};

/// A certificate and its key, as PEM and DER.
pub(crate) struct Issued {
    cert_pem: String,
    key_pem: String,
    pub(crate) der: CertificateDer<'static>,
}

pub(crate) fn new_ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap_or_else(|e| panic!("{e}"));
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let key = KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
    CertifiedIssuer::self_signed(params, key).unwrap_or_else(|e| panic!("{e}"))
}

pub(crate) fn issue(ca: &CertifiedIssuer<'static, KeyPair>, name: &str) -> Issued {
    let mut params =
        CertificateParams::new(vec![name.to_string()]).unwrap_or_else(|e| panic!("{e}"));
    params.distinguished_name.push(DnType::CommonName, name);
    let key = KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
    let cert = params.signed_by(&key, ca).unwrap_or_else(|e| panic!("{e}"));
    Issued {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        der: cert.der().clone(),
    }
}

impl Issued {
    /// Writes the chain and key as `<name>.crt` and `<name>.key` in `dir`; their paths.
    pub(crate) fn write(&self, dir: &std::path::Path, name: &str) -> (String, String) {
        let (cert, key) = (
            dir.join(format!("{name}.crt")),
            dir.join(format!("{name}.key")),
        );
        std::fs::write(&cert, &self.cert_pem).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(&key, &self.key_pem).unwrap_or_else(|e| panic!("{e}"));
        (cert.display().to_string(), key.display().to_string())
    }
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("    {l}\n"))
        .collect::<String>()
}

pub(crate) fn tls_secret(ns: &str, name: &str, cert: &Issued) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: {ns}}}\ntype: kubernetes.io/tls\nstringData:\n  tls.crt: |\n{}  tls.key: |\n{}",
        indent(&cert.cert_pem),
        indent(&cert.key_pem)
    )
}

fn ca_secret(ns: &str, name: &str, ca: &CertifiedIssuer<'static, KeyPair>) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: {ns}}}\ntype: Opaque\nstringData:\n  ca.crt: |\n{}",
        indent(&ca.pem())
    )
}

fn proxy(ns: &str, name: &str, fqdn: &str, tls: &str, body: &str) -> String {
    format!(
        "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  virtualhost:\n    fqdn: {fqdn}\n    tls: {tls}\n{body}"
    )
}

const ROUTES_A: &str = "  routes:\n    - services: [{name: echo-a, port: 80}]\n";

/// What an HTTPS request through Envoy got: status, body and the server's leaf.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) body: String,
    pub(crate) peer: Option<CertificateDer<'static>>,
}

pub(crate) struct Client {
    roots: Vec<CertificateDer<'static>>,
    versions: Vec<&'static SupportedProtocolVersion>,
    identity: Option<(CertificateDer<'static>, String)>,
}

impl Client {
    pub(crate) fn new(roots: &[&CertifiedIssuer<'static, KeyPair>]) -> Client {
        Client {
            roots: roots.iter().map(|ca| ca.der().clone()).collect(),
            versions: vec![&rustls::version::TLS13, &rustls::version::TLS12],
            identity: None,
        }
    }

    /// The client presenting `issued` as its certificate.
    pub(crate) fn with_identity(self, issued: &Issued) -> Client {
        Client {
            identity: Some((issued.der.clone(), issued.key_pem.clone())),
            ..self
        }
    }

    fn config(&self) -> Result<ClientConfig, String> {
        let mut store = RootCertStore::empty();
        for root in &self.roots {
            store.add(root.clone()).map_err(|e| e.to_string())?;
        }
        let builder =
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_protocol_versions(&self.versions)
                .map_err(|e| e.to_string())?
                .with_root_certificates(store);
        match &self.identity {
            None => Ok(builder.with_no_client_auth()),
            Some((cert, key)) => {
                let key =
                    PrivateKeyDer::from_pem_slice(key.as_bytes()).map_err(|e| e.to_string())?;
                builder
                    .with_client_auth_cert(vec![cert.clone()], key)
                    .map_err(|e| e.to_string())
            }
        }
    }

    /// `GET path` with `Host: host` over TLS with SNI `sni` to 127.0.0.1:`port`.
    pub(crate) async fn get(
        &self,
        port: u16,
        sni: &str,
        host: &str,
        path: &str,
    ) -> Result<Answer, String> {
        self.get_with(port, sni, host, path, &[]).await
    }

    /// [`Client::get`] with more request headers.
    pub(crate) async fn get_with(
        &self,
        port: u16,
        sni: &str,
        host: &str,
        path: &str,
        headers: &[(&str, &str)],
    ) -> Result<Answer, String> {
        let connector = tokio_rustls::TlsConnector::from(Arc::new(self.config()?));
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|e| e.to_string())?;
        let name = ServerName::try_from(sni.to_string()).map_err(|e| e.to_string())?;
        let mut stream = tokio::time::timeout(Duration::from_secs(5), connector.connect(name, tcp))
            .await
            .map_err(|_| "handshake timed out".to_string())?
            .map_err(|e| format!("handshake: {e}"))?;
        let peer = stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| c.clone().into_owned());
        let extra: String = headers
            .iter()
            .map(|(name, value)| format!("{name}: {value}\r\n"))
            .collect();
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n");
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| format!("write: {e}"))?;
        let mut response = Vec::new();
        let read =
            tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut response)).await;
        if response.is_empty() {
            return Err(format!("no response: {read:?}"));
        }
        let text = String::from_utf8_lossy(&response).into_owned();
        let status = text
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("not HTTP: {text:?}"))?;
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        Ok(Answer { status, body, peer })
    }
}

/// A TLS backend answering `passthrough` to any request, with its own certificate.
pub(crate) async fn tls_backend(cert: &Issued) -> u16 {
    let key =
        PrivateKeyDer::from_pem_slice(cert.key_pem.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap_or_else(|e| panic!("{e}"))
    .with_no_client_auth()
    .with_single_cert(vec![cert.der.clone()], key)
    .unwrap_or_else(|e| panic!("{e}"));
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                // The server name the client sent, in a header of the answer.
                let sni = tls
                    .get_ref()
                    .1
                    .server_name()
                    .unwrap_or_default()
                    .to_string();
                let mut buf = [0u8; 4096];
                let _ = tls.read(&mut buf).await;
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nX-Sni: {sni}\r\nContent-Length: 11\r\nConnection: close\r\n\r\npassthrough"
                );
                let _ = tls.write_all(answer.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    port
}

pub(crate) fn stat(stats: &str, name: &str) -> Option<u64> {
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .and_then(|v| v.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_through_envoy() {
    let ca = new_ca("Isobar Test CA");
    let secure = issue(&ca, "secure.example.com");
    let modern = issue(&ca, "modern.example.com");
    let shared = issue(&ca, "borrow.example.com");
    let tcp = issue(&ca, "tcp.example.com");
    let mtls = issue(&ca, "mtls.example.com");
    let backend_cert = issue(&ca, "pass.example.com");
    let backend_port = tls_backend(&backend_cert).await;
    let other = issue(&ca, "other.example.com");
    // For clients that send no SNI (they connect by address).
    let fallback = issue(&ca, "127.0.0.1");
    let broken = Issued {
        key_pem: other.key_pem.clone(),
        ..issue(&ca, "broken.example.com")
    };

    let files = [
        (
            "tls/secure.yaml".to_string(),
            tls_secret("default", "secure", &secure),
        ),
        (
            "tls/fallback.yaml".to_string(),
            tls_secret("default", "fallback", &fallback),
        ),
        (
            "tls/modern.yaml".to_string(),
            tls_secret("default", "modern", &modern),
        ),
        (
            "tls/shared.yaml".to_string(),
            tls_secret("certs", "shared", &shared),
        ),
        (
            "tls/tcp.yaml".to_string(),
            tls_secret("default", "tcp", &tcp),
        ),
        (
            "tls/mtls.yaml".to_string(),
            tls_secret("default", "mtls", &mtls),
        ),
        (
            "tls/client-ca.yaml".to_string(),
            ca_secret("default", "client-ca", &ca),
        ),
        (
            "tls/broken.yaml".to_string(),
            tls_secret("default", "broken", &broken),
        ),
        (
            "tls/backend.yaml".to_string(),
            service_yaml("default", "tls-backend", backend_port),
        ),
        (
            "proxies/secure.yaml".to_string(),
            proxy(
                "default",
                "secure",
                "secure.example.com",
                "{secretName: secure, enableFallbackCertificate: true}",
                "  routes:\n    - services: [{name: echo-a, port: 80}]\n    - conditions: [{prefix: /open}]\n      permitInsecure: true\n      services: [{name: echo-b, port: 80}]\n",
            ),
        ),
        (
            "proxies/modern.yaml".to_string(),
            proxy(
                "default",
                "modern",
                "modern.example.com",
                "{secretName: modern, minimumProtocolVersion: \"1.3\"}",
                ROUTES_A,
            ),
        ),
        (
            "proxies/borrow.yaml".to_string(),
            proxy(
                "team",
                "borrow",
                "borrow.example.com",
                "{secretName: certs/shared}",
                "  routes:\n    - services: [{name: echo-c, port: 80}]\n",
            ),
        ),
        (
            "proxies/tcp.yaml".to_string(),
            proxy(
                "default",
                "tcp",
                "tcp.example.com",
                "{secretName: tcp}",
                "  tcpproxy:\n    services: [{name: echo-a, port: 80}]\n",
            ),
        ),
        (
            "proxies/pass.yaml".to_string(),
            proxy(
                "default",
                "pass",
                "pass.example.com",
                "{passthrough: true}",
                "  tcpproxy:\n    services: [{name: tls-backend, port: 80}]\n",
            ),
        ),
        (
            "proxies/mtls.yaml".to_string(),
            proxy(
                "default",
                "mtls",
                "mtls.example.com",
                "{secretName: mtls, clientValidation: {caSecret: client-ca}}",
                ROUTES_A,
            ),
        ),
        (
            "proxies/upstream.yaml".to_string(),
            "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {name: upstream, namespace: default}\nspec:\n  virtualhost: {fqdn: up.example.com}\n  routes:\n    - services: [{name: tls-backend, port: 80, protocol: tls, validation: {caSecret: client-ca, subjectName: pass.example.com}}]\n    - conditions: [{prefix: /wrong-name}]\n      services: [{name: tls-backend, port: 80, protocol: tls, validation: {caSecret: client-ca, subjectName: other.example.com}}]\n".to_string(),
        ),
        (
            "proxies/broken.yaml".to_string(),
            proxy(
                "default",
                "broken",
                "broken.example.com",
                "{secretName: broken}",
                ROUTES_A,
            ),
        ),
    ];
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    let stack = crate::e2e::start_with(
        Some("tls:\n  fallback-certificate: {name: fallback, namespace: default}\n"),
        &files,
        ("secure.example.com", "/open", "b"),
    )
    .await;
    let port = stack.https_port;
    let client = Client::new(&[&ca]);

    // HTTPS by SNI, with the certificate made for it.
    let answer = eventually(Duration::from_secs(10), || async {
        client
            .get(port, "secure.example.com", "secure.example.com", "/")
            .await
            .ok()
            .filter(|a| a.status == 200)
    })
    .await
    .unwrap_or_else(|| panic!("no HTTPS answer\n{}", stack.logs()));
    assert_eq!(answer.body, "a");
    assert_eq!(answer.peer.as_ref(), Some(&secure.der));

    // Plain HTTP redirects to HTTPS, except the permitInsecure route.
    let redirect = stack
        .client
        .get(format!("http://127.0.0.1:{}/x?y=1", stack.http_port()))
        .header("host", "secure.example.com")
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(redirect.status().as_u16(), 301);
    let location = redirect
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    assert!(
        location.starts_with("https://secure.example.com") && location.ends_with("/x?y=1"),
        "{location}"
    );

    // No SNI: the fallback certificate, and the routes of vhosts that enable it.
    let no_sni = client
        .get(port, "127.0.0.1", "secure.example.com", "/")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((no_sni.status, no_sni.body.as_str()), (200, "a"));
    assert_eq!(no_sni.peer.as_ref(), Some(&fallback.der));

    // A Host that is not the vhost the SNI chose: 421.
    let misdirected = client
        .get(port, "secure.example.com", "modern.example.com", "/")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(misdirected.status, 421);

    // TLS 1.3 only: a TLS 1.2 client is refused; TLS 1.3 works, and TLS 1.2 still works elsewhere.
    let tls12 = Client {
        versions: vec![&rustls::version::TLS12],
        ..Client::new(&[&ca])
    };
    let refused = tls12
        .get(port, "modern.example.com", "modern.example.com", "/")
        .await;
    assert!(refused.is_err(), "TLS 1.2 accepted: {refused:?}");
    let ok = client
        .get(port, "modern.example.com", "modern.example.com", "/")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((ok.status, ok.body.as_str()), (200, "a"));
    let ok12 = tls12
        .get(port, "secure.example.com", "secure.example.com", "/")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(ok12.status, 200);

    // TCP proxy with termination: TLS ends at Envoy, the backend gets plain HTTP.
    let tcp_answer = client
        .get(port, "tcp.example.com", "anything", "/")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((tcp_answer.status, tcp_answer.body.as_str()), (200, "a"));
    assert_eq!(tcp_answer.peer.as_ref(), Some(&tcp.der));

    // Passthrough: the client talks TLS with the backend itself.
    let pass = client
        .get(port, "pass.example.com", "pass.example.com", "/")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(pass.body, "passthrough");
    assert_eq!(pass.peer.as_ref(), Some(&backend_cert.der));

    // Client certificates: one the CA issued passes, one from another CA and none fail.
    let client_ca = new_ca("Client CA");
    let good_client = issue(&ca, "client.example.com");
    let bad_client = issue(&client_ca, "intruder.example.com");
    let with_good = Client {
        identity: Some((good_client.der.clone(), good_client.key_pem.clone())),
        ..Client::new(&[&ca])
    };
    let with_bad = Client {
        identity: Some((bad_client.der.clone(), bad_client.key_pem.clone())),
        ..Client::new(&[&ca])
    };
    let good = with_good
        .get(port, "mtls.example.com", "mtls.example.com", "/")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((good.status, good.body.as_str()), (200, "a"));
    let bad = with_bad
        .get(port, "mtls.example.com", "mtls.example.com", "/")
        .await;
    assert!(
        bad.is_err(),
        "a foreign client certificate was accepted: {bad:?}"
    );
    let none = client
        .get(port, "mtls.example.com", "mtls.example.com", "/")
        .await;
    assert!(
        none.is_err(),
        "no client certificate was accepted: {none:?}"
    );

    // Upstream TLS: verified against the CA and the expected name; a name the backend's
    // certificate does not carry fails the handshake (503), never falls back to plain.
    let upstream = stack
        .client
        .get(format!("http://127.0.0.1:{}/", stack.http_port()))
        .header("host", "up.example.com")
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(upstream.status().as_u16(), 200);
    assert_eq!(upstream.text().await.unwrap_or_default(), "passthrough");
    let wrong = stack
        .client
        .get(format!("http://127.0.0.1:{}/wrong-name", stack.http_port()))
        .header("host", "up.example.com")
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(wrong.status().as_u16(), 503);

    // The broken secret (key of another certificate) is never served.
    let broken_answer = client
        .get(port, "broken.example.com", "broken.example.com", "/")
        .await;
    assert!(broken_answer.is_err(), "{broken_answer:?}");

    // Delegation added live.
    let borrowed = client
        .get(port, "borrow.example.com", "borrow.example.com", "/")
        .await;
    assert!(
        borrowed.is_err(),
        "served without a delegation: {borrowed:?}"
    );
    write(
        &stack.manifests(),
        "tls/delegation.yaml",
        "apiVersion: projectcontour.io/v1\nkind: TLSCertificateDelegation\nmetadata: {name: share, namespace: certs}\nspec:\n  delegations:\n    - {secretName: shared, targetNamespaces: [team]}\n",
    );
    let delegated = eventually(Duration::from_secs(10), || async {
        client
            .get(port, "borrow.example.com", "borrow.example.com", "/")
            .await
            .ok()
            .filter(|a| a.status == 200)
    })
    .await
    .unwrap_or_else(|| panic!("delegation never took effect\n{}", stack.logs()));
    assert_eq!(delegated.body, "c");

    // Rotation: same secret, new certificate; SDS alone carries it, the listener stays.
    let stats = stack.envoy_stats().await;
    let lds_before = stat(&stats, "listener_manager.lds.update_success");
    let rotated = issue(&ca, "secure.example.com");
    write(
        &stack.manifests(),
        "tls/secure.yaml",
        &tls_secret("default", "secure", &rotated),
    );
    let seen = eventually(Duration::from_secs(10), || async {
        client
            .get(port, "secure.example.com", "secure.example.com", "/")
            .await
            .ok()
            .filter(|a| a.peer.as_ref() == Some(&rotated.der))
    })
    .await
    .unwrap_or_else(|| panic!("the rotated certificate never arrived\n{}", stack.logs()));
    assert_eq!(seen.status, 200);
    let stats = stack.envoy_stats().await;
    assert_eq!(
        stat(&stats, "listener_manager.lds.update_success"),
        lds_before,
        "the rotation sent a listener update"
    );
    stack.assert_nothing_rejected().await;
}
