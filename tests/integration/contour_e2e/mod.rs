//! Contour's end-to-end suite (`test/e2e` of Contour v1.33.6, and two files of its main
//! branch): one test of Isobar's own per test function, named after it (`testTLSWildcardHost`
//! of `test/e2e/ingress` is `contour_e2e::ingress::tls_wildcard_host`), making the same
//! requests through a real Envoy and asserting what Contour's test asserts: status codes,
//! the echo service that answered and what it saw, response headers, TLS, and the status
//! of the objects. The objects live on the tests' API server; Isobar's controller reads
//! them from it and writes status back, as in a cluster.

mod api_validation;
mod docs;
mod external_auth;
mod gateway;
mod httpproxy;
mod ingress;
mod jwt_verification;
mod main_keys;
mod rate_limiting;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::conformance::client::{self, Answer, Protocol, Request, Tls};
use crate::conformance::echo::{self, PodInfo};
use crate::conformance::suite::Suite;

/// How long a request may take to be answered as expected (Contour's `RequestUntil`
/// polls for a minute; Isobar needs well under a second).
const UNTIL: Duration = Duration::from_secs(30);

/// A Contour e2e run: the tests' API server, Isobar's controller and a real Envoy whose
/// HTTP and HTTPS listeners the requests go to.
pub struct E2e {
    pub suite: Suite,
}

/// A request as Contour's e2e helpers make it: `Host`, path, method and headers, over
/// HTTP or, with an SNI name, HTTPS (any certificate taken).
#[derive(Clone, Debug, Default)]
pub struct Req {
    pub host: String,
    pub path: String,
    pub method: String,
    pub headers: Vec<(String, String)>,
    /// HTTPS with this server name.
    pub sni: Option<String>,
    /// Over HTTPS, the server's certificate is checked against this CA (else any is
    /// taken).
    pub ca: Option<tokio_rustls::rustls::pki_types::CertificateDer<'static>>,
    /// Sent to this address instead of Envoy's HTTP (or HTTPS) listener.
    pub to: Option<SocketAddr>,
    /// Over HTTPS, the client certificate presented (certificate, key PEM).
    pub identity: Option<(
        tokio_rustls::rustls::pki_types::CertificateDer<'static>,
        String,
    )>,
}

/// `GET /` of `host` over HTTP.
pub fn http(host: &str) -> Req {
    Req {
        host: host.to_string(),
        path: "/".to_string(),
        method: "GET".to_string(),
        ..Req::default()
    }
}

/// `GET /` of `host` over HTTPS, SNI `host`.
pub fn https(host: &str) -> Req {
    http(host).sni(host)
}

impl Req {
    pub fn path(mut self, path: &str) -> Req {
        self.path = path.to_string();
        self
    }

    pub fn identity(mut self, leaf: &crate::conformance::certs::Leaf) -> Req {
        self.identity = Some((leaf.der.clone(), leaf.key_pem.clone()));
        self
    }

    pub fn to(mut self, addr: SocketAddr) -> Req {
        self.to = Some(addr);
        self
    }

    pub fn sni(mut self, sni: &str) -> Req {
        self.sni = Some(sni.to_string());
        self
    }

    pub fn header(mut self, name: &str, value: &str) -> Req {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    pub fn verified_by(
        mut self,
        ca: tokio_rustls::rustls::pki_types::CertificateDer<'static>,
    ) -> Req {
        self.ca = Some(ca);
        self
    }
}

/// The Service whose echo pod answered (`""` when no echo did).
pub fn service(answer: &Answer) -> String {
    let pod = answer
        .echo
        .as_ref()
        .and_then(|e| e["pod"].as_str())
        .unwrap_or_default();
    pod.rsplit_once("-pod-")
        .map_or_else(String::new, |(service, _)| service.to_string())
}

/// What the echo saw: a JSON field of its account (`path`, `host`, …).
pub fn seen<'a>(answer: &'a Answer, field: &str) -> &'a Value {
    answer.echo.as_ref().map_or(&Value::Null, |e| &e[field])
}

/// A request header the echo saw (first value).
pub fn seen_header(answer: &Answer, name: &str) -> Option<String> {
    let headers = answer.echo.as_ref()?.get("headers")?.as_object()?;
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .and_then(|(_, v)| match v {
            Value::Array(values) => values.first().and_then(Value::as_str).map(str::to_string),
            Value::String(s) => Some(s.clone()),
            _ => None,
        })
}

impl E2e {
    /// Isobar with its defaults (as Contour's e2e runs Contour).
    pub async fn start() -> E2e {
        E2e::start_with(|_| {}).await
    }

    pub async fn start_with(configure: impl FnOnce(&mut isobar::config::Config)) -> E2e {
        E2e::start_watching(&[], configure).await
    }

    /// Isobar watching only `namespaces` (`--watch-namespaces`).
    pub async fn start_watching(
        namespaces: &[&str],
        configure: impl FnOnce(&mut isobar::config::Config),
    ) -> E2e {
        let namespaces = namespaces.iter().map(|n| n.to_string()).collect();
        E2e {
            suite: Suite::start_watching(false, namespaces, configure).await,
        }
    }

    /// Contour's `Echo.Deploy(ns, name)`: one echo pod behind Service `ns/name`, port 80
    /// (`http`) to the pod's 3000.
    pub async fn deploy_echo(&self, ns: &str, name: &str) {
        let ip = self.suite.pod_ip();
        let info = PodInfo {
            namespace: ns.to_string(),
            pod: format!("{name}-pod-0"),
        };
        echo::http_pod(ip, info, None, self.suite.logs.clone()).await;
        self.suite
            .service(ns, name, &[("http", 80, 3000, "")], &[ip]);
    }

    /// Contour's `GRPC.Deploy(ns, name)`: a gRPC pod (yages' `Ping` among its methods)
    /// behind Service `ns/name`, port 9000 to the pod's h2c port.
    pub async fn deploy_grpc(&self, ns: &str, name: &str) {
        let ip = self.suite.pod_ip();
        let info = PodInfo {
            namespace: ns.to_string(),
            pod: format!("{name}-pod-0"),
        };
        crate::conformance::grpc::grpc_pod(ip, info).await;
        self.suite
            .service(ns, name, &[("grpc", 9000, 3000, "")], &[ip]);
    }

    /// A server of the tests' own (on loopback `port`) as ExtensionService `ns/name`
    /// speaking `protocol` (`h2c`, `http/1.1`), behind Service `ns/name` port
    /// `service_port`.
    pub fn extension_service(
        &self,
        (ns, name): (&str, &str),
        service_port: u16,
        port: u16,
        protocol: &str,
    ) {
        let loopback: std::net::IpAddr = std::net::Ipv4Addr::LOCALHOST.into();
        self.suite
            .service(ns, name, &[("grpc", service_port, port, "")], &[loopback]);
        self.apply(&format!("apiVersion: projectcontour.io/v1alpha1\nkind: ExtensionService\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  protocol: {protocol}\n  services: [{{name: {name}, port: {service_port}}}]\n"));
    }

    /// Contour's `EchoSecure.Deploy(ns, name)`: one echo pod serving `leaf` over TLS
    /// (reporting the client certificate Envoy presents) behind Service `ns/name`, port
    /// 443 (`https`) to the pod's 8443, annotated `upstream-protocol.tls` unless `plain`.
    pub async fn deploy_echo_secure(
        &self,
        ns: &str,
        name: &str,
        leaf: &crate::conformance::certs::Leaf,
        plain: bool,
    ) {
        let ip = self.suite.pod_ip();
        let info = PodInfo {
            namespace: ns.to_string(),
            pod: format!("{name}-pod-0"),
        };
        echo::http_pod(
            ip,
            info,
            Some(leaf.server_config()),
            self.suite.logs.clone(),
        )
        .await;
        self.suite
            .service(ns, name, &[("https", 443, 8443, "")], &[ip]);
        if !plain {
            self.apply(&format!(
                "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: {ns}, annotations: {{projectcontour.io/upstream-protocol.tls: '443'}}}}\nspec: {{selector: {{app: {name}}}, ports: [{{name: https, protocol: TCP, port: 443, targetPort: 8443}}]}}\n"
            ));
        }
    }

    /// A `kubernetes.io/tls` Secret `ns/name` holding `leaf` and, as `ca.crt`, `ca` (as
    /// cert-manager writes them).
    pub fn tls_secret_with_ca(
        &self,
        ns: &str,
        name: &str,
        leaf: &crate::conformance::certs::Leaf,
        ca: &crate::conformance::certs::Ca,
    ) {
        use base64::Engine;
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        self.apply(&format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: {ns}}}\ntype: kubernetes.io/tls\ndata:\n  tls.crt: {}\n  tls.key: {}\n  ca.crt: {}\n",
            b64(&leaf.cert_pem),
            b64(&leaf.key_pem),
            b64(&ca.pem())
        ));
    }

    /// A Deployment's pod replaced, as its controller does when it dies: a new echo pod
    /// (named `pod`, at a new address) and the Service's EndpointSlice naming it alone.
    pub async fn replace_pod(&self, ns: &str, service: &str, pod: &str) {
        let ip = self.suite.pod_ip();
        let info = PodInfo {
            namespace: ns.to_string(),
            pod: format!("{service}-pod-{pod}"),
        };
        echo::http_pod(ip, info, None, self.suite.logs.clone()).await;
        self.suite
            .service(ns, service, &[("http", 80, 3000, "")], &[ip]);
    }

    /// Contour's `Certs.CreateSelfSignedCert`: a `kubernetes.io/tls` Secret `ns/secret`
    /// for `dns_name`, issued by a CA of its own; the CA's certificate (the Secret's
    /// `ca.crt` in Contour's).
    pub fn self_signed_cert(
        &self,
        ns: &str,
        secret: &str,
        dns_name: &str,
    ) -> tokio_rustls::rustls::pki_types::CertificateDer<'static> {
        let ca = crate::tls::new_ca(&format!("{secret}-ca"));
        let leaf = crate::tls::issue(&ca, dns_name);
        self.apply(&crate::tls::tls_secret(ns, secret, &leaf));
        ca.der().clone()
    }

    /// Creates or replaces every object of `yaml`.
    pub fn apply(&self, yaml: &str) {
        self.suite.apply(yaml);
    }

    /// One request through Envoy.
    pub async fn send(&self, req: &Req) -> Result<Answer, String> {
        let (addr, protocol): (SocketAddr, Protocol) = match &req.sni {
            None => (self.suite.envoy_http, Protocol::Http),
            Some(sni) => {
                let mut tls = match &req.ca {
                    Some(ca) => Tls::new(sni, std::slice::from_ref(ca)),
                    None => Tls::insecure(sni),
                };
                if let Some((cert, key)) = &req.identity {
                    tls = tls.with_identity(cert, key);
                }
                (self.suite.envoy_https, Protocol::Https(tls))
            }
        };
        let addr = req.to.unwrap_or(addr);
        let request = Request {
            host: Some(req.host.clone()),
            method: req.method.clone(),
            path: req.path.clone(),
            headers: req.headers.clone(),
        };
        client::send(addr, &protocol, &request, &[]).await
    }

    /// Contour's `RequestUntil`: `req` again and again until its answer meets `condition`
    /// (within 30 s); the answer that did. Panics, with the last answer, when none does.
    pub async fn until(&self, req: &Req, condition: impl Fn(&Answer) -> bool) -> Answer {
        let start = Instant::now();
        loop {
            let last = match self.send(req).await {
                Ok(answer) if condition(&answer) => return answer,
                Ok(answer) => format!("status {}: {}", answer.status, answer.body),
                Err(e) => e,
            };
            assert!(
                start.elapsed() < UNTIL,
                "{req:?}: never as expected; last: {last}\n{}",
                self.suite.logs()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// [`E2e::until`] the answer has `status`.
    pub async fn until_status(&self, req: &Req, status: u16) -> Answer {
        self.until(req, |a| a.status == status).await
    }

    /// Contour's `CreateHTTPProxyAndWaitFor`: applies `yaml` and waits until HTTPProxy
    /// `ns/name` says `currentStatus` `want` (`valid`, `invalid`, `orphaned`), for its
    /// generation; the object.
    pub async fn proxy(&self, yaml: &str, (ns, name): (&str, &str), want: &str) -> Value {
        self.apply(yaml);
        self.proxy_status((ns, name), want).await
    }

    /// Applies `yaml` and waits until HTTPProxy `ns/name` is `invalid` for a reason whose
    /// status holds `text` (not for another, such as a Secret not seen yet); the object.
    pub async fn proxy_invalid(&self, yaml: &str, (ns, name): (&str, &str), text: &str) -> Value {
        self.apply(yaml);
        self.suite
            .wait_for(
                ("projectcontour.io/v1", "HTTPProxy", ns, name),
                &format!("invalid, saying {text:?}"),
                |p| {
                    p["status"]["currentStatus"] == "invalid"
                        && p["status"].to_string().contains(text)
                },
            )
            .await
    }

    /// Waits until HTTPProxy `ns/name` says `currentStatus` `want`; the object.
    pub async fn proxy_status(&self, (ns, name): (&str, &str), want: &str) -> Value {
        self.suite
            .wait_for(
                ("projectcontour.io/v1", "HTTPProxy", ns, name),
                &format!("currentStatus {want}"),
                |p| {
                    p["status"]["currentStatus"] == want
                        && p["status"]["conditions"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .all(|c| c["observedGeneration"] == p["metadata"]["generation"])
                },
            )
            .await
    }

    /// `req` is not served: no listener takes it, or it answers 404.
    pub async fn not_served(&self, req: &Req) {
        let start = Instant::now();
        loop {
            match self.send(req).await {
                Ok(answer) if answer.status != 404 => {
                    assert!(
                        start.elapsed() < UNTIL,
                        "{req:?} still answers {}: {}",
                        answer.status,
                        answer.body
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                _ => return,
            }
        }
    }

    /// Envoy rejected nothing Isobar sent it.
    pub async fn assert_nothing_rejected(&self) {
        self.suite.assert_nothing_rejected().await;
    }
}
