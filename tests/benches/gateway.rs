//! The Gateway API profile: one Gateway (an HTTP listener and an HTTPS listener for
//! `*.secure.example.com` with one wildcard certificate, routes from every namespace),
//! N HTTPRoutes in N namespaces (2 rules each; every other one under the HTTPS
//! listener's wildcard, so on both listeners), N Services and N EndpointSlices.
//!
//! - cold start: every object handed to the runner `isobar serve` runs → first snapshot;
//! - a route's timeout edited, a route added: provider event → the next snapshot
//!   published (built alone and spliced in), p50 / p99, and the bytes that changed; and
//!   the same edits → the response carrying them read by a simulated Envoy on a delta
//!   ADS stream (as the 10k profile measures);
//! - the real `isobar serve --manifests` process: resident memory once it serves.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use isobar::cli::serve::envoy_settings;
use isobar::config::Config;
use isobar::metrics::Metrics;
use isobar::provider::Event;
use isobar::provider::manifest::parse_file;
use isobar::runner::Runner;
use isobar::runner::pipeline::Pipeline;
use isobar::xds::{Snapshot, XdsType};
use tokio::sync::{mpsc, watch};

use crate::support::ServePorts;

const CONFIG: &str = "gateway:\n  controllerName: projectcontour.io/gateway-controller\n";

fn gateway() -> String {
    let params = rcgen::CertificateParams::new(vec!["*.secure.example.com".to_string()])
        .unwrap_or_else(|e| panic!("{e}"));
    let key = rcgen::KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
    let cert = params.self_signed(&key).unwrap_or_else(|e| panic!("{e}"));
    format!(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: isobar}}
spec: {{controllerName: projectcontour.io/gateway-controller}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: infra}}
spec:
  gatewayClassName: isobar
  listeners:
    - {{name: http, protocol: HTTP, port: 80, allowedRoutes: {{namespaces: {{from: All}}}}}}
    - name: https
      protocol: HTTPS
      port: 443
      hostname: "*.secure.example.com"
      allowedRoutes: {{namespaces: {{from: All}}}}
      tls: {{certificateRefs: [{{name: wildcard}}]}}
---
apiVersion: v1
kind: Secret
metadata: {{name: wildcard, namespace: infra}}
type: kubernetes.io/tls
stringData:
  tls.crt: |
{}  tls.key: |
{}"#,
        indent(&cert.pem()),
        indent(&key.serialize_pem())
    )
}

/// Tenant `i`: a Service, its EndpointSlice (3 endpoints) and an HTTPRoute.
fn tenant(i: usize, timeout: usize) -> String {
    let (a, b) = (i / 250, i % 250);
    format!(
        r#"apiVersion: v1
kind: Service
metadata: {{name: app, namespace: t-{i}}}
spec:
  ports: [{{name: http, port: 80, targetPort: 8080}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: app-1
  namespace: t-{i}
  labels: {{kubernetes.io/service-name: app}}
addressType: IPv4
ports: [{{name: http, port: 8080, protocol: TCP}}]
endpoints:
  - {{addresses: ["10.{a}.{b}.1"], conditions: {{ready: true}}}}
  - {{addresses: ["10.{a}.{b}.2"], conditions: {{ready: true}}}}
  - {{addresses: ["10.{a}.{b}.3"], conditions: {{ready: true}}}}
---
{}"#,
        route(i, &host(i), timeout)
    )
}

/// Tenant `i`'s host: every other one under the HTTPS listener's wildcard.
fn host(i: usize) -> String {
    if i.is_multiple_of(2) {
        format!("r{i}.secure.example.com")
    } else {
        format!("r{i}.example.com")
    }
}

fn route(i: usize, host: &str, timeout: usize) -> String {
    format!(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: app, namespace: t-{i}}}
spec:
  parentRefs: [{{name: gw, namespace: infra}}]
  hostnames: [{host}]
  rules:
    - matches: [{{path: {{value: /api}}}}]
      timeouts: {{request: {timeout}s}}
      backendRefs: [{{name: app, port: 80}}]
    - backendRefs: [{{name: app, port: 80}}]
"#
    )
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("    {l}\n")).collect()
}

fn one(text: &str) -> isobar_sdk::Object {
    parse_file(Path::new("change.yaml"), text)
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no object"))
}

fn percentiles(mut samples: Vec<Duration>) -> (f64, f64) {
    samples.sort();
    let at = |q: f64| {
        let i = ((samples.len() as f64 - 1.0) * q).round() as usize;
        samples[i].as_secs_f64() * 1e3
    };
    (at(0.5), at(0.99))
}

/// Bytes of the resources that differ between two snapshots.
fn changed_bytes(before: &Snapshot, after: &Snapshot) -> usize {
    XdsType::ORDER
        .iter()
        .flat_map(|t| {
            let (b, a) = (before.get(*t), after.get(*t));
            a.resources
                .iter()
                .filter(move |(name, value)| b.resources.get(*name) != Some(value))
                .map(|(_, value)| value.len())
                .collect::<Vec<_>>()
        })
        .sum()
}

pub fn run(n: usize, changes: usize, vhds: bool) {
    println!(
        "gateway{}: 1 Gateway (HTTP, HTTPS with a wildcard certificate), {n} HTTPRoutes in {n} namespaces ({} also under the HTTPS listener), {n} Services, {n} EndpointSlices",
        if vhds { " with xds-server.vhds" } else { "" },
        n.div_ceil(2)
    );
    let mut text: Vec<String> = vec![gateway()];
    text.extend((0..n).map(|i| tenant(i, 10)));
    let text = text.join("---\n");
    let started = Instant::now();
    let objects = parse_file(Path::new("gateway.yaml"), &text).unwrap_or_else(|e| panic!("{e}"));
    let decode = started.elapsed();
    let count = objects.len();
    println!(
        "  floor: decode {count} objects from YAML: {:.0} ms",
        decode.as_secs_f64() * 1e3
    );
    // CONFIG, as `isobar serve -c` reads it.
    let mut config = Config {
        gateway: Some(
            serde_json::json!({"controllerName": "projectcontour.io/gateway-controller"}),
        ),
        ..Config::default()
    };
    config.xds_server.vhds = vhds;
    let pipeline = Pipeline::for_config(&config).unwrap_or_else(|e| panic!("{e}"));
    assert!(pipeline.local(), "Gateway API changes must be built alone");
    let (snapshot_tx, snapshots) = watch::channel(None);
    let metrics = Arc::new(Metrics::default());
    let runner = Runner {
        pipeline,
        settings: envoy_settings(&config),
        holdoff: Duration::ZERO,
        holdoff_max: Duration::ZERO,
        metrics: metrics.clone(),
        snapshots: snapshot_tx,
        statuses: None,
        debug: None,
        admission: None,
        hydrate: None,
        rejections: None,
        withheld: Default::default(),
        sharded: Default::default(),
    };
    let runtime = super::runtime();
    runtime.block_on(async move {
        let (events, rx) = mpsc::channel(4096);
        tokio::spawn(runner.run(rx));
        let mut watch = snapshots.clone();
        let started = Instant::now();
        for object in objects {
            let _ = events.send(Event::Apply(object)).await;
        }
        let _ = events.send(Event::Synced).await;
        let _ = watch.wait_for(Option::is_some).await;
        let cold = started.elapsed();
        let first = watch.borrow_and_update().clone().unwrap_or_else(|| panic!("no snapshot"));
        let routes = first.get(XdsType::Route).resources.len();
        println!(
            "  cold start: objects handed to the runner → first complete snapshot: {:.0} ms; {routes} RouteConfigurations",
            cold.as_secs_f64() * 1e3
        );
        // One change at a time: event → the next snapshot.
        let mut change = async |object: isobar_sdk::Object| {
            let before = watch.borrow_and_update().clone().unwrap_or_else(|| panic!("no snapshot"));
            let started = Instant::now();
            let _ = events.send(Event::Apply(object)).await;
            let _ = watch.changed().await;
            let took = started.elapsed();
            let after = watch.borrow_and_update().clone().unwrap_or_else(|| panic!("no snapshot"));
            (took, changed_bytes(&before, &after))
        };
        let spliced = metrics.spliced_builds.get();
        let (mut edits, mut edit_bytes) = (Vec::new(), 0);
        for k in 0..changes {
            let i = (k * 7919) % n;
            let (took, bytes) = change(one(&route(i, &host(i), 11 + k))).await;
            edits.push(took);
            edit_bytes = edit_bytes.max(bytes);
        }
        let (mut adds, mut add_bytes) = (Vec::new(), 0);
        for k in 0..changes {
            let i = n + k;
            let (took, bytes) = change(one(&route(i, &format!("r{i}.example.com"), 10))).await;
            adds.push(took);
            add_bytes = add_bytes.max(bytes);
        }
        let spliced = metrics.spliced_builds.get() - spliced;
        // The same edits through a delta ADS stream: event → the response read.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let service = isobar::xds::server::AdsService::new(snapshots.clone(), Arc::new(Metrics::default()))
            .into_server();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(isobar::xds::server::incoming(listener)),
        );
        let client = crate::perf::Client::connect_delta(addr, snapshots.clone()).await;
        client.settle(Duration::from_millis(500)).await;
        let mut streamed = Vec::new();
        let mut streamed_bytes = 0;
        for k in 0..changes {
            let i = (k * 7919) % n;
            let (t, name) = if vhds {
                (XdsType::VirtualHost, format!("ingress_http/{}", host(i)))
            } else {
                (XdsType::Route, "ingress_http".to_string())
            };
            let since = Instant::now();
            let _ = events.send(Event::Apply(one(&route(i, &host(i), 11 + changes + k)))).await;
            let at = client
                .until(since, t, &name, Duration::from_secs(30))
                .await
                .unwrap_or_else(|| panic!("{name} never arrived"));
            client.settle(Duration::from_millis(30)).await;
            streamed.push(at - since);
            streamed_bytes = streamed_bytes.max(client.bytes_since(since));
        }
        let (p50, p99) = percentiles(streamed);
        println!(
            "  a route's timeout edited: event → response read over delta p50 {p50:.2} / p99 {p99:.2} ms; at most {streamed_bytes} B sent"
        );
        let (p50, p99) = percentiles(edits);
        println!(
            "  a route's timeout edited: event → snapshot p50 {p50:.2} / p99 {p99:.2} ms; at most {edit_bytes} B changed"
        );
        let (p50, p99) = percentiles(adds);
        println!(
            "  a route added: event → snapshot p50 {p50:.2} / p99 {p99:.2} ms; at most {add_bytes} B changed"
        );
        println!("  {spliced} of {} changes built alone", 2 * changes);
    });
    if !vhds {
        resident(&text);
    }
}

/// Resident memory of the real process serving the profile from a manifest directory.
fn resident(text: &str) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let manifests = dir.path().join("manifests");
    std::fs::create_dir_all(&manifests).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(manifests.join("gateway.yaml"), text).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(dir.path().join("contour.yaml"), CONFIG).unwrap_or_else(|e| panic!("{e}"));
    let ports = ServePorts::free();
    let mut command = Command::new(env!("CARGO_BIN_EXE_isobar"));
    // The bench's own settings (ISOBAR_BENCH_…) are not Isobar's.
    for (name, _) in std::env::vars().filter(|(n, _)| n.starts_with("ISOBAR_")) {
        command.env_remove(name);
    }
    let mut child = command
        .args(["serve", "--insecure", "-c"])
        .arg(dir.path().join("contour.yaml"))
        .arg("--manifests")
        .arg(&manifests)
        .args(ports.args())
        .envs(ports.envs())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("isobar: {e}"));
    let started = Instant::now();
    let url = format!("http://127.0.0.1:{}/metrics", ports.metrics);
    let mut ready = None;
    while started.elapsed() < Duration::from_secs(120) {
        let builds = ureq_get(&url)
            .lines()
            .find(|l| l.starts_with("isobar_builds_total"))
            .and_then(|l| l.split_whitespace().last()?.parse::<u64>().ok());
        if builds.is_some_and(|b| b > 0) {
            ready = Some(started.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let ready = ready.unwrap_or_else(|| panic!("isobar never built"));
    std::thread::sleep(Duration::from_secs(2));
    let rss = super::kube::rss_kib(child.id(), "VmRSS:") as f64 / 1024.0;
    println!(
        "  the real process (isobar serve --manifests): first build {:.0} ms after start (decoding the YAML included), resident {rss:.0} MiB",
        ready.as_secs_f64() * 1e3
    );
    let _ = child.kill();
    let _ = child.wait();
}

/// The body of a GET over plain HTTP/1.0 to a loopback URL (empty on failure).
fn ureq_get(url: &str) -> String {
    use std::io::{Read, Write};
    let Some(rest) = url.strip_prefix("http://") else {
        return String::new();
    };
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let Ok(mut stream) = std::net::TcpStream::connect(host) else {
        return String::new();
    };
    let _ = write!(stream, "GET /{path} HTTP/1.0\r\nHost: {host}\r\n\r\n");
    let mut out = String::new();
    let _ = stream.read_to_string(&mut out);
    out
}

/// The same profile read from the Kubernetes API (the test API server, over HTTP) by the
/// real process: its resident memory once the statuses are written; then `burst`
/// HTTPRoutes created at once (each with its Service and EndpointSlice, in namespaces of
/// their own) and the time from the last one created until every one of them has its
/// status written.
pub fn kube(n: usize, burst: usize) {
    use crate::apiserver::ApiServer;
    let runtime = super::runtime();
    runtime.block_on(async {
        let server = ApiServer::start().await;
        let put_all = |text: &str| {
            for document in text.split("\n---\n") {
                if document.trim().is_empty() {
                    continue;
                }
                server.put(document);
            }
        };
        put_all(&gateway());
        for i in 0..n {
            put_all(&tenant(i, 10));
        }
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let kubeconfig = server.kubeconfig(dir.path());
        let config = dir.path().join("contour.yaml");
        std::fs::write(&config, CONFIG).unwrap_or_else(|e| panic!("{e}"));
        let ports = ServePorts::free();
        let log = dir.path().join("isobar.log");
        let started = Instant::now();
        let mut child = super::kube::isobar(super::kube::this_isobar(), None, &log)
            .arg("-c")
            .arg(&config)
            .args(["--kubeconfig", &kubeconfig])
            .args(ports.args())
            .envs(ports.envs())
            .spawn()
            .unwrap_or_else(|e| panic!("isobar: {e}"));
        let ready = super::kube::ready(ports.health, &log).await;
        let route_status = |i: usize| {
            server
                .get("gateway.networking.k8s.io/v1", "HTTPRoute", &format!("t-{i}"), "app")
                .and_then(|r| r["status"]["parents"].as_array().map(|p| !p.is_empty()))
                .unwrap_or(false)
        };
        // Settled: the last tenant's route has its status.
        let settle = Instant::now();
        while !(n == 0 || route_status(n - 1)) && settle.elapsed() < Duration::from_secs(300) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
        let steady = super::kube::rss_kib(child.id(), "VmRSS:") as f64 / 1024.0;
        let peak = super::kube::rss_kib(child.id(), "VmHWM:") as f64 / 1024.0;
        println!(
            "gateway-kube: {n} HTTPRoutes, Services, EndpointSlices on the Kubernetes API: ready {:.0} ms after start; RSS steady {steady:.0} MiB, peak {peak:.0} MiB (statuses written)",
            (ready - started).as_secs_f64() * 1e3
        );
        for i in n..n + burst {
            put_all(&tenant(i, 10));
        }
        let created = Instant::now();
        let mut pending: Vec<usize> = (n..n + burst).collect();
        while !pending.is_empty() && created.elapsed() < Duration::from_secs(120) {
            pending.retain(|i| !route_status(*i));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        println!(
            "  {burst} HTTPRoutes created at once: every status written {:.0} ms after the last was created ({} missing)",
            created.elapsed().as_secs_f64() * 1e3,
            pending.len()
        );
        let _ = child.kill();
        let _ = child.wait();
    });
}
