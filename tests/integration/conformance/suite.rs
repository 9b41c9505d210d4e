//! One conformance run: a Kubernetes API (the tests' API server) holding the suite's
//! base objects, echo pods behind its Services, Isobar's controller writing status to
//! it, and a real Envoy serving its Gateways, each Gateway on a loopback address of its
//! own (`gateway.addressPool`) at its listeners' own ports, as the suite reaches them.
//! The status helpers wait for what the suite's helpers wait for.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::apiserver::ApiServer;
use crate::conformance::certs::Certs;
use crate::conformance::client::{self, Expect, Protocol, Tls};
use crate::conformance::echo::{self, Logs, PodInfo};
use crate::conformance::grpc;
use crate::support::{Proc, ServePorts, envoy_on};

pub const INFRA: &str = "gateway-conformance-infra";
pub const APP: &str = "gateway-conformance-app-backend";
pub const WEB: &str = "gateway-conformance-web-backend";
/// The GatewayClass every Gateway of the suite names.
pub const CLASS: &str = "gateway-conformance";
/// Isobar's controller name (Contour's).
pub const CONTROLLER: &str = "projectcontour.io/gateway-controller";
pub const GW: &str = "gateway.networking.k8s.io/v1";

/// How long status may take (the suite allows 60–180 s; Isobar needs well under one).
const STATUS: Duration = Duration::from_secs(30);

/// The base Gateways (`conformance/base`).
const BASE_GATEWAYS: &str = r#"apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: same-namespace, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: gateway-conformance
  listeners:
    - {name: http, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: Same}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: same-namespace-with-https-listener, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: gateway-conformance
  listeners:
    - name: https
      port: 443
      protocol: HTTPS
      allowedRoutes: {namespaces: {from: Same}}
      tls: {certificateRefs: [{group: "", kind: Secret, name: tls-validity-checks-certificate, namespace: gateway-conformance-infra}]}
    - name: https-with-hostname
      port: 443
      hostname: second-example.org
      protocol: HTTPS
      allowedRoutes: {namespaces: {from: Same}}
      tls: {certificateRefs: [{group: "", kind: Secret, name: tls-validity-checks-certificate, namespace: gateway-conformance-infra}]}
    - name: https-with-wildcard-hostname
      port: 443
      hostname: "*.wildcard.org"
      protocol: HTTPS
      allowedRoutes: {namespaces: {from: Same}}
      tls: {certificateRefs: [{group: "", kind: Secret, name: tls-validity-checks-certificate, namespace: gateway-conformance-infra}]}
    - name: https-with-hostname-matching-wildcard
      port: 443
      hostname: fourth-example.wildcard.org
      protocol: HTTPS
      allowedRoutes: {namespaces: {from: Same}}
      tls: {certificateRefs: [{group: "", kind: Secret, name: tls-validity-checks-certificate, namespace: gateway-conformance-infra}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: all-namespaces, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: gateway-conformance
  listeners:
    - {name: http, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: All}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: backend-namespaces, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: gateway-conformance
  listeners:
    - name: http
      port: 80
      protocol: HTTP
      allowedRoutes:
        namespaces:
          from: Selector
          selector: {matchLabels: {gateway-conformance: backend}}
"#;

/// What a base Deployment runs.
#[derive(Clone, Copy)]
enum Runs {
    Http,
    /// The HTTP echo with a TLS port (8443) serving this Secret's certificate.
    HttpTls(&'static str),
    /// The TCP line server (with TLS on 8443).
    Tcp(&'static str),
    /// The gRPC echo service (h2c on 3000).
    Grpc,
}

/// A base Service and its pods: namespace, name, pods, ports (name, port, target,
/// appProtocol), what the pods run.
type Backend = (
    &'static str,
    &'static str,
    u8,
    &'static [(&'static str, u16, u16, &'static str)],
    Runs,
);

const BACKENDS: &[Backend] = &[
    (
        INFRA,
        "infra-backend-v1",
        2,
        &[
            ("first-port", 8080, 3000, ""),
            ("second-port", 8081, 3001, "kubernetes.io/h2c"),
            ("third-port", 8082, 3000, "kubernetes.io/ws"),
        ],
        Runs::Http,
    ),
    (
        INFRA,
        "infra-backend-v2",
        2,
        &[("", 8080, 3000, "")],
        Runs::Http,
    ),
    (
        INFRA,
        "infra-backend-v3",
        1,
        &[("", 8080, 3000, "")],
        Runs::Http,
    ),
    (
        INFRA,
        "tls-backend",
        1,
        &[("", 443, 8443, "")],
        Runs::HttpTls("tls-checks-certificate"),
    ),
    (
        INFRA,
        "tls-backend-2",
        1,
        &[("", 443, 8443, "")],
        Runs::HttpTls("tls-checks-certificate"),
    ),
    (
        INFRA,
        "tcp-backend",
        2,
        &[
            ("echo-tcp-plain", 3000, 3000, ""),
            ("echo-tcp-tls", 8443, 8443, ""),
        ],
        Runs::Tcp("tls-passthrough-checks-certificate"),
    ),
    (
        APP,
        "tls-backend",
        1,
        &[("", 443, 8443, "")],
        Runs::HttpTls("tls-passthrough-checks-certificate"),
    ),
    (
        APP,
        "app-backend-v1",
        2,
        &[("", 8080, 3000, "")],
        Runs::Http,
    ),
    (
        APP,
        "app-backend-v2",
        2,
        &[("", 8080, 3000, "")],
        Runs::Http,
    ),
    (WEB, "web-backend", 2, &[("", 8080, 3000, "")], Runs::Http),
    (
        INFRA,
        "grpc-infra-backend-v1",
        2,
        &[("", 8080, 3000, "kubernetes.io/h2c")],
        Runs::Grpc,
    ),
    (
        INFRA,
        "grpc-infra-backend-v2",
        2,
        &[("", 8080, 3000, "kubernetes.io/h2c")],
        Runs::Grpc,
    ),
    (
        INFRA,
        "grpc-infra-backend-v3",
        2,
        &[("", 8080, 3000, "kubernetes.io/h2c")],
        Runs::Grpc,
    ),
];

/// A running conformance set-up.
pub struct Suite {
    pub api: ApiServer,
    pub certs: Certs,
    pub logs: Logs,
    /// The second and third octets of this run's loopback addresses: Gateways get
    /// `127.a.b.1`–`.63`, pods `.64` and up.
    net: (u8, u8),
    next_pod: AtomicU8,
    /// Each base Deployment's pod addresses, by namespace and name.
    pods: std::sync::Mutex<std::collections::BTreeMap<(String, String), Vec<IpAddr>>>,
    dir: tempfile::TempDir,
    /// Envoy's HTTP and HTTPS listeners (the configured `envoy.http`/`https`).
    pub envoy_http: SocketAddr,
    pub envoy_https: SocketAddr,
    controller: Option<isobar::cli::serve::Controller>,
    _envoy: Proc,
}

/// Loopback octets for one run: different for every run of this process and, very
/// likely, of others running at the same time.
fn net() -> (u8, u8) {
    static RUNS: AtomicU8 = AtomicU8::new(0);
    let run = u64::from(RUNS.fetch_add(1, Ordering::SeqCst));
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::from(d.subsec_nanos()))
        .unwrap_or(0);
    let seed = (u64::from(std::process::id()) << 20) ^ nanos ^ (run << 8);
    let mixed = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32;
    (
        u8::try_from(20 + mixed % 230).unwrap_or(20),
        u8::try_from((mixed >> 8) % 256).unwrap_or(0),
    )
}

impl Suite {
    /// The suite's base objects, its pods and Isobar's controller on the API server,
    /// and a real Envoy.
    pub async fn start() -> Suite {
        Suite::start_with(true, |_| {}).await
    }

    /// A run with the suite's base objects (`base`) or without (an API server, Isobar
    /// and Envoy alone), Isobar configured as `configure` has it.
    pub async fn start_with(
        base: bool,
        configure: impl FnOnce(&mut isobar::config::Config),
    ) -> Suite {
        Suite::start_watching(base, Vec::new(), configure).await
    }

    /// [`Suite::start_with`], Isobar watching only `namespaces` (`--watch-namespaces`;
    /// empty: all).
    pub async fn start_watching(
        base: bool,
        namespaces: Vec<String>,
        configure: impl FnOnce(&mut isobar::config::Config),
    ) -> Suite {
        let api = ApiServer::start().await;
        let ports = ServePorts::free();
        let net = net();
        let own: IpAddr = IpAddr::V4(Ipv4Addr::new(127, net.0, net.1, 253));
        let certs = Certs::new();
        let logs = Logs::default();
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut suite = Suite {
            api,
            certs,
            logs,
            net,
            next_pod: AtomicU8::new(64),
            pods: std::sync::Mutex::default(),
            dir,
            envoy_http: SocketAddr::new(own, ports.http),
            envoy_https: SocketAddr::new(own, ports.https),
            controller: None,
            _envoy: Proc(
                std::process::Command::new("true")
                    .spawn()
                    .unwrap_or_else(|e| panic!("{e}")),
            ),
        };
        if base {
            suite.apply(&format!(
                "apiVersion: {GW}\nkind: GatewayClass\nmetadata: {{name: {CLASS}}}\nspec: {{controllerName: {CONTROLLER}}}\n"
            ));
            for (ns, label) in [(INFRA, "infra"), (APP, "backend"), (WEB, "backend")] {
                suite.apply(&format!(
                    "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}, labels: {{gateway-conformance: {label}}}}}\n"
                ));
            }
            for object in suite.certs.objects() {
                suite.api.put(&object);
            }
            for backend in BACKENDS {
                suite.deploy(backend).await;
            }
            suite.apply(BASE_GATEWAYS);
        }
        let mut config = isobar::config::Config {
            gateway: Some(json!({
                "controllerName": CONTROLLER,
                "addressPool": [format!("127.{}.{}.0/26", suite.net.0, suite.net.1)],
            })),
            ..isobar::config::Config::default()
        };
        // Envoy's own listeners on an address of this run: a port another run (or
        // test) takes between choosing and binding cannot collide with them.
        let own = own.to_string();
        let local = |port| isobar::config::Endpoint {
            address: own.clone(),
            port,
        };
        config.envoy.http = local(ports.http);
        config.envoy.https = local(ports.https);
        config.envoy.metrics = local(ports.stats);
        config.envoy.health = local(ports.health);
        config.envoy.access_log = String::new();
        // No `envoy-admin` listener: it binds 127.0.0.1, where a port chosen free can be
        // taken by another test before Envoy binds it (the admin socket serves the tests).
        config.network.admin_port = 0;
        config.pipeline.holdoff_delay.0 = Duration::ZERO;
        config.pipeline.holdoff_max_delay.0 = Duration::ZERO;
        config.leader_election.disabled = true;
        configure(&mut config);
        let controller = suite
            .api
            .controller_watching(&config, suite.dir.path(), namespaces)
            .await;
        let xds = crate::extension::serve_ads(
            controller.snapshots.clone(),
            controller.rejections.clone(),
        )
        .await;
        suite.controller = Some(controller);
        suite._envoy = envoy_on(suite.dir.path(), xds, "delta");
        if base {
            suite.class_accepted().await;
        }
        suite
    }

    /// Creates or replaces every object of `yaml` (documents apart by `---`).
    pub fn apply(&self, yaml: &str) {
        for document in yaml.split("\n---\n") {
            if document.trim().is_empty() {
                continue;
            }
            self.api.put(document);
        }
    }

    pub fn delete(&self, api_version: &str, kind: &str, namespace: &str, name: &str) {
        self.api.delete(api_version, kind, namespace, name);
    }

    /// Isobar's and Envoy's logs, for a failure's message.
    pub fn logs(&self) -> String {
        let read =
            |name: &str| std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default();
        format!("--- envoy.log\n{}", read("envoy.log"))
    }

    /// A Service of `backend` with an EndpointSlice listing its pods, and the pods.
    async fn deploy(&self, (ns, name, pods, ports, runs): &Backend) {
        let mut ips = Vec::new();
        for i in 0..*pods {
            let ip = self.pod_ip();
            let info = PodInfo {
                namespace: ns.to_string(),
                pod: format!("{name}-pod-{i}"),
            };
            let tls = |secret: &str| {
                let leaf = match (*ns, secret) {
                    (APP, _) => &self.certs.passthrough_app,
                    (_, "tls-passthrough-checks-certificate") => &self.certs.passthrough_infra,
                    _ => &self.certs.checks_cert,
                };
                leaf.server_config()
            };
            match runs {
                Runs::Http => echo::http_pod(ip, info, None, self.logs.clone()).await,
                Runs::HttpTls(secret) => {
                    echo::http_pod(ip, info, Some(tls(secret)), self.logs.clone()).await;
                }
                Runs::Tcp(secret) => echo::tcp_pod(ip, info, Some(tls(secret))).await,
                Runs::Grpc => grpc::grpc_pod(ip, info).await,
            }
            ips.push(ip);
        }
        self.service(ns, name, ports, &ips);
        self.pods
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((ns.to_string(), name.to_string()), ips);
    }

    /// The pod addresses of the base Deployment `ns/name`.
    pub fn pods_of(&self, ns: &str, name: &str) -> Vec<IpAddr> {
        let pods = self.pods.lock().unwrap_or_else(|e| e.into_inner());
        pods.get(&(ns.to_string(), name.to_string()))
            .cloned()
            .unwrap_or_default()
    }

    /// An address of this run's Gateway address pool no base Gateway has.
    pub async fn usable_address(&self) -> IpAddr {
        let mut taken = Vec::new();
        for gw in [
            "same-namespace",
            "same-namespace-with-https-listener",
            "all-namespaces",
            "backend-namespaces",
        ] {
            taken.push(self.gateway_address(INFRA, gw, None).await.ip());
        }
        (1..63)
            .map(|last| IpAddr::V4(Ipv4Addr::new(127, self.net.0, self.net.1, last)))
            .find(|ip| !taken.contains(ip))
            .unwrap_or_else(|| panic!("no free address in the pool"))
    }

    /// An address outside this run's Gateway address pool.
    pub fn unusable_address(&self) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(127, self.net.0, self.net.1, 254))
    }

    /// A TLS echo pod (serving `tls-checks-certificate`) behind a new Service `ns/name`.
    pub async fn deploy_tls_echo(&self, ns: &str, name: &str, ports: &[(&str, u16, u16, &str)]) {
        let ip = self.pod_ip();
        let info = PodInfo {
            namespace: ns.to_string(),
            pod: format!("{name}-pod-0"),
        };
        let tls = self.certs.checks_cert.server_config();
        echo::http_pod(ip, info, Some(tls), self.logs.clone()).await;
        self.service(ns, name, ports, &[ip]);
    }

    /// The next pod address of this run.
    pub fn pod_ip(&self) -> IpAddr {
        let last = self.next_pod.fetch_add(1, Ordering::SeqCst);
        assert!(last < 255, "this run has no pod address left");
        IpAddr::V4(Ipv4Addr::new(127, self.net.0, self.net.1, last))
    }

    /// A Service `ns/name` with `ports` (name, port, target port, appProtocol) and an
    /// EndpointSlice of `ips` ready at the target ports.
    pub fn service(&self, ns: &str, name: &str, ports: &[(&str, u16, u16, &str)], ips: &[IpAddr]) {
        self.service_of("TCP", ns, name, ports, ips);
    }

    /// [`Suite::service`] with ports of `protocol` (`TCP`, `UDP`).
    pub fn service_of(
        &self,
        protocol: &str,
        ns: &str,
        name: &str,
        ports: &[(&str, u16, u16, &str)],
        ips: &[IpAddr],
    ) {
        let service_ports: Vec<Value> = ports
            .iter()
            .map(|(port_name, port, target, app)| {
                let mut p = json!({"protocol": protocol, "port": port, "targetPort": target});
                if !port_name.is_empty() {
                    p["name"] = json!(port_name);
                }
                if !app.is_empty() {
                    p["appProtocol"] = json!(app);
                }
                p
            })
            .collect();
        self.api.put(
            &json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"selector": {"app": name}, "ports": service_ports},
            })
            .to_string(),
        );
        let slice_ports: Vec<Value> = ports
            .iter()
            .map(|(port_name, _, target, _)| json!({"name": port_name, "port": target, "protocol": protocol}))
            .collect();
        let endpoints: Vec<Value> = ips
            .iter()
            .map(|ip| json!({"addresses": [ip.to_string()], "conditions": {"ready": true}}))
            .collect();
        self.api.put(
            &json!({
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {
                    "name": format!("{name}-pods"), "namespace": ns,
                    "labels": {"kubernetes.io/service-name": name},
                },
                "addressType": "IPv4",
                "ports": slice_ports,
                "endpoints": endpoints,
            })
            .to_string(),
        );
    }

    /// An object as the API server has it (`Value::Null` when it does not).
    pub fn get(&self, api_version: &str, kind: &str, ns: &str, name: &str) -> Value {
        self.api
            .get(api_version, kind, ns, name)
            .unwrap_or(Value::Null)
    }

    /// Waits for `check` on the object to hold; panics with the object otherwise.
    pub async fn wait_for(
        &self,
        (api_version, kind, ns, name): (&str, &str, &str, &str),
        what: &str,
        check: impl Fn(&Value) -> bool,
    ) -> Value {
        let start = Instant::now();
        loop {
            let object = self.get(api_version, kind, ns, name);
            if check(&object) {
                return object;
            }
            if start.elapsed() > STATUS {
                panic!(
                    "{kind} {ns}/{name}: {what} did not hold within {STATUS:?}; status:\n{}\n{}",
                    serde_json::to_string_pretty(&object["status"]).unwrap_or_default(),
                    self.logs()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn class_accepted(&self) {
        self.wait_for((GW, "GatewayClass", "", CLASS), "Accepted", |c| {
            fresh(c) && has(&c["status"]["conditions"], "Accepted", "True", "")
        })
        .await;
    }

    /// The Gateway's address once its status has one (with a type), at the port of its
    /// listener `listener` (or its first).
    pub async fn gateway_address(
        &self,
        ns: &str,
        name: &str,
        listener: Option<&str>,
    ) -> SocketAddr {
        let gw = self
            .wait_for((GW, "Gateway", ns, name), "an address", |g| {
                fresh(g)
                    && g["status"]["addresses"]
                        .as_array()
                        .is_some_and(|a| a.iter().any(|a| a["type"].is_string()))
            })
            .await;
        let listeners = gw["spec"]["listeners"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let port = listener
            .and_then(|l| listeners.iter().find(|x| x["name"] == l))
            .or(listeners.first())
            .and_then(|l| l["port"].as_u64())
            .and_then(|p| u16::try_from(p).ok())
            .unwrap_or(80);
        let address = gw["status"]["addresses"]
            .as_array()
            .and_then(|a| a.iter().find(|a| a["type"].is_string()))
            .and_then(|a| a["value"].as_str())
            .and_then(|v| v.parse::<IpAddr>().ok())
            .unwrap_or_else(|| {
                panic!(
                    "Gateway {ns}/{name}: address is not an IP: {}",
                    gw["status"]
                )
            });
        SocketAddr::new(address, port)
    }

    /// The suite's `GatewayAndRoutesMustBeAccepted`: the Gateway's address; each route
    /// has a parent entry of this controller naming the Gateway, `Accepted`; every
    /// listener of the Gateway is `Accepted`, `ResolvedRefs` and `Programmed`.
    pub async fn routes_accepted(
        &self,
        (gw_ns, gw): (&str, &str),
        kind: &str,
        routes: &[(&str, &str)],
    ) -> SocketAddr {
        let address = self.gateway_address(gw_ns, gw, None).await;
        for (ns, name) in routes {
            self.wait_for((GW, kind, ns, name), "Accepted by the Gateway", |r| {
                parent_of(r, gw_ns, gw, "Gateway")
                    .is_some_and(|p| has(&p["conditions"], "Accepted", "True", "Accepted"))
            })
            .await;
        }
        self.wait_for((GW, "Gateway", gw_ns, gw), "every listener ready", |g| {
            g["status"]["listeners"]
                .as_array()
                .into_iter()
                .flatten()
                .all(|l| {
                    ["ResolvedRefs", "Accepted", "Programmed"]
                        .iter()
                        .all(|t| has(&l["conditions"], t, "True", ""))
                })
        })
        .await;
        address
    }

    /// The suite's `HTTPRouteMustHaveCondition` (for any route kind): a parent naming
    /// the Gateway has the condition (status, and reason unless "").
    pub async fn route_condition(
        &self,
        (kind, ns, name): (&str, &str, &str),
        (gw_ns, gw): (&str, &str),
        (type_, status, reason): (&str, &str, &str),
    ) {
        self.wait_for(
            (GW, kind, ns, name),
            &format!("{type_}={status} ({reason}) for {gw}"),
            |r| {
                let parents = r["status"]["parents"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                let generation = &r["metadata"]["generation"];
                let fresh = parents.iter().all(|p| {
                    p["conditions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .all(|c| c["observedGeneration"] == *generation)
                });
                fresh
                    && parents.iter().any(|p| {
                        p["parentRef"]["name"] == gw
                            && (p["parentRef"]["namespace"].is_null()
                                || p["parentRef"]["namespace"] == gw_ns)
                            && has(&p["conditions"], type_, status, reason)
                    })
            },
        )
        .await;
    }

    /// `ResolvedRefs` True on the route's parent naming the Gateway.
    pub async fn route_resolved(&self, (kind, ns, name): (&str, &str, &str), gw: (&str, &str)) {
        self.route_condition(
            (kind, ns, name),
            gw,
            ("ResolvedRefs", "True", "ResolvedRefs"),
        )
        .await;
    }

    /// The suite's `GatewayMustHaveLatestConditions` then `GatewayMustHaveCondition`.
    pub async fn gateway_condition(
        &self,
        (ns, name): (&str, &str),
        (type_, status, reason): (&str, &str, &str),
    ) {
        self.wait_for(
            (GW, "Gateway", ns, name),
            &format!("{type_}={status} ({reason})"),
            |g| fresh(g) && has(&g["status"]["conditions"], type_, status, reason),
        )
        .await;
    }

    /// The suite's `GatewayListenerMustHaveConditions`: listener `listener` has every
    /// condition (type, status, reason unless "").
    pub async fn listener_conditions(
        &self,
        (ns, name): (&str, &str),
        listener: &str,
        conditions: &[(&str, &str, &str)],
    ) {
        self.wait_for(
            (GW, "Gateway", ns, name),
            &format!("listener {listener}: {conditions:?}"),
            |g| {
                g["status"]["listeners"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|l| l["name"] == listener)
                    .is_some_and(|l| {
                        conditions
                            .iter()
                            .all(|(t, s, r)| has(&l["conditions"], t, s, r))
                    })
            },
        )
        .await;
    }

    /// The suite's `HTTPRouteMustHaveNoAcceptedParents` (any route kind): the route's one
    /// parent entry, of its current generation, is not `Accepted`.
    pub async fn no_accepted_parents(&self, (kind, ns, name): (&str, &str, &str)) {
        self.wait_for(
            (GW, kind, ns, name),
            "exactly one parent, not Accepted",
            |r| {
                let parents = r["status"]["parents"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                let generation = &r["metadata"]["generation"];
                parents.len() == 1
                    && parents[0]["conditions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .all(|c| c["observedGeneration"] == *generation)
                    && has(&parents[0]["conditions"], "Accepted", "False", "")
            },
        )
        .await;
    }

    /// The suite's `GatewayMustHaveZeroRoutes`: the Gateway's one listener counts no
    /// route.
    pub async fn zero_routes(&self, (ns, name): (&str, &str)) {
        self.wait_for((GW, "Gateway", ns, name), "no attached route", |g| {
            let listeners = g["status"]["listeners"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            fresh(g)
                && (listeners.is_empty()
                    || (listeners.len() == 1 && listeners[0]["attachedRoutes"] == 0))
        })
        .await;
    }

    /// The suite's `GatewayStatusMustHaveListeners`: exactly these listeners, each with
    /// (at least) these route kinds (none when empty), this many attached routes and
    /// these conditions.
    pub async fn listeners_exactly(&self, gateway: (&str, &str), expected: &[Listener<'_>]) {
        self.listeners_exactly_of("Gateway", gateway, expected)
            .await;
    }

    /// [`Suite::listeners_exactly`] of a Gateway or a ListenerSet (`kind`).
    pub async fn listeners_exactly_of(
        &self,
        kind: &str,
        (ns, name): (&str, &str),
        expected: &[Listener<'_>],
    ) {
        self.wait_for(
            (GW, kind, ns, name),
            &format!("listeners {expected:?}"),
            |g| {
                let listeners = g["status"]["listeners"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                fresh(g)
                    && listeners.len() == expected.len()
                    && expected.iter().all(|e| {
                        listeners
                            .iter()
                            .find(|l| l["name"] == e.name)
                            .is_some_and(|l| {
                                let kinds: Vec<&str> = l["supportedKinds"]
                                    .as_array()
                                    .into_iter()
                                    .flatten()
                                    .filter_map(|k| k["kind"].as_str())
                                    .collect();
                                let kinds_ok = if e.kinds.is_empty() {
                                    kinds.is_empty()
                                } else {
                                    e.kinds.iter().all(|k| kinds.contains(k))
                                };
                                kinds_ok
                                    && l["attachedRoutes"] == e.attached
                                    && e.conditions
                                        .iter()
                                        .all(|(t, s, r)| has(&l["conditions"], t, s, r))
                            })
                    })
            },
        )
        .await;
    }

    /// The suite's `TestWeightedDistribution`: up to ten attempts, each 500 requests
    /// (what `attempt` sends and counts by backend), until one splits as `weights` say.
    pub async fn weights_hold<F, Fut>(&self, weights: &[(&str, f64)], mut attempt: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<BTreeMap<String, usize>, String>>,
    {
        let mut last = String::new();
        for _ in 0..10 {
            match attempt().await {
                Ok(counts) => match off_weights(&counts, weights, 500) {
                    None => return,
                    Some(off) => last = off,
                },
                Err(e) => last = e,
            }
        }
        panic!("no attempt matched the weights: {last}\n{}", self.logs());
    }

    /// Requests through Envoy until `expect` holds three times in a row (plain HTTP).
    pub async fn expect(&self, addr: SocketAddr, expect: &Expect) {
        self.expect_over(addr, &Protocol::Http, expect).await;
    }

    /// [`Suite::expect`] over `protocol`.
    pub async fn expect_over(&self, addr: SocketAddr, protocol: &Protocol, expect: &Expect) {
        if let Err(e) = client::eventually(addr, protocol, expect).await {
            let dump = self.admin("/config_dump").await;
            let _ = std::fs::write("/tmp/conformance-dump.json", &dump);
            panic!("{e}\n{}", self.logs());
        }
    }

    /// TLS to the HTTPS listeners as the suite's client speaks it: SNI `server_name`,
    /// trusting the listeners' certificate.
    pub fn https(&self, server_name: &str) -> Tls {
        Tls::new(server_name, &[self.certs.validity.der()])
    }

    /// Every resource Envoy took, none refused: its `update_rejected` counters are 0.
    pub async fn assert_nothing_rejected(&self) {
        let stats = self.admin("/stats").await;
        let refused: Vec<&str> = stats
            .lines()
            .filter(|l| l.contains("update_rejected") && !l.ends_with(": 0"))
            .collect();
        assert!(
            refused.is_empty(),
            "Envoy refused updates: {refused:?}\n{}",
            self.logs()
        );
    }

    /// GET `path` from Envoy's admin (on its unix socket).
    /// A policy's status as the suite's `BackendTLSPolicyMustHaveCondition` wants it:
    /// every ancestor's conditions are of the policy's generation and the ancestor naming
    /// Gateway `gw` (of the infra namespace) has the condition.
    pub async fn policy_condition(
        &self,
        (api_version, kind, name): (&str, &str, &str),
        gw: &str,
        (type_, status, reason): (&str, &str, &str),
    ) {
        self.wait_for(
            (api_version, kind, INFRA, name),
            &format!("{type_}={status} ({reason}) on {gw}"),
            |p| {
                let generation = &p["metadata"]["generation"];
                let ancestors = p["status"]["ancestors"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                ancestors.iter().all(|a| {
                    a["conditions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .all(|c| c["observedGeneration"] == *generation)
                }) && ancestors.iter().any(|a| {
                    a["ancestorRef"]["name"] == gw
                        && (a["ancestorRef"]["namespace"].is_null()
                            || a["ancestorRef"]["namespace"] == INFRA)
                        && has(&a["conditions"], type_, status, reason)
                })
            },
        )
        .await;
    }

    pub async fn admin(&self, path: &str) -> String {
        crate::support::admin_get(&self.dir.path().join("admin.sock"), path).await
    }
}

impl Drop for Suite {
    fn drop(&mut self) {
        if let Some(controller) = self.controller.take() {
            drop(controller);
        }
    }
}

/// Why `counts` of `n` miss the weights (0.05 either way, exactly the backends of
/// non-zero weight reached); `None` when they match.
pub fn off_weights(
    counts: &BTreeMap<String, usize>,
    weights: &[(&str, f64)],
    n: usize,
) -> Option<String> {
    let mut off = Vec::new();
    for (backend, weight) in weights {
        let share = counts.get(*backend).copied().unwrap_or(0) as f64 / n as f64;
        if (share - weight).abs() > 0.05 || (*weight == 0.0) != (share == 0.0) {
            off.push(format!("{backend}: {share} (weight {weight})"));
        }
    }
    for backend in counts.keys() {
        if !weights.iter().any(|(w, _)| w == backend) {
            off.push(format!("unexpected backend {backend}"));
        }
    }
    (!off.is_empty()).then(|| off.join("; "))
}

/// How many of `n` answers (ten sent at a time by `send`, each naming its backend) each
/// backend gave; the first failure otherwise.
pub async fn backend_counts<F, Fut>(
    n: usize,
    mut send: F,
) -> Result<BTreeMap<String, usize>, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<String, String>>,
{
    let mut counts = BTreeMap::new();
    for batch in 0..n.div_ceil(10) {
        let sends: Vec<Fut> = (0..10.min(n - batch * 10)).map(|_| send()).collect();
        for backend in futures::future::join_all(sends).await {
            *counts.entry(backend?).or_insert(0) += 1;
        }
    }
    Ok(counts)
}

/// A listener as [`Suite::listeners_exactly`] expects it.
#[derive(Debug)]
pub struct Listener<'a> {
    pub name: &'a str,
    pub kinds: &'a [&'a str],
    pub attached: u32,
    pub conditions: &'a [(&'a str, &'a str, &'a str)],
}

/// Whether every one of an object's own conditions is of its current generation.
pub fn fresh(object: &Value) -> bool {
    let generation = &object["metadata"]["generation"];
    object["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|c| c["observedGeneration"] == *generation)
}

/// Whether `conditions` has one of `type_` with `status` (and `reason` unless "").
pub fn has(conditions: &Value, type_: &str, status: &str, reason: &str) -> bool {
    conditions.as_array().into_iter().flatten().any(|c| {
        c["type"] == type_ && c["status"] == status && (reason.is_empty() || c["reason"] == reason)
    })
}

/// A route's `status.parents[]` entry of this controller naming the parent `gw_ns/gw`
/// of `kind` (with group and kind written out, as the suite compares them).
pub fn parent_of<'a>(route: &'a Value, gw_ns: &str, gw: &str, kind: &str) -> Option<&'a Value> {
    let same_namespace = route["metadata"]["namespace"] == gw_ns;
    route["status"]["parents"].as_array()?.iter().find(|p| {
        let r = &p["parentRef"];
        p["controllerName"] == CONTROLLER
            && r["group"] == "gateway.networking.k8s.io"
            && r["kind"] == kind
            && r["name"] == gw
            && (r["namespace"] == gw_ns || (same_namespace && r["namespace"].is_null()))
    })
}
