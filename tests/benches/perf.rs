//! The performance profile ("10k profile"): N HTTPProxies (2 routes each, every other one
//! with TLS and its own certificate), N Services, N EndpointSlices (3 endpoints), N TLS
//! Secrets and 2N unreferenced Secrets. One run reports, beside the floors measured in the
//! same run (decoding the same objects, encoding the same xDS):
//!
//! - cold start: every object handed to the runner → first complete snapshot;
//! - single changes (edit a route of a TLS vhost, of a plain vhost, add a proxy, delete
//!   one, edit a Service's upstream protocol, move an endpoint): the provider event → the response carrying it read by a
//!   simulated Envoy on a real ADS stream, and the bytes each change sent;
//! - endpoint churn: EndpointSlice events at a fixed rate, CPU used by the process and
//!   event → EDS response latency;
//! - fan-out: one endpoint change delivered to many ADS streams.
//!
//! The runner is the one `isobar serve` runs (hold-off disabled); events go straight into
//! it, as a provider would send them.
//!
//! Not run under `cargo bench` (`--bench` absent, i.e. `cargo test --all-targets`), the
//! profile runs small and checks ratios against the floors (see `check`), so CI catches
//! a regression without depending on the machine's speed.

use super::support::cpu_seconds_of;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::listener::v3::Listener;
use envoy_types::pb::envoy::config::route::v3::{RouteConfiguration, VirtualHost};
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::Secret;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DiscoveryRequest, DiscoveryResponse,
};
use isobar::cli::serve::envoy_settings;
use isobar::config::Config;
use isobar::metrics::Metrics;
use isobar::provider::Event;
use isobar::provider::manifest::parse_file;
use isobar::runner::Runner;
use isobar::runner::pipeline::Pipeline;
use isobar::xds::server::AdsService;
use isobar::xds::snapshot::LogPosition;
use isobar::xds::{Snapshot, XdsType};
use isobar_sdk::{Kind, Object, ObjectKey};
use prost::Message;
use tokio::sync::{mpsc, watch};

use super::tenant;

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("    {l}\n")).collect()
}

/// Every `AUTHORIZED`th tenant's vhost (HTTPS) is checked by the ExtensionService
/// `ext/authz` (Contour's `virtualhost.authorization`).
const AUTHORIZED: usize = 20;

/// The first authorized tenant the single changes edit (past those the other single
/// changes touch, at 10k).
const FIRST_AUTHORIZED_EDITED: usize = 1000;

/// The `tls` (and `authorization`) of tenant `i`'s vhost, as a flow mapping's tail.
fn secure_fields(i: usize) -> &'static str {
    if i.is_multiple_of(AUTHORIZED) {
        ", tls: {secretName: cert}, authorization: {extensionRef: {name: authz, namespace: ext}}"
    } else if i.is_multiple_of(2) {
        ", tls: {secretName: cert}"
    } else {
        ""
    }
}

/// The ExtensionService every authorized vhost uses, its Service and endpoints;
/// `strategy` its load balancer policy.
fn extension_service(strategy: &str) -> String {
    format!(
        "apiVersion: projectcontour.io/v1alpha1\nkind: ExtensionService\nmetadata: {{name: authz, namespace: ext}}\nspec:\n  protocol: h2c\n  services: [{{name: authz, port: 9091}}]\n  loadBalancerPolicy: {{strategy: {strategy}}}\n"
    )
}

fn extension_backend() -> String {
    "apiVersion: v1\nkind: Service\nmetadata: {name: authz, namespace: ext}\nspec:\n  ports: [{name: grpc, port: 9091, targetPort: 9091}]\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: authz-1\n  namespace: ext\n  labels: {kubernetes.io/service-name: authz}\naddressType: IPv4\nports: [{name: grpc, port: 9091, protocol: TCP}]\nendpoints:\n  - {addresses: [\"10.255.0.1\"], conditions: {ready: true}}\n".to_string()
}

/// Tenant `i`; even tenants serve HTTPS with their own certificate (made here).
fn tenant_10k(i: usize) -> String {
    let plain = tenant(i);
    if i % 2 == 1 {
        return plain;
    }
    let fqdn = format!("site-{i}.example.com");
    let secure = plain.replace(
        &format!("virtualhost: {{fqdn: {fqdn}}}"),
        &format!("virtualhost: {{fqdn: {fqdn}{}}}", secure_fields(i)),
    );
    let params =
        rcgen::CertificateParams::new(vec![fqdn.clone()]).unwrap_or_else(|e| panic!("{e}"));
    let key = rcgen::KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
    let cert = params.self_signed(&key).unwrap_or_else(|e| panic!("{e}"));
    format!(
        "{secure}---\napiVersion: v1\nkind: Secret\nmetadata: {{name: cert, namespace: ns-{i}}}\ntype: kubernetes.io/tls\nstringData:\n  tls.crt: |\n{}  tls.key: |\n{}",
        indent(&cert.pem()),
        indent(&key.serialize_pem())
    )
}

/// A TLS Secret in tenant `i`'s namespace that nothing references (a certificate's size).
fn unreferenced(i: usize, j: usize) -> String {
    let blob = "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo".repeat(20);
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: spare-{j}, namespace: ns-{i}}}\ntype: kubernetes.io/tls\ndata: {{tls.crt: {blob}, tls.key: {blob}}}\n"
    )
}

fn proxy(i: usize, api_prefix: &str, timeout: usize) -> Object {
    let tls = secure_fields(i);
    let text = format!(
        "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: site, namespace: ns-{i}}}\nspec:\n  virtualhost: {{fqdn: site-{i}.example.com{tls}}}\n  routes:\n    - services: [{{name: app, port: 80}}]\n    - conditions: [{{prefix: {api_prefix}}}]\n      services: [{{name: app, port: 80, weight: 100}}]\n      timeoutPolicy: {{response: {timeout}s}}\n"
    );
    one(&text)
}

/// Tenant `i`'s EndpointSlice with its third endpoint at an address unique to `k`.
fn slice(i: usize, k: usize) -> Object {
    let (a, b) = (i / 256 % 256, i % 256);
    let third = format!("172.16.{}.{}", k / 256 % 256, k % 256);
    one(&format!(
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: app-1\n  namespace: ns-{i}\n  labels: {{kubernetes.io/service-name: app}}\naddressType: IPv4\nports: [{{name: http, port: 8080, protocol: TCP}}]\nendpoints:\n  - {{addresses: [\"10.{a}.{b}.1\"], conditions: {{ready: true}}}}\n  - {{addresses: [\"10.{a}.{b}.2\"], conditions: {{ready: true}}}}\n  - {{addresses: [\"{third}\"], conditions: {{ready: true}}}}\n"
    ))
}

fn one(text: &str) -> Object {
    parse_file(Path::new("change.yaml"), text)
        .unwrap_or_else(|e| panic!("{e}"))
        .remove(0)
}

/// One response as a simulated Envoy read it.
#[derive(Clone)]
struct Seen {
    at: Instant,
    t: XdsType,
    bytes: usize,
    names: Vec<String>,
    /// A state-of-the-world response's version (empty over delta).
    version: String,
}

/// What a simulated Envoy reads of a delta response: the type, the nonce and each
/// resource's name. prost skips the fields a message does not declare without copying
/// them, so the resources' bytes are not decoded: the simulated Envoys share Isobar's
/// process and allocator, and 200 of them decoding every resource of their first sync
/// (≈ 4 GB at 10k) would leave the allocator returning that memory during Isobar's next
/// allocations, a cost a real Envoy's memory does not put on Isobar.
#[derive(Clone, PartialEq, prost::Message)]
struct DeltaRead {
    #[prost(message, repeated, tag = "2")]
    resources: Vec<NameRead>,
    #[prost(string, tag = "4")]
    type_url: String,
    #[prost(string, tag = "5")]
    nonce: String,
    #[prost(string, repeated, tag = "6")]
    removed_resources: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct NameRead {
    #[prost(string, tag = "3")]
    name: String,
}

/// Delta requests out; responses in as their size and what [`DeltaRead`] keeps.
struct ReadCodec;

impl tonic::codec::Codec for ReadCodec {
    type Encode = DeltaDiscoveryRequest;
    type Decode = (usize, DeltaRead);
    type Encoder = ReadCodec;
    type Decoder = ReadCodec;

    fn encoder(&mut self) -> ReadCodec {
        ReadCodec
    }

    fn decoder(&mut self) -> ReadCodec {
        ReadCodec
    }
}

impl tonic::codec::Encoder for ReadCodec {
    type Item = DeltaDiscoveryRequest;
    type Error = tonic::Status;

    fn encode(
        &mut self,
        item: DeltaDiscoveryRequest,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        item.encode(dst)
            .map_err(|e| tonic::Status::internal(e.to_string()))
    }
}

impl tonic::codec::Decoder for ReadCodec {
    type Item = (usize, DeltaRead);
    type Error = tonic::Status;

    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<(usize, DeltaRead)>, tonic::Status> {
        use prost::bytes::Buf;
        let len = src.remaining();
        DeltaRead::decode(src)
            .map(|read| Some((len, read)))
            .map_err(|e| tonic::Status::internal(e.to_string()))
    }
}

/// A simulated Envoy: one ADS stream, subscribed to everything the latest snapshot
/// holds, ACKing every response; what it reads is appended to `seen`.
pub(crate) struct Client {
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Client {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The names of `t` in the latest snapshot that `since` (a position in its change log,
/// moved to the snapshot's) may not have seen: those changed since then, else all of
/// them (none for the wildcard types). Keeps a simulated Envoy's own work per change in
/// proportion to the change, as Envoy's is, so latencies are Isobar's.
fn names_new_since(
    snapshots: &watch::Receiver<Option<Arc<Snapshot>>>,
    t: XdsType,
    since: &mut Option<LogPosition>,
) -> Vec<String> {
    let Some(snapshot) = snapshots.borrow().clone() else {
        return Vec::new();
    };
    if t.is_wildcard() {
        return Vec::new();
    }
    let of = snapshot.get(t);
    let changed = since.and_then(|at| of.changed_since(at));
    *since = Some(of.position());
    match changed {
        Some(names) => names
            .into_iter()
            .filter(|n| of.resources.contains_key(*n))
            .map(|n| n.to_string())
            .collect(),
        None => of.resources.keys().map(|n| n.to_string()).collect(),
    }
}

/// The names of `t` in the latest snapshot (none for the wildcard types).
fn names_of(snapshots: &watch::Receiver<Option<Arc<Snapshot>>>, t: XdsType) -> Vec<String> {
    if t.is_wildcard() {
        return Vec::new();
    }
    let snapshot = snapshots.borrow().clone();
    snapshot
        .map(|s| s.get(t).resources.keys().map(|n| n.to_string()).collect())
        .unwrap_or_default()
}

/// The name a resource carries, read from its bytes (field 1 of every type served).
fn resource_name(t: XdsType, value: &[u8]) -> String {
    match t {
        XdsType::Cluster => Cluster::decode(value).map(|r| r.name),
        XdsType::Endpoint => ClusterLoadAssignment::decode(value).map(|r| r.cluster_name),
        XdsType::Secret => Secret::decode(value).map(|r| r.name),
        XdsType::Listener => Listener::decode(value).map(|r| r.name),
        XdsType::Route | XdsType::VhdsRoute => RouteConfiguration::decode(value).map(|r| r.name),
        XdsType::VirtualHost => VirtualHost::decode(value).map(|r| r.name),
        XdsType::ScopedRoute => {
            envoy_types::pb::envoy::config::route::v3::ScopedRouteConfiguration::decode(value)
                .map(|r| r.name)
        }
        XdsType::Runtime => {
            envoy_types::pb::envoy::service::runtime::v3::Runtime::decode(value).map(|r| r.name)
        }
    }
    .unwrap_or_default()
}

/// An ADS client on `addr` that takes responses of any size.
async fn ads_client(
    addr: std::net::SocketAddr,
) -> AggregatedDiscoveryServiceClient<tonic::transport::Channel> {
    AggregatedDiscoveryServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"))
        .max_decoding_message_size(usize::MAX)
}

impl Client {
    async fn connect(
        addr: std::net::SocketAddr,
        snapshots: watch::Receiver<Option<Arc<Snapshot>>>,
    ) -> Client {
        let mut ads = ads_client(addr).await;
        let (requests, rx) = mpsc::unbounded_channel::<DiscoveryRequest>();
        let mut responses = ads
            .stream_aggregated_resources(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))
            .await
            .unwrap_or_else(|e| panic!("stream: {e}"))
            .into_inner();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        let names_of = move |t: XdsType| names_of(&snapshots, t);
        let mut asked: BTreeMap<XdsType, Vec<String>> = BTreeMap::new();
        // VHDS is delta only.
        for t in XdsType::ORDER
            .into_iter()
            .filter(|t| *t != XdsType::VirtualHost)
        {
            let names = names_of(t);
            asked.insert(t, names.clone());
            let _ = requests.send(DiscoveryRequest {
                type_url: t.type_url().to_string(),
                resource_names: names,
                ..Default::default()
            });
        }
        let task = tokio::spawn(async move {
            while let Ok(Some(response)) = responses.message().await {
                let at = Instant::now();
                let Some(t) = XdsType::from_type_url(&response.type_url) else {
                    continue;
                };
                let names = response
                    .resources
                    .iter()
                    .map(|any| resource_name(t, &any.value))
                    .collect();
                let bytes = DiscoveryResponse::encoded_len(&response);
                if let Ok(mut seen) = record.lock() {
                    seen.push(Seen {
                        at,
                        t,
                        bytes,
                        names,
                        version: response.version_info.clone(),
                    });
                }
                // ACK; after clusters or listeners, follow new names as Envoy would.
                let mut follow = vec![t];
                if matches!(t, XdsType::Cluster | XdsType::Listener) {
                    follow.extend([XdsType::Endpoint, XdsType::Secret, XdsType::Route]);
                }
                for f in follow {
                    let names = names_of(f);
                    if f != t && asked.get(&f) == Some(&names) {
                        continue;
                    }
                    asked.insert(f, names.clone());
                    let (version, nonce) = if f == t {
                        (response.version_info.clone(), response.nonce.clone())
                    } else {
                        (String::new(), String::new())
                    };
                    let _ = requests.send(DiscoveryRequest {
                        type_url: f.type_url().to_string(),
                        resource_names: names,
                        version_info: version,
                        response_nonce: nonce,
                        ..Default::default()
                    });
                }
            }
        });
        Client { seen, task }
    }

    /// The same over a delta (incremental) stream: subscribes by name, ACKs by nonce,
    /// and after clusters or listeners subscribes to the names that are new.
    pub(crate) async fn connect_delta(
        addr: std::net::SocketAddr,
        snapshots: watch::Receiver<Option<Arc<Snapshot>>>,
    ) -> Client {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap_or_else(|e| panic!("{e}"))
            .connect()
            .await
            .unwrap_or_else(|e| panic!("connect: {e}"));
        let mut grpc = tonic::client::Grpc::new(channel).max_decoding_message_size(usize::MAX);
        grpc.ready()
            .await
            .unwrap_or_else(|e| panic!("connect: {e}"));
        let (requests, rx) = mpsc::unbounded_channel::<DeltaDiscoveryRequest>();
        let mut responses = grpc
            .streaming(
                tonic::Request::new(tokio_stream::wrappers::UnboundedReceiverStream::new(rx)),
                tonic::codegen::http::uri::PathAndQuery::from_static(
                    "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources",
                ),
                ReadCodec,
            )
            .await
            .unwrap_or_else(|e| panic!("stream: {e}"))
            .into_inner();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        let mut asked: BTreeMap<XdsType, BTreeSet<String>> = BTreeMap::new();
        let mut looked: BTreeMap<XdsType, Option<LogPosition>> = BTreeMap::new();
        for t in XdsType::ORDER {
            let names = names_new_since(&snapshots, t, looked.entry(t).or_default());
            asked.insert(t, names.iter().cloned().collect());
            let _ = requests.send(DeltaDiscoveryRequest {
                type_url: t.type_url().to_string(),
                resource_names_subscribe: names,
                ..Default::default()
            });
        }
        let task = tokio::spawn(async move {
            while let Ok(Some((bytes, response))) = responses.message().await {
                let at = Instant::now();
                let Some(t) = XdsType::from_type_url(&response.type_url) else {
                    continue;
                };
                // The names a response touches: put or removed.
                let names = response
                    .resources
                    .into_iter()
                    .map(|r| r.name)
                    .chain(response.removed_resources)
                    .collect();
                if let Ok(mut seen) = record.lock() {
                    seen.push(Seen {
                        at,
                        t,
                        bytes,
                        names,
                        version: String::new(),
                    });
                }
                let _ = requests.send(DeltaDiscoveryRequest {
                    type_url: response.type_url.clone(),
                    response_nonce: response.nonce.clone(),
                    ..Default::default()
                });
                if matches!(t, XdsType::Cluster | XdsType::Listener) {
                    for f in [XdsType::Endpoint, XdsType::Secret, XdsType::Route] {
                        let held = asked.entry(f).or_default();
                        let new: Vec<String> =
                            names_new_since(&snapshots, f, looked.entry(f).or_default())
                                .into_iter()
                                .filter(|n| !held.contains(n))
                                .collect();
                        if new.is_empty() {
                            continue;
                        }
                        held.extend(new.iter().cloned());
                        let _ = requests.send(DeltaDiscoveryRequest {
                            type_url: f.type_url().to_string(),
                            resource_names_subscribe: new,
                            ..Default::default()
                        });
                    }
                }
            }
        });
        Client { seen, task }
    }

    /// Waits for a response of type `t` naming `name` read after `since`; returns when.
    pub(crate) async fn until(
        &self,
        since: Instant,
        t: XdsType,
        name: &str,
        limit: Duration,
    ) -> Option<Instant> {
        self.until_not(since, t, name, limit, "").await
    }

    /// [`Client::until`], skipping state-of-the-world responses of version `stale` (the
    /// one served before the change: a large one sent before it may be read after it).
    pub(crate) async fn until_not(
        &self,
        since: Instant,
        t: XdsType,
        name: &str,
        limit: Duration,
        stale: &str,
    ) -> Option<Instant> {
        let deadline = Instant::now() + limit;
        loop {
            if let Ok(seen) = self.seen.lock()
                && let Some(s) = seen.iter().find(|s| {
                    s.at >= since
                        && s.t == t
                        && (stale.is_empty() || s.version != stale)
                        && s.names.iter().any(|n| n == name)
                })
            {
                return Some(s.at);
            }
            if Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
    }

    /// Bytes read since `since`, by type.
    fn bytes_by_type(&self, since: Instant) -> BTreeMap<XdsType, usize> {
        let mut out = BTreeMap::new();
        if let Ok(seen) = self.seen.lock() {
            for s in seen.iter().filter(|s| s.at >= since) {
                *out.entry(s.t).or_default() += s.bytes;
            }
        }
        out
    }

    /// Bytes read since `since`.
    pub(crate) fn bytes_since(&self, since: Instant) -> usize {
        self.seen
            .lock()
            .map(|seen| seen.iter().filter(|s| s.at >= since).map(|s| s.bytes).sum())
            .unwrap_or(0)
    }

    /// Waits until nothing has arrived for `quiet`.
    pub(crate) async fn settle(&self, quiet: Duration) {
        settle(&self.seen, quiet).await;
    }
}

/// Waits until nothing has arrived in `seen` for `quiet`.
async fn settle(seen: &Mutex<Vec<Seen>>, quiet: Duration) {
    loop {
        tokio::time::sleep(quiet / 4).await;
        let last = seen.lock().ok().and_then(|s| s.last().map(|s| s.at));
        if last.is_none_or(|at| at.elapsed() >= quiet) {
            return;
        }
    }
}

/// A simulated Envoy driven by a thread and runtime of its own, so that the CPU it uses
/// can be told apart from the server's.
struct Apart {
    seen: Arc<Mutex<Vec<Seen>>>,
    /// Its thread's `/proc/self/task/<tid>/stat`.
    stat: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Apart {
    fn start(
        addr: std::net::SocketAddr,
        snapshots: watch::Receiver<Option<Arc<Snapshot>>>,
        delta: bool,
    ) -> Apart {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap_or_else(|e| panic!("{e}"));
            runtime.block_on(async move {
                let client = if delta {
                    Client::connect_delta(addr, snapshots).await
                } else {
                    Client::connect(addr, snapshots).await
                };
                client.settle(Duration::from_millis(500)).await;
                let me = std::fs::read_link("/proc/thread-self").unwrap_or_default();
                let tid = me
                    .file_name()
                    .map(|t| t.to_string_lossy().to_string())
                    .unwrap_or_default();
                let _ = ready_tx.send((client.seen.clone(), format!("/proc/self/task/{tid}/stat")));
                let _ = stopped.await;
            });
        });
        let (seen, stat) = ready_rx
            .recv()
            .unwrap_or_else(|e| panic!("simulated Envoy: {e}"));
        Apart {
            seen,
            stat,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    fn cpu_seconds(&self) -> f64 {
        cpu_seconds_of(&self.stat)
    }

    /// Waits until nothing has arrived for `quiet`.
    async fn settle(&self, quiet: Duration) {
        settle(&self.seen, quiet).await;
    }
}

impl Drop for Apart {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn cpu_seconds() -> f64 {
    cpu_seconds_of("/proc/self/stat")
}

fn percentiles(mut samples: Vec<Duration>) -> (f64, f64, f64) {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let n = samples.len().max(1);
    let at = |q: f64| ms(samples[((n as f64 * q).ceil() as usize).clamp(1, n) - 1]);
    (
        at(0.5),
        at(0.99),
        ms(*samples.last().unwrap_or(&Duration::ZERO)),
    )
}

/// Figures the CI check compares.
struct Figures {
    decode_floor: Duration,
    encode_floor: Duration,
    cold_start: Duration,
    eds_change_p99: f64,
    churn_p99_delta: f64,
    churn_missing: usize,
    route_change_bytes_tls: usize,
    /// The most bytes one Service edit sent over delta (its cluster replaced, one TLS
    /// vhost's routes).
    service_change_bytes: usize,
    /// Over VHDS: the most bytes one plain vhost's route change sent.
    route_change_bytes_plain_vhds: Option<usize>,
    /// A route's timeout on a vhost with authorization: the median bytes one edit sent,
    /// and the p99 of event → response (first stream kind).
    authorized_change_bytes: usize,
    authorized_change_p99: f64,
    /// The most bytes one ExtensionService edit sent over delta.
    extension_change_bytes: usize,
}

/// `vhds`: with `xds-server.vhds` (delta streams only; a plain vhost's change is awaited
/// as its `VirtualHost`, not as `ingress_http`).
pub fn run(n: usize, benching: bool, vhds: bool) {
    // 200 of each kind of change when benching (at least 200 per figure);
    // `ISOBAR_BENCH_CHANGES` sets another count.
    let each = std::env::var("ISOBAR_BENCH_CHANGES")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(if benching { 200 } else { 5 });
    let changes = 4 * each.max(1);
    let churn_rate = 200.0;
    let churn_seconds = if benching {
        std::env::var("ISOBAR_BENCH_CHURN_SECONDS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(60.0)
    } else {
        2.0
    };
    // `ISOBAR_BENCH_FANOUT` sets how many streams the fan-out connects (each holds a
    // whole copy of the snapshot: fewer at 100,000 objects).
    let fanout = std::env::var("ISOBAR_BENCH_FANOUT")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(if benching { 200 } else { 20 });
    println!(
        "perf{}: {n} HTTPProxies (2 routes, {} with TLS, {} of those with authorization by one ExtensionService), {n} Services, {n} EndpointSlices (3 endpoints), {} referenced TLS Secrets, {} unreferenced",
        if vhds { " with xds-server.vhds" } else { "" },
        n.div_ceil(2),
        n.div_ceil(AUTHORIZED),
        n.div_ceil(2),
        2 * n
    );
    let started = Instant::now();
    let mut text: Vec<String> = (0..n).map(tenant_10k).collect();
    text.extend((0..n).flat_map(|i| [unreferenced(i, 0), unreferenced(i, 1)]));
    text.push(extension_service("RoundRobin"));
    text.push(extension_backend());
    let text = text.join("---\n");
    println!(
        "  generated {:.1} MB of YAML (certificates made with rcgen, not timed): {:.0} ms",
        text.len() as f64 / 1e6,
        started.elapsed().as_secs_f64() * 1e3
    );

    // Floor 1: decoding the objects.
    let started = Instant::now();
    let objects = parse_file(Path::new("perf.yaml"), &text).unwrap_or_else(|e| panic!("{e}"));
    let decode_floor = started.elapsed();
    let count = objects.len();
    drop(text);
    println!(
        "  floor: decode {count} objects from YAML: {:.0} ms ({:.1} µs per object)",
        decode_floor.as_secs_f64() * 1e3,
        decode_floor.as_secs_f64() * 1e6 / count as f64
    );

    let mut config = Config::default();
    config.xds_server.vhds = vhds;
    let pipeline = Pipeline::for_config(&config).unwrap_or_else(|e| panic!("{e}"));
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
    let figures = runtime.block_on(async move {
        let (events, rx) = mpsc::channel(4096);
        tokio::spawn(runner.run(rx));
        let mut watch = snapshots.clone();

        // Cold start: every object to the runner → the first snapshot.
        let started = Instant::now();
        for object in objects {
            let _ = events.send(Event::Apply(object)).await;
        }
        let _ = events.send(Event::Synced).await;
        let _ = watch.wait_for(Option::is_some).await;
        let cold_start = started.elapsed();
        let snapshot = watch.borrow().clone().unwrap_or_else(|| panic!("no snapshot"));
        let resources: usize = XdsType::ORDER
            .iter()
            .map(|t| snapshot.get(*t).resources.len())
            .sum();
        let size: usize = XdsType::ORDER
            .iter()
            .flat_map(|t| snapshot.get(*t).resources.values())
            .map(|a| a.len())
            .sum();
        println!(
            "  cold start: objects handed to the runner → first complete snapshot: {:.0} ms ({:.2}× the decode floor); {resources} resources, {:.1} MB",
            cold_start.as_secs_f64() * 1e3,
            cold_start.as_secs_f64() / decode_floor.as_secs_f64(),
            size as f64 / 1e6
        );

        // Floor 2: encoding the same xDS (decoded here, untimed, then encoded).
        let decoded: Vec<(XdsType, Vec<u8>)> = XdsType::ORDER
            .iter()
            .flat_map(|t| {
                snapshot
                    .get(*t)
                    .resources
                    .values()
                    .map(|a| (*t, a.to_vec()))
                    .collect::<Vec<_>>()
            })
            .collect();
        let clusters: Vec<Cluster> = decoded.iter().filter(|(t, _)| *t == XdsType::Cluster).filter_map(|(_, b)| Cluster::decode(b.as_slice()).ok()).collect();
        let loads: Vec<ClusterLoadAssignment> = decoded.iter().filter(|(t, _)| *t == XdsType::Endpoint).filter_map(|(_, b)| ClusterLoadAssignment::decode(b.as_slice()).ok()).collect();
        let secrets: Vec<Secret> = decoded.iter().filter(|(t, _)| *t == XdsType::Secret).filter_map(|(_, b)| Secret::decode(b.as_slice()).ok()).collect();
        let listeners: Vec<Listener> = decoded.iter().filter(|(t, _)| *t == XdsType::Listener).filter_map(|(_, b)| Listener::decode(b.as_slice()).ok()).collect();
        let routes: Vec<RouteConfiguration> = decoded.iter().filter(|(t, _)| *t == XdsType::Route).filter_map(|(_, b)| RouteConfiguration::decode(b.as_slice()).ok()).collect();
        let vhosts: Vec<VirtualHost> = decoded.iter().filter(|(t, _)| *t == XdsType::VirtualHost).filter_map(|(_, b)| VirtualHost::decode(b.as_slice()).ok()).collect();
        drop(decoded);
        let started = Instant::now();
        let mut encoded = 0usize;
        encoded += clusters.iter().map(|m| m.encode_to_vec().len()).sum::<usize>();
        encoded += loads.iter().map(|m| m.encode_to_vec().len()).sum::<usize>();
        encoded += secrets.iter().map(|m| m.encode_to_vec().len()).sum::<usize>();
        encoded += listeners.iter().map(|m| m.encode_to_vec().len()).sum::<usize>();
        encoded += routes.iter().map(|m| m.encode_to_vec().len()).sum::<usize>();
        encoded += vhosts.iter().map(|m| m.encode_to_vec().len()).sum::<usize>();
        let encode_floor = started.elapsed();
        println!(
            "  floor: encode the same {resources} resources with prost: {:.0} ms ({:.1} MB)",
            encode_floor.as_secs_f64() * 1e3,
            encoded as f64 / 1e6
        );
        println!(
            "  cold start / (decode + encode floors): {:.2}×",
            cold_start.as_secs_f64() / (decode_floor + encode_floor).as_secs_f64()
        );
        drop((clusters, loads, secrets, listeners, routes, vhosts));

        // One simulated Envoy on a real ADS stream.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let service = AdsService::new(snapshots.clone(), Arc::new(Metrics::default())).into_server();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(isobar::xds::server::incoming(listener)),
        );
        // (Over VHDS, state-of-the-world streams are refused: delta only.)
        let mut sotw = None;
        if !vhds {
            let client = Client::connect(addr, snapshots.clone()).await;
            client.settle(Duration::from_millis(500)).await;
            let synced_bytes = client.bytes_since(started);
            println!("  initial sync of one stream: {:.1} MB", synced_bytes as f64 / 1e6);
            sotw = Some(client);
        }
        // Where a plain vhost's change shows: its shard when the listener's routes are
        // split (`xds-server.route-shards-from`), else its own VirtualHost over VHDS, else
        // the whole `ingress_http`.
        let shards = snapshots.borrow().as_ref().map_or(0, |snapshot| {
            let prefix = isobar::xds::shard::shard_name("ingress_http", 0);
            let prefix = prefix.trim_end_matches('0');
            snapshot
                .get(XdsType::Route)
                .resources
                .keys()
                .filter(|name| name.starts_with(prefix))
                .count()
        });
        if shards > 0 {
            println!("  ingress_http's routes in {shards} shards");
        }
        let plain = |fqdn: String| {
            if shards > 0 {
                let k = isobar::xds::shard::shard_of(&fqdn, shards);
                (XdsType::Route, isobar::xds::shard::shard_name("ingress_http", k))
            } else if vhds {
                (XdsType::VirtualHost, format!("ingress_http/{fqdn}"))
            } else {
                (XdsType::Route, "ingress_http".to_string())
            }
        };

        // Single changes: event → the response carrying it, and bytes per change.
        let report = |title: &str, samples: Vec<Duration>, bytes: Vec<usize>| {
            let (p50, p99, max) = percentiles(samples.clone());
            let mut bytes = bytes;
            bytes.sort();
            println!(
                "  {title} ({} changes): event → response read p50 {p50:.2} ms, p99 {p99:.2} ms, max {max:.2} ms; bytes sent per change median {}, max {}",
                samples.len(),
                bytes.get(bytes.len() / 2).copied().unwrap_or(0),
                bytes.last().copied().unwrap_or(0)
            );
            p99
        };
        let quiet = Duration::from_millis(if benching { 30 } else { 100 });
        let last_types: Mutex<BTreeMap<XdsType, usize>> = Mutex::default();
        let types = || -> String {
            let last = last_types.lock().map(|m| m.clone()).unwrap_or_default();
            last.iter()
                .map(|(t, b)| format!("{} {b} B", t.short()))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let change = async |client: &Client, object: Option<Object>, key: ObjectKey, t: XdsType, name: String| {
            let since = Instant::now();
            let stale = snapshots.borrow().as_ref().map(|s| s.get(t).version.clone()).unwrap_or_default();
            let event = match object {
                Some(object) => Event::Apply(object),
                None => Event::Delete(key),
            };
            let _ = events.send(event).await;
            let at = client
                .until_not(since, t, &name, Duration::from_secs(30), &stale)
                .await
                .unwrap_or_else(|| panic!("{name} never arrived"));
            client.settle(quiet).await;
            *last_types.lock().unwrap_or_else(|e| e.into_inner()) = client.bytes_by_type(since);
            (at - since, client.bytes_since(since))
        };
        let per_kind = changes / 4;
        let mut tls_bytes = Vec::new();
        let mut service_bytes = 0;
        let mut plain_vhds_bytes = None;
        let (mut authorized_bytes, mut authorized_p99) = (0, 0.0);
        let mut extension_bytes = 0;
        let mut eds_change_p99 = 0.0;
        // Each stream kind in turn, alone (the state-of-the-world stream closes before the
        // delta one opens): the same changes (edits differ by run).
        let modes: &[&str] = if vhds { &["delta"] } else { &["state of the world", "delta"] };
        for (run, mode) in modes.iter().enumerate() {
        if run > 0 || vhds {
            sotw = None;
        }
        let delta_client;
        let client: &Client = if let Some(client) = &sotw {
            client
        } else {
            delta_client = Client::connect_delta(addr, snapshots.clone()).await;
            delta_client.settle(Duration::from_millis(500)).await;
            &delta_client
        };
        let builds_before = metrics.builds.get();
        let spliced_before = metrics.spliced_builds.get();
        println!("  single changes over {mode}:");
        let kinds = [
            ("edit a route's timeout on a TLS vhost", 0),
            ("edit a route's prefix on a TLS vhost", 2),
            ("edit a route on a plain vhost", 1),
            ("edit a route's timeout on a TLS vhost with authorization", 3),
        ];
        for (title, step) in kinds {
            let (mut samples, mut bytes) = (Vec::new(), Vec::new());
            for k in 0..per_kind {
                let i = if step == 3 {
                    (FIRST_AUTHORIZED_EDITED + AUTHORIZED * k) % n / AUTHORIZED * AUTHORIZED
                } else {
                    (2 * k + step % 2) % n
                };
                let (prefix, timeout) = match step {
                    3 => ("/api".to_string(), 500 + k + 1000 * run),
                    // A timeout alone: the prefix the last run left in place.
                    0 if run == 0 => ("/api".to_string(), 10 + k),
                    0 => (format!("/api-{}-{k}", run - 1), 10 + k + 1000 * run),
                    _ => (format!("/api-{run}-{k}"), 10),
                };
                let (t, route) = if i.is_multiple_of(2) {
                    (XdsType::Route, format!("https/site-{i}.example.com"))
                } else {
                    plain(format!("site-{i}.example.com"))
                };
                let key = ObjectKey::new(isobar_contour::HTTP_PROXY, format!("ns-{i}"), "site");
                let (latency, sent) = change(client, Some(proxy(i, &prefix, timeout)), key, t, route).await;
                samples.push(latency);
                bytes.push(sent);
            }
            if step == 0 && run == 0 {
                tls_bytes = bytes.clone();
            }
            if step == 1 && vhds {
                plain_vhds_bytes = bytes.iter().copied().max();
            }
            if step == 3 && run == 0 {
                // The median: at small N earlier changes may have moved the prefix of
                // one of these vhosts, whose edit then moves it back (ingress_http).
                let mut sorted = bytes.clone();
                sorted.sort();
                authorized_bytes = sorted.get(sorted.len() / 2).copied().unwrap_or(0);
                authorized_p99 = percentiles(samples.clone()).1;
            }
            report(title, samples, bytes);
            println!("    last change: {}", types());
        }
        // Add proxies (plain, reusing existing Services), then delete them.
        let (mut samples, mut bytes) = (Vec::new(), Vec::new());
        for k in 0..per_kind {
            let i = (2 * k + 1) % n;
            let text = format!(
                "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: extra, namespace: ns-{i}}}\nspec:\n  virtualhost: {{fqdn: extra-{i}.example.com}}\n  routes:\n    - services: [{{name: app, port: 80}}]\n"
            );
            let key = ObjectKey::new(isobar_contour::HTTP_PROXY, format!("ns-{i}"), "extra");
            let (t, route) = plain(format!("extra-{i}.example.com"));
            let (latency, sent) = change(client, Some(one(&text)), key, t, route).await;
            samples.push(latency);
            bytes.push(sent);
        }
        report("add a proxy", samples, bytes);
        println!("    last change: {}", types());
        let (mut samples, mut bytes) = (Vec::new(), Vec::new());
        for k in 0..per_kind {
            let i = (2 * k + 1) % n;
            let key = ObjectKey::new(isobar_contour::HTTP_PROXY, format!("ns-{i}"), "extra");
            let (t, route) = plain(format!("extra-{i}.example.com"));
            let (latency, sent) = change(client, None, key, t, route).await;
            samples.push(latency);
            bytes.push(sent);
        }
        report("delete a proxy", samples, bytes);
        println!("    last change: {}", types());
        // A Service's upstream protocol (annotated h2c, then plain again in the next
        // run): its cluster is replaced and the one TLS vhost naming it re-sent.
        let (mut samples, mut bytes) = (Vec::new(), Vec::new());
        for k in 0..per_kind {
            let i = (2 * k + 2 * per_kind) % n;
            let annotations = if run == 0 {
                ", annotations: {projectcontour.io/upstream-protocol.h2c: \"80\"}"
            } else {
                ""
            };
            let text = format!(
                "apiVersion: v1\nkind: Service\nmetadata: {{name: app, namespace: ns-{i}{annotations}}}\nspec:\n  ports: [{{name: http, port: 80, targetPort: 8080}}]\n"
            );
            let key = ObjectKey::new(Kind::Service, format!("ns-{i}"), "app");
            let route = format!("https/site-{i}.example.com");
            let (latency, sent) = change(client, Some(one(&text)), key, XdsType::Route, route).await;
            samples.push(latency);
            bytes.push(sent);
        }
        // (State of the world sends every cluster again: CDS has no other form there.)
        if *mode == "delta" {
            service_bytes = bytes.iter().copied().max().unwrap_or(0);
        }
        report("edit a Service's upstream protocol", samples, bytes);
        println!("    last change: {}", types());
        // The ExtensionService's load balancer policy, back and forth: its cluster is
        // replaced; the listeners' filters name it only, so they are not sent again.
        let (mut samples, mut bytes) = (Vec::new(), Vec::new());
        // An even count: the policy ends as it began (the next mode's first edit changes it).
        for k in 0..(per_kind / 10).max(2) / 2 * 2 {
            let strategy = if k % 2 == 0 { "Random" } else { "RoundRobin" };
            let key = ObjectKey::new(isobar_contour::EXTENSION_SERVICE, "ext", "authz");
            let cluster = "extension/ext/authz".to_string();
            let (latency, sent) = change(client, Some(one(&extension_service(strategy))), key, XdsType::Cluster, cluster).await;
            samples.push(latency);
            bytes.push(sent);
            let listeners = last_types.lock().map(|m| m.get(&XdsType::Listener).copied()).unwrap_or_default();
            if *mode == "delta" {
                extension_bytes = extension_bytes.max(sent);
                assert!(listeners.is_none(), "an ExtensionService edit sent listeners: {}", types());
            }
        }
        report("edit the ExtensionService's load balancer policy", samples, bytes);
        println!("    last change: {}", types());
        let route_builds = metrics.builds.get() - builds_before;
        let (mut samples, mut bytes) = (Vec::new(), Vec::new());
        for k in 0..per_kind {
            let i = (7 * k) % n;
            let key = ObjectKey::new(Kind::EndpointSlice, format!("ns-{i}"), "app-1");
            let (latency, sent) = change(client, Some(slice(i, k + 100_000 * run)), key, XdsType::Endpoint, format!("ns-{i}/app/http")).await;
            samples.push(latency);
            bytes.push(sent);
        }
        eds_change_p99 = f64::max(eds_change_p99, report("move an endpoint", samples, bytes));
        println!("    last change: {}", types());
        println!(
            "    ({route_builds} builds for the proxy and Service changes, {} of them of the change alone; {} for the endpoint changes)",
            metrics.spliced_builds.get() - spliced_before,
            metrics.builds.get() - builds_before - route_builds
        );
        }

        // Endpoint churn at a fixed rate, on one stream of each kind (the other closed).
        let total = (churn_rate * churn_seconds) as usize;
        let interval = Duration::from_secs_f64(1.0 / churn_rate);
        let mut churn_p99 = 0.0;
        let mut churn_missing = 0;
        for (kind, delta) in [("state of the world", false), ("delta", true)] {
            if vhds && !delta {
                continue;
            }
            let client = Apart::start(addr, snapshots.clone(), delta);
            // The events are made before the clock starts, as the API server sends them
            // (JSON). Decoding each is Isobar's work: timed on this driving thread and
            // counted in; the rest of this thread's CPU and the simulated Envoy's are
            // subtracted.
            let offset = if delta { 30_000 } else { 1_000 };
            let made: Vec<(usize, serde_json::Value)> = (0..total)
                .map(|k| {
                    let i = (k * 7919) % n;
                    (i, slice(i, offset + k).to_json())
                })
                .collect();
            let mut decoding = Duration::ZERO;
            let cpu_before = cpu_seconds();
            let client_before = client.cpu_seconds();
            let driver_before = cpu_seconds_of("/proc/thread-self/stat");
            let started = Instant::now();
            let mut sent: Vec<(Instant, String)> = Vec::with_capacity(total);
            let mut ticker = tokio::time::interval(interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            for (i, json) in made {
                ticker.tick().await;
                let at = Instant::now();
                let object = isobar::provider::manifest::decode(Kind::EndpointSlice, json)
                    .unwrap_or_else(|e| panic!("{e}"));
                decoding += at.elapsed();
                let _ = events.send(Event::Apply(object)).await;
                sent.push((at, format!("ns-{i}/app/http")));
            }
            client.settle(Duration::from_millis(200)).await;
            let wall = started.elapsed().as_secs_f64();
            let cpu = cpu_seconds() - cpu_before;
            let client_cpu = client.cpu_seconds() - client_before;
            let driver_cpu = cpu_seconds_of("/proc/thread-self/stat") - driver_before;
            let seen = client.seen.lock().map(|s| s.clone()).unwrap_or_default();
            let mut latencies = Vec::new();
            let mut missing = 0;
            for (at, name) in &sent {
                let found = seen.iter().find(|s| {
                    s.at >= *at && s.t == XdsType::Endpoint && s.names.iter().any(|n| n == name)
                });
                match found {
                    Some(s) => latencies.push(s.at - *at),
                    None => {
                        missing += 1;
                        if std::env::var("ISOBAR_BENCH_DEBUG").is_ok() {
                            let k = sent.iter().position(|(a, _)| a == at).unwrap_or(0);
                            let last = seen.iter().filter(|s| s.t == XdsType::Endpoint && s.names.iter().any(|n| n == name)).map(|s| s.at).max();
                            eprintln!("missing k={k} {name} sent {:?} after start; last seen {:?}", *at - started, last.map(|l| l - started));
                        }
                    }
                }
            }
            let (p50, p99, max) = percentiles(latencies);
            churn_p99 = p99;
            churn_missing += missing;
            println!(
                "  endpoint churn over {kind}: {total} EndpointSlice events at {churn_rate:.0}/s for {wall:.1} s: CPU {:.3} cores for Isobar, decoding each event from JSON included ({:.3} with the simulated Envoy and the bench's driving thread); event → EDS response p50 {p50:.2} ms, p99 {p99:.2} ms, max {max:.2} ms; {missing} never seen",
                (cpu - client_cpu - driver_cpu + decoding.as_secs_f64()) / wall,
                cpu / wall
            );
        }

        // Fan-out: many streams, one endpoint change each round.
        let mut clients = Vec::new();
        let connecting = Instant::now();
        for _ in 0..fanout {
            clients.push(Client::connect_delta(addr, snapshots.clone()).await);
        }
        for c in &clients {
            c.settle(Duration::from_millis(300)).await;
        }
        let synced = clients
            .iter()
            .filter_map(|c| c.seen.lock().ok().and_then(|s| s.last().map(|s| s.at)))
            .max()
            .map_or(0.0, |at| (at - connecting).as_secs_f64());
        let mut worst = Vec::new();
        let mut all = Vec::new();
        for k in 0..20 {
            let i = (k * 31) % n;
            let name = format!("ns-{i}/app/http");
            let since = Instant::now();
            let _ = events.send(Event::Apply(slice(i, 60000 + k))).await;
            let mut last = Duration::ZERO;
            for c in &clients {
                let at = c.until(since, XdsType::Endpoint, &name, Duration::from_secs(30)).await.unwrap_or_else(|| panic!("fan-out: {name} missing"));
                last = last.max(at - since);
                all.push(at - since);
            }
            worst.push(last);
        }
        let (p50, p99, max) = percentiles(all);
        let (_, worst_p99, _) = percentiles(worst);
        println!(
            "  fan-out: {fanout} delta ADS streams connected and synced in {synced:.1} s; one endpoint change to all (20 changes): per stream p50 {p50:.2} ms, p99 {p99:.2} ms, max {max:.2} ms; last stream served p99 {worst_p99:.2} ms"
        );
        Figures {
            decode_floor,
            encode_floor,
            cold_start,
            eds_change_p99,
            churn_p99_delta: churn_p99,
            churn_missing,
            route_change_bytes_tls: tls_bytes.iter().copied().max().unwrap_or(0),
            service_change_bytes: service_bytes,
            route_change_bytes_plain_vhds: plain_vhds_bytes,
            authorized_change_bytes: authorized_bytes,
            authorized_change_p99: authorized_p99,
            extension_change_bytes: extension_bytes,
        }
    });
    if !benching {
        check(&figures);
    }
}

/// Regression bounds for CI, as ratios to the floors of the same run (generous: the
/// machine is shared and this runs in a debug build).
fn check(f: &Figures) {
    let cold = f.cold_start.as_secs_f64() / (f.decode_floor + f.encode_floor).as_secs_f64();
    assert!(
        cold < 20.0,
        "cold start is {cold:.1}× the decode + encode floors (bound 20×)"
    );
    let floor_ms = f.encode_floor.as_secs_f64() * 1e3;
    assert!(
        f.eds_change_p99 < 50.0_f64.max(20.0 * floor_ms),
        "an endpoint change took {:.1} ms at p99 (bound: 20× the encode floor of everything, {floor_ms:.1} ms, or 50 ms)",
        f.eds_change_p99
    );
    assert_eq!(
        f.churn_missing, 0,
        "endpoint changes never reached a stream"
    );
    assert!(
        f.churn_p99_delta < 250.0,
        "endpoint churn over delta: p99 {:.1} ms (bound 250 ms)",
        f.churn_p99_delta
    );
    assert!(
        f.route_change_bytes_tls < 20_000,
        "a route change on a TLS vhost sent {} bytes (bound 20 KB)",
        f.route_change_bytes_tls
    );
    assert!(
        f.service_change_bytes < 20_000,
        "a Service edit sent {} bytes over delta (bound 20 KB)",
        f.service_change_bytes
    );
    assert!(
        f.authorized_change_bytes < 20_000,
        "a route change on a vhost with authorization sent {} bytes (bound 20 KB)",
        f.authorized_change_bytes
    );
    assert!(
        f.authorized_change_p99 < 50.0_f64.max(20.0 * floor_ms),
        "a route change on a vhost with authorization took {:.1} ms at p99",
        f.authorized_change_p99
    );
    assert!(
        f.extension_change_bytes > 0 && f.extension_change_bytes < 20_000,
        "an ExtensionService edit sent {} bytes over delta (bound 20 KB)",
        f.extension_change_bytes
    );
    if let Some(bytes) = f.route_change_bytes_plain_vhds {
        assert!(
            bytes <= 5_000,
            "a route change on a plain vhost over VHDS sent {bytes} bytes (bound 5 KB)"
        );
    }
}
