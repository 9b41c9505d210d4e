//! The TLS profile: N HTTPS vhosts, each with its own certificate (an ECDSA P-256 key and
//! a certificate made here with rcgen), served to a simulated Envoy over a real ADS gRPC
//! stream. Measures the full build, then what one change costs on the wire: a certificate
//! rotation (same Secret, new certificate) and a new TLS vhost — per xDS type, the
//! resources and bytes the server sends, and the time from the change to the last byte.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use isobar::cli::serve::envoy_settings;
use isobar::config::Config;
use isobar::metrics::Metrics;
use isobar::provider::manifest::parse_file;
use isobar::runner::pipeline::Pipeline;
use isobar::xds::server::AdsService;
use isobar::xds::{EnvoySettings, Snapshot, XdsType, translate};
use isobar_sdk::Objects;
use prost::Message;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;

use super::{stats, tenant};

/// How long the stream must stay silent for a change to count as delivered.
const QUIET: Duration = Duration::from_millis(400);

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("    {l}\n")).collect()
}

/// A kubernetes.io/tls Secret `cert` in `ns-{i}` for `site-{i}.example.com`; `generation`
/// makes a different certificate for the same name (a rotation).
fn secret(i: usize, generation: u32) -> String {
    let fqdn = format!("site-{i}.example.com");
    let mut params =
        rcgen::CertificateParams::new(vec![fqdn.clone()]).unwrap_or_else(|e| panic!("{e}"));
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("{fqdn} #{generation}"));
    let key = rcgen::KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
    let cert = params.self_signed(&key).unwrap_or_else(|e| panic!("{e}"));
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: cert, namespace: ns-{i}}}\ntype: kubernetes.io/tls\nstringData:\n  tls.crt: |\n{}  tls.key: |\n{}",
        indent(&cert.pem()),
        indent(&key.serialize_pem())
    )
}

/// The flat tenant served over HTTPS with its own certificate.
fn tls_tenant(i: usize) -> String {
    let plain = tenant(i);
    let fqdn = format!("site-{i}.example.com");
    let secure = plain.replace(
        &format!("virtualhost: {{fqdn: {fqdn}}}"),
        &format!("virtualhost: {{fqdn: {fqdn}, tls: {{secretName: cert}}}}"),
    );
    assert_ne!(plain, secure, "the tenant template changed");
    format!("{secure}---\n{}", secret(i, 1))
}

fn load(objects: &mut Objects, text: &str) {
    for object in parse_file(Path::new("bench.yaml"), text).unwrap_or_else(|e| panic!("{e}")) {
        objects.apply(object);
    }
}

/// A simulated Envoy on one ADS stream: subscribes to every resource of the latest
/// snapshot (as Envoy does after taking the clusters and listeners that name them) and
/// ACKs every response.
struct FakeEnvoy {
    requests: mpsc::Sender<DiscoveryRequest>,
    responses: tonic::Streaming<DiscoveryResponse>,
    /// Per type: the names last asked for, the last version and nonce received.
    asked: BTreeMap<XdsType, (Vec<String>, String, String)>,
}

/// What one change cost on the wire.
#[derive(Default)]
struct Delivery {
    /// Per type: responses, resources, encoded bytes.
    per_type: BTreeMap<XdsType, (usize, usize, usize)>,
    /// From the new snapshot to the last response.
    elapsed: Duration,
    /// The rebuild before it, for a change.
    build: Option<Duration>,
}

impl FakeEnvoy {
    async fn connect(snapshots: watch::Receiver<Option<Arc<Snapshot>>>) -> FakeEnvoy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let service = AdsService::new(snapshots, Arc::new(Metrics::default())).into_server();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(isobar::xds::server::incoming(listener)),
        );
        let mut client = AggregatedDiscoveryServiceClient::connect(format!("http://{addr}"))
            .await
            .unwrap_or_else(|e| panic!("connect: {e}"))
            .max_decoding_message_size(usize::MAX);
        let (requests, rx) = mpsc::channel(64);
        let responses = client
            .stream_aggregated_resources(ReceiverStream::new(rx))
            .await
            .unwrap_or_else(|e| panic!("stream: {e}"))
            .into_inner();
        FakeEnvoy {
            requests,
            responses,
            asked: BTreeMap::new(),
        }
    }

    /// Asks for what `snapshot` holds wherever the names differ from the last request.
    async fn subscribe(&mut self, snapshot: &Snapshot) {
        for t in XdsType::ORDER {
            let names: Vec<String> = if t.is_wildcard() {
                Vec::new()
            } else {
                snapshot
                    .get(t)
                    .resources
                    .keys()
                    .map(|n| n.to_string())
                    .collect()
            };
            let entry = self.asked.get(&t);
            if entry.is_some_and(|(asked, _, _)| *asked == names) {
                continue;
            }
            let (version, nonce) = entry
                .map(|(_, v, n)| (v.clone(), n.clone()))
                .unwrap_or_default();
            self.request(t, names, version, nonce).await;
        }
    }

    async fn request(&mut self, t: XdsType, names: Vec<String>, version: String, nonce: String) {
        self.asked
            .insert(t, (names.clone(), version.clone(), nonce.clone()));
        let request = DiscoveryRequest {
            type_url: t.type_url().to_string(),
            resource_names: names,
            version_info: version,
            response_nonce: nonce,
            ..Default::default()
        };
        self.requests
            .send(request)
            .await
            .unwrap_or_else(|e| panic!("send: {e}"));
    }

    /// Takes responses (ACKing each, subscribing to new names) until the stream is quiet.
    async fn drain(&mut self, snapshot: &Snapshot, since: Instant) -> Delivery {
        let mut delivery = Delivery::default();
        while let Ok(message) = tokio::time::timeout(QUIET, self.responses.message()).await {
            let response = message
                .unwrap_or_else(|e| panic!("stream: {e}"))
                .unwrap_or_else(|| panic!("stream ended"));
            delivery.elapsed = since.elapsed();
            let t = XdsType::from_type_url(&response.type_url)
                .unwrap_or_else(|| panic!("type {}", response.type_url));
            let figures = delivery.per_type.entry(t).or_default();
            figures.0 += 1;
            figures.1 += response.resources.len();
            figures.2 += response.encoded_len();
            let names = self
                .asked
                .get(&t)
                .map(|(names, _, _)| names.clone())
                .unwrap_or_default();
            self.request(t, names, response.version_info, response.nonce)
                .await;
            self.subscribe(snapshot).await;
        }
        delivery
    }
}

/// Applies `text`, rebuilds, publishes the snapshot and takes what the stream sends.
async fn change(
    objects: &mut Objects,
    built: &Built,
    tx: &watch::Sender<Option<Arc<Snapshot>>>,
    envoy: &mut FakeEnvoy,
    text: &str,
) -> Delivery {
    let start = Instant::now();
    load(objects, text);
    let next = built.snapshot(objects);
    let build = start.elapsed();
    let published = Instant::now();
    tx.send_replace(Some(next.clone()));
    let mut delivery = envoy.drain(&next, published).await;
    delivery.build = Some(build);
    delivery
}

fn print_delivery(title: &str, delivery: &Delivery) {
    match delivery.build {
        Some(build) => println!(
            "  {title}: full rebuild {:.1} ms, then snapshot → last response {:.1} ms",
            build.as_secs_f64() * 1e3,
            delivery.elapsed.as_secs_f64() * 1e3
        ),
        None => println!(
            "  {title}: last response after {:.1} ms",
            delivery.elapsed.as_secs_f64() * 1e3
        ),
    }
    let mut total = 0;
    for (t, (responses, resources, bytes)) in &delivery.per_type {
        total += bytes;
        println!(
            "    {:<3} {responses} response(s), {resources} resource(s), {bytes} bytes",
            t.short()
        );
    }
    println!("    total {total} bytes");
}

struct Built {
    pipeline: Pipeline,
    settings: EnvoySettings,
}

impl Built {
    fn snapshot(&self, objects: &Objects) -> Arc<Snapshot> {
        let output = self.pipeline.build(objects);
        Arc::new(Snapshot::new(translate(
            &output.ir,
            objects,
            &self.settings,
        )))
    }
}

pub fn run(n: usize, runs: usize) {
    println!(
        "tls: {n} HTTPS vhosts, each with its own certificate ({n} HTTPProxies, Services, EndpointSlices, Secrets)"
    );
    let start = Instant::now();
    let text: String = (0..n).map(tls_tenant).collect::<Vec<_>>().join("---\n");
    println!(
        "  generate {n} ECDSA P-256 certificates and keys (rcgen, not timed below): {:.0} ms",
        start.elapsed().as_secs_f64() * 1e3
    );
    let mut objects = Objects::default();
    let start = Instant::now();
    load(&mut objects, &text);
    println!(
        "  decode YAML (once, not part of the build): {:.1} ms",
        start.elapsed().as_secs_f64() * 1e3
    );
    let config = Config::default();
    let built = Built {
        pipeline: Pipeline::for_config(&config).unwrap_or_else(|e| panic!("{e}")),
        settings: envoy_settings(&config),
    };

    // The first build also validates every secret (parsed, key matched to certificate);
    // the result is kept per stored Secret version, so later builds reuse it.
    let start = Instant::now();
    let snapshot = built.snapshot(&objects);
    println!(
        "  first build, validating {n} secrets: {:.1} ms",
        start.elapsed().as_secs_f64() * 1e3
    );
    let mut samples = Vec::new();
    for _ in 0..runs {
        let start = Instant::now();
        let _ = built.snapshot(&objects);
        samples.push(start.elapsed());
    }
    println!(
        "  objects → IR → encoded, versioned xDS:     {}",
        stats(samples)
    );
    for t in XdsType::ORDER {
        let of = snapshot.get(t);
        println!(
            "    {:<3} {} resources, {} bytes",
            t.short(),
            of.resources.len(),
            of.resources.values().map(|a| a.len()).sum::<usize>()
        );
    }
    assert_eq!(snapshot.get(XdsType::Secret).resources.len(), n);

    let runtime = super::runtime();
    runtime.block_on(async move {
        let (tx, rx) = watch::channel(Some(snapshot.clone()));
        let mut envoy = FakeEnvoy::connect(rx).await;
        let start = Instant::now();
        envoy.subscribe(&snapshot).await;
        let initial = envoy.drain(&snapshot, start).await;
        print_delivery(
            "initial sync of one stream (from its first request)",
            &initial,
        );

        // Rotation: the same Secret with a new certificate.
        let rotated = secret(0, 2);
        let rotation = change(&mut objects, &built, &tx, &mut envoy, &rotated).await;
        print_delivery("certificate rotation", &rotation);
        let types: Vec<XdsType> = rotation.per_type.keys().copied().collect();
        assert_eq!(types, vec![XdsType::Secret], "a rotation sends only SDS");
        assert_eq!(rotation.per_type[&XdsType::Secret].1, 1, "one secret");

        // A new TLS vhost: its own Service, EndpointSlice, Secret and HTTPProxy.
        let added = change(&mut objects, &built, &tx, &mut envoy, &tls_tenant(n)).await;
        print_delivery(
            "a new TLS vhost (each type waits for the ACK of the one before)",
            &added,
        );
        assert_eq!(added.per_type[&XdsType::Secret].1, 1, "one new secret");
    });
}
