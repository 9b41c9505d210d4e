//! The ADS server over a real gRPC connection: gating, ACK/NACK, stale nonces,
//! per-name subscriptions, push order and make-before-break.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use envoy_types::pb::google::rpc::Status as RpcStatus;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;

use isobar::metrics::Metrics;
use isobar::xds::server::AdsService;
use isobar::xds::{Resources, Snapshot, XdsType};

const QUIET: Duration = Duration::from_millis(300);
const WAIT: Duration = Duration::from_secs(5);

/// A resource whose bytes are `body` (the stream sends it with its type's URL).
fn resource(body: &str) -> Arc<[u8]> {
    Arc::from(body.as_bytes())
}

fn map(names: &[&str], tag: &str) -> BTreeMap<String, Arc<[u8]>> {
    names
        .iter()
        .map(|n| (n.to_string(), resource(&format!("{n}:{tag}"))))
        .collect()
}

/// A snapshot with the given cluster names (one CLA each), a listener and a route table
/// whose content is `tag`.
fn snapshot(clusters: &[&str], tag: &str) -> Arc<Snapshot> {
    Arc::new(Snapshot::new(Resources {
        clusters: map(clusters, "c"),
        endpoints: map(clusters, "e"),
        listeners: map(&["ingress_http"], "l"),
        routes: map(&["ingress_http"], tag),
        ..Default::default()
    }))
}

struct Envoy {
    requests: mpsc::Sender<DiscoveryRequest>,
    responses: tonic::Streaming<DiscoveryResponse>,
}

impl Envoy {
    async fn send(&self, t: XdsType, names: &[&str], version: &str, nonce: &str, nack: bool) {
        let request = DiscoveryRequest {
            type_url: t.type_url().to_string(),
            resource_names: names.iter().map(|s| s.to_string()).collect(),
            version_info: version.to_string(),
            response_nonce: nonce.to_string(),
            error_detail: nack.then(|| RpcStatus {
                code: 3,
                message: "rejected by test".to_string(),
                ..Default::default()
            }),
            ..Default::default()
        };
        self.requests
            .send(request)
            .await
            .unwrap_or_else(|e| panic!("send: {e}"));
    }

    async fn next(&mut self) -> Option<DiscoveryResponse> {
        match tokio::time::timeout(WAIT, self.responses.message()).await {
            Ok(Ok(r)) => r,
            _ => None,
        }
    }

    async fn expect(&mut self, t: XdsType) -> DiscoveryResponse {
        let r = self
            .next()
            .await
            .unwrap_or_else(|| panic!("no {t:?} response"));
        assert_eq!(
            r.type_url,
            t.type_url(),
            "expected {t:?}, got {}",
            r.type_url
        );
        assert!(!r.version_info.is_empty() && !r.nonce.is_empty());
        assert!(r.resources.iter().all(|a| a.type_url == r.type_url));
        r
    }

    async fn ack(&self, t: XdsType, names: &[&str], r: &DiscoveryResponse) {
        self.send(t, names, &r.version_info, &r.nonce, false).await;
    }

    async fn quiet(&mut self) {
        if let Ok(Ok(Some(r))) = tokio::time::timeout(QUIET, self.responses.message()).await {
            panic!("unexpected response: {} {}", r.type_url, r.version_info);
        }
    }
}

/// Serves `service` on a loopback port and connects a client to it.
async fn ads_client(
    service: AdsService,
) -> AggregatedDiscoveryServiceClient<tonic::transport::Channel> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service.into_server())
            .serve_with_incoming(isobar::xds::server::incoming(listener)),
    );
    AggregatedDiscoveryServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"))
}

async fn server(
    initial: Option<Arc<Snapshot>>,
) -> (watch::Sender<Option<Arc<Snapshot>>>, Arc<Metrics>, Envoy) {
    let (tx, rx) = watch::channel(initial);
    let metrics = Arc::new(Metrics::default());
    let mut client = ads_client(AdsService::new(rx, metrics.clone())).await;
    let (req_tx, req_rx) = mpsc::channel(16);
    let responses = client
        .stream_aggregated_resources(ReceiverStream::new(req_rx))
        .await
        .unwrap_or_else(|e| panic!("stream: {e}"))
        .into_inner();
    (
        tx,
        metrics,
        Envoy {
            requests: req_tx,
            responses,
        },
    )
}

fn names(r: &DiscoveryResponse) -> Vec<String> {
    r.resources
        .iter()
        .map(|a| {
            String::from_utf8_lossy(&a.value)
                .split(':')
                .next()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

#[tokio::test]
async fn nothing_is_sent_before_the_first_build() {
    let (tx, _, mut envoy) = server(None).await;
    envoy.send(XdsType::Cluster, &[], "", "", false).await;
    envoy.quiet().await;
    tx.send_replace(Some(snapshot(&["a"], "r1")));
    let r = envoy.expect(XdsType::Cluster).await;
    assert_eq!(names(&r), vec!["a"]);
}

#[tokio::test]
async fn later_types_wait_for_earlier_acks() {
    let (_tx, _, mut envoy) = server(Some(snapshot(&["a"], "r1"))).await;
    envoy.send(XdsType::Cluster, &[], "", "", false).await;
    let cds = envoy.expect(XdsType::Cluster).await;
    envoy.send(XdsType::Listener, &[], "", "", false).await;
    envoy.quiet().await;
    envoy.ack(XdsType::Cluster, &[], &cds).await;
    // Routes also wait until Envoy has subscribed to the new clusters' endpoints.
    envoy.quiet().await;
    envoy.send(XdsType::Endpoint, &["a"], "", "", false).await;
    let eds = envoy.expect(XdsType::Endpoint).await;
    envoy.quiet().await;
    envoy.ack(XdsType::Endpoint, &["a"], &eds).await;
    envoy.expect(XdsType::Listener).await;
}

#[tokio::test]
async fn a_nack_is_counted_and_not_resent_until_content_changes() {
    let (tx, metrics, mut envoy) = server(Some(snapshot(&["a"], "r1"))).await;
    envoy.send(XdsType::Cluster, &[], "", "", false).await;
    let first = envoy.expect(XdsType::Cluster).await;
    envoy
        .send(XdsType::Cluster, &[], "", &first.nonce, true)
        .await;
    // Same clusters, different routes: nothing new for CDS.
    tx.send_replace(Some(snapshot(&["a"], "r2")));
    envoy.quiet().await;
    assert!(
        metrics
            .encode()
            .contains("isobar_xds_nacks_total{xds_type=\"cds\"} 1")
    );
    tx.send_replace(Some(snapshot(&["a", "b"], "r2")));
    let second = envoy.expect(XdsType::Cluster).await;
    assert_ne!(second.version_info, first.version_info);
    assert_eq!(names(&second), vec!["a", "b"]);
}

#[tokio::test]
async fn a_stale_nonce_gets_no_answer() {
    let (tx, _, mut envoy) = server(Some(snapshot(&["a"], "r1"))).await;
    envoy.send(XdsType::Cluster, &[], "", "", false).await;
    let first = envoy.expect(XdsType::Cluster).await;
    envoy.ack(XdsType::Cluster, &[], &first).await;
    tx.send_replace(Some(snapshot(&["a", "b"], "r1")));
    let second = envoy.expect(XdsType::Cluster).await;
    // An ACK of the first response arriving late is stale: it must not clear the
    // in-flight second one or trigger a resend.
    envoy.ack(XdsType::Cluster, &[], &first).await;
    envoy.quiet().await;
    envoy.ack(XdsType::Cluster, &[], &second).await;
    envoy.quiet().await;
}

/// Isobar decodes a state-of-the-world request's names only when they differ from the
/// names the stream last took for the type: a stale request's names are not taken, so
/// the same names on the next current request are still news.
#[tokio::test]
async fn names_of_a_stale_request_still_count_when_a_current_one_repeats_them() {
    let (_tx, _, mut envoy) = server(Some(snapshot(&["a", "b"], "r1"))).await;
    envoy.send(XdsType::Endpoint, &["a"], "", "", false).await;
    let first = envoy.expect(XdsType::Endpoint).await;
    assert_eq!(names(&first), vec!["a"]);
    envoy
        .send(XdsType::Endpoint, &["a", "b"], "", "stale", false)
        .await;
    envoy.quiet().await;
    envoy.ack(XdsType::Endpoint, &["a", "b"], &first).await;
    let second = envoy.expect(XdsType::Endpoint).await;
    assert_eq!(names(&second), vec!["b"]);
    // The same names again with the ACK: nothing new.
    envoy.ack(XdsType::Endpoint, &["a", "b"], &second).await;
    envoy.quiet().await;
}

/// Names that change back to an earlier list are news too: a name Envoy dropped is
/// forgotten there, so it goes out again when asked for again.
#[tokio::test]
async fn names_that_change_back_are_taken_again() {
    let (_tx, _, mut envoy) = server(Some(snapshot(&["a", "b"], "r1"))).await;
    envoy.send(XdsType::Endpoint, &["a"], "", "", false).await;
    let first = envoy.expect(XdsType::Endpoint).await;
    envoy.ack(XdsType::Endpoint, &["b"], &first).await;
    let second = envoy.expect(XdsType::Endpoint).await;
    assert_eq!(names(&second), vec!["b"]);
    envoy.ack(XdsType::Endpoint, &["a"], &second).await;
    let third = envoy.expect(XdsType::Endpoint).await;
    assert_eq!(names(&third), vec!["a"]);
}

#[tokio::test]
async fn eds_answers_per_name_and_remembers_missing_names() {
    let (tx, _, mut envoy) = server(Some(snapshot(&["a", "b"], "r1"))).await;
    envoy.send(XdsType::Endpoint, &["a"], "", "", false).await;
    let r = envoy.expect(XdsType::Endpoint).await;
    assert_eq!(names(&r), vec!["a"]);
    // Adding a name that does not exist yet changes nothing Envoy would receive.
    envoy
        .send(
            XdsType::Endpoint,
            &["a", "c"],
            &r.version_info,
            &r.nonce,
            false,
        )
        .await;
    envoy.quiet().await;
    tx.send_replace(Some(snapshot(&["a", "b", "c"], "r1")));
    let r = envoy.expect(XdsType::Endpoint).await;
    // Envoy holds `a` already (it ACKed it): only the new `c` goes out.
    assert_eq!(names(&r), vec!["c"]);
}

#[tokio::test]
async fn removed_clusters_stay_until_routes_move_off_them() {
    let (tx, _, mut envoy) = server(Some(snapshot(&["old"], "r1"))).await;
    // Bring the stream up to date: CDS, EDS, LDS, RDS, all ACKed.
    envoy.send(XdsType::Cluster, &[], "", "", false).await;
    let cds = envoy.expect(XdsType::Cluster).await;
    envoy.ack(XdsType::Cluster, &[], &cds).await;
    envoy.send(XdsType::Endpoint, &["old"], "", "", false).await;
    let eds = envoy.expect(XdsType::Endpoint).await;
    envoy.ack(XdsType::Endpoint, &["old"], &eds).await;
    envoy.send(XdsType::Listener, &[], "", "", false).await;
    let lds = envoy.expect(XdsType::Listener).await;
    envoy.ack(XdsType::Listener, &[], &lds).await;
    envoy
        .send(XdsType::Route, &["ingress_http"], "", "", false)
        .await;
    let rds = envoy.expect(XdsType::Route).await;
    envoy.ack(XdsType::Route, &["ingress_http"], &rds).await;
    envoy.quiet().await;

    // Routes move from `old` to `new`.
    tx.send_replace(Some(snapshot(&["new"], "r2")));
    let cds = envoy.expect(XdsType::Cluster).await;
    assert_eq!(
        names(&cds),
        vec!["new", "old"],
        "old must stay while routes use it"
    );
    envoy.ack(XdsType::Cluster, &[], &cds).await;
    envoy
        .send(
            XdsType::Endpoint,
            &["new", "old"],
            &eds.version_info,
            &eds.nonce,
            false,
        )
        .await;
    let eds = envoy.expect(XdsType::Endpoint).await;
    assert_eq!(names(&eds), vec!["new"]);
    envoy.ack(XdsType::Endpoint, &["new", "old"], &eds).await;
    let rds = envoy.expect(XdsType::Route).await;
    envoy.ack(XdsType::Route, &["ingress_http"], &rds).await;
    let cds = envoy.expect(XdsType::Cluster).await;
    assert_eq!(
        names(&cds),
        vec!["new"],
        "old goes once the routes are ACKed"
    );
}

#[tokio::test]
async fn an_unchanged_rebuild_sends_nothing() {
    let (tx, _, mut envoy) = server(Some(snapshot(&["a"], "r1"))).await;
    envoy.send(XdsType::Cluster, &[], "", "", false).await;
    let cds = envoy.expect(XdsType::Cluster).await;
    envoy.ack(XdsType::Cluster, &[], &cds).await;
    tx.send_replace(Some(snapshot(&["a"], "r1")));
    envoy.quiet().await;
}

/// A new cluster whose endpoint set Envoy already subscribes to (same Service, other
/// options) warms only on an EDS response: Envoy asks again with the same version after
/// taking the CDS update, and must get one, or the CDS update never completes.
#[tokio::test]
async fn a_new_cluster_on_known_endpoints_gets_them_again() {
    let (tx, _, mut envoy) = server(Some(snapshot(&["a"], "r1"))).await;
    envoy.send(XdsType::Cluster, &[], "", "", false).await;
    let cds = envoy.expect(XdsType::Cluster).await;
    envoy.send(XdsType::Endpoint, &["a"], "", "", false).await;
    let eds = envoy.expect(XdsType::Endpoint).await;
    envoy.ack(XdsType::Cluster, &[], &cds).await;
    envoy.ack(XdsType::Endpoint, &["a"], &eds).await;
    envoy.quiet().await;
    // Same endpoints ("a"), one more cluster that uses them.
    let mut next = Resources {
        clusters: map(&["a", "a-tls"], "c"),
        endpoints: map(&["a"], "e"),
        listeners: map(&["ingress_http"], "l"),
        routes: map(&["ingress_http"], "r1"),
        ..Default::default()
    };
    next.clusters.remove("a");
    tx.send_replace(Some(Arc::new(Snapshot::new(next))));
    let cds = envoy.expect(XdsType::Cluster).await;
    assert!(names(&cds).contains(&"a-tls".to_string()));
    let again = envoy.expect(XdsType::Endpoint).await;
    assert_eq!(names(&again), vec!["a"]);
    assert_eq!(again.version_info, eds.version_info);
    assert_ne!(again.nonce, eds.nonce);
}

fn with_secrets(secrets: &[(&str, &str)]) -> Arc<Snapshot> {
    Arc::new(Snapshot::new(Resources {
        secrets: secrets
            .iter()
            .map(|(n, tag)| (n.to_string(), resource(&format!("{n}:{tag}"))))
            .collect(),
        ..Default::default()
    }))
}

/// EDS, SDS and RDS are answered with only what changed: a rotated certificate sends
/// that one secret, not every secret Envoy holds.
#[tokio::test]
async fn only_changed_secrets_are_sent() {
    let all = ["a", "b", "c"];
    let (tx, _, mut envoy) =
        server(Some(with_secrets(&[("a", "1"), ("b", "1"), ("c", "1")]))).await;
    envoy.send(XdsType::Secret, &all, "", "", false).await;
    let first = envoy.expect(XdsType::Secret).await;
    assert_eq!(names(&first), all);
    envoy.ack(XdsType::Secret, &all, &first).await;
    envoy.quiet().await;

    tx.send_replace(Some(with_secrets(&[("a", "1"), ("b", "2"), ("c", "1")])));
    let rotated = envoy.expect(XdsType::Secret).await;
    assert_eq!(names(&rotated), vec!["b"]);
    assert_eq!(String::from_utf8_lossy(&rotated.resources[0].value), "b:2");
    assert_ne!(rotated.version_info, first.version_info);
    envoy.ack(XdsType::Secret, &all, &rotated).await;
    envoy.quiet().await;

    // A name Envoy drops and asks for again is sent again: Envoy forgot it.
    envoy
        .send(
            XdsType::Secret,
            &["a", "b"],
            &rotated.version_info,
            "",
            false,
        )
        .await;
    envoy.quiet().await;
    envoy
        .send(XdsType::Secret, &all, &rotated.version_info, "", false)
        .await;
    let again = envoy.expect(XdsType::Secret).await;
    assert_eq!(names(&again), vec!["c"]);
    envoy.ack(XdsType::Secret, &all, &again).await;
    envoy.quiet().await;

    // A rejected change is not sent again until something changes.
    tx.send_replace(Some(with_secrets(&[("a", "2"), ("b", "2"), ("c", "1")])));
    let bad = envoy.expect(XdsType::Secret).await;
    assert_eq!(names(&bad), vec!["a"]);
    envoy
        .send(XdsType::Secret, &all, &again.version_info, &bad.nonce, true)
        .await;
    envoy.quiet().await;
    tx.send_replace(Some(with_secrets(&[("a", "2"), ("b", "2"), ("c", "2")])));
    let next = envoy.expect(XdsType::Secret).await;
    assert_eq!(
        names(&next),
        vec!["a", "c"],
        "Envoy never took the rejected `a`"
    );
}

// ---- incremental (delta) ADS ----

use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse,
};

struct DeltaEnvoy {
    requests: mpsc::Sender<DeltaDiscoveryRequest>,
    responses: tonic::Streaming<DeltaDiscoveryResponse>,
}

async fn delta_server(
    initial: Option<Arc<Snapshot>>,
    known: &[(XdsType, BTreeMap<String, String>)],
) -> (watch::Sender<Option<Arc<Snapshot>>>, DeltaEnvoy) {
    let (tx, rx) = watch::channel(initial);
    let mut client = ads_client(AdsService::new(rx, Arc::new(Metrics::default()))).await;
    let (req_tx, req_rx) = mpsc::channel(16);
    let responses = client
        .delta_aggregated_resources(ReceiverStream::new(req_rx))
        .await
        .unwrap_or_else(|e| panic!("stream: {e}"))
        .into_inner();
    let envoy = DeltaEnvoy {
        requests: req_tx,
        responses,
    };
    // Wildcard CDS and LDS, with what this Envoy says it already holds.
    for t in [XdsType::Cluster, XdsType::Listener] {
        let initial = known
            .iter()
            .find(|(k, _)| *k == t)
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        envoy
            .send(DeltaDiscoveryRequest {
                type_url: t.type_url().to_string(),
                initial_resource_versions: initial.into_iter().collect(),
                ..Default::default()
            })
            .await;
    }
    (tx, envoy)
}

impl DeltaEnvoy {
    async fn send(&self, request: DeltaDiscoveryRequest) {
        self.requests
            .send(request)
            .await
            .unwrap_or_else(|e| panic!("send: {e}"));
    }

    async fn expect(&mut self, t: XdsType) -> DeltaDiscoveryResponse {
        let r = tokio::time::timeout(WAIT, self.responses.message())
            .await
            .ok()
            .and_then(|r| r.ok().flatten())
            .unwrap_or_else(|| panic!("no {t:?} delta response"));
        assert_eq!(r.type_url, t.type_url());
        r
    }

    async fn ack(&self, r: &DeltaDiscoveryResponse, nack: bool) {
        self.send(DeltaDiscoveryRequest {
            type_url: r.type_url.clone(),
            response_nonce: r.nonce.clone(),
            error_detail: nack.then(|| RpcStatus {
                code: 3,
                message: "rejected by test".to_string(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await;
    }

    async fn subscribe(&self, t: XdsType, names: &[&str]) {
        self.send(DeltaDiscoveryRequest {
            type_url: t.type_url().to_string(),
            resource_names_subscribe: names.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        })
        .await;
    }

    async fn quiet(&mut self) {
        if let Ok(Ok(Some(r))) = tokio::time::timeout(QUIET, self.responses.message()).await {
            panic!(
                "unexpected delta response: {} {:?}",
                r.type_url,
                r.resources.iter().map(|r| &r.name).collect::<Vec<_>>()
            );
        }
    }
}

fn delta_names(r: &DeltaDiscoveryResponse) -> Vec<String> {
    r.resources.iter().map(|r| r.name.clone()).collect()
}

/// A delta stream on `snapshot` that was sent and ACKed every cluster, endpoint set,
/// listener and `ingress_http`, in that order, and has nothing more to get.
async fn warmed_delta(
    snapshot: Arc<Snapshot>,
) -> (watch::Sender<Option<Arc<Snapshot>>>, DeltaEnvoy) {
    let clusters: Vec<String> = snapshot
        .get(XdsType::Cluster)
        .resources
        .keys()
        .map(|n| n.to_string())
        .collect();
    let (tx, mut envoy) = delta_server(Some(snapshot), &[]).await;
    let cds = envoy.expect(XdsType::Cluster).await;
    assert_eq!(delta_names(&cds), clusters);
    envoy.ack(&cds, false).await;
    let names: Vec<&str> = clusters.iter().map(String::as_str).collect();
    envoy.subscribe(XdsType::Endpoint, &names).await;
    let eds = envoy.expect(XdsType::Endpoint).await;
    assert_eq!(delta_names(&eds), clusters);
    envoy.ack(&eds, false).await;
    let lds = envoy.expect(XdsType::Listener).await;
    envoy.ack(&lds, false).await;
    envoy.subscribe(XdsType::Route, &["ingress_http"]).await;
    let rds = envoy.expect(XdsType::Route).await;
    envoy.ack(&rds, false).await;
    envoy.quiet().await;
    (tx, envoy)
}

#[tokio::test]
async fn delta_sends_only_changes_and_removals() {
    let (tx, mut envoy) = warmed_delta(snapshot(&["a", "b"], "r1")).await;

    // A route change sends one route and nothing else.
    tx.send_replace(Some(snapshot(&["a", "b"], "r2")));
    let rds = envoy.expect(XdsType::Route).await;
    assert_eq!(delta_names(&rds), ["ingress_http"]);
    envoy.ack(&rds, false).await;
    envoy.quiet().await;

    // Cluster b goes: its removal waits for the routes that may use it, then goes out.
    tx.send_replace(Some(snapshot(&["a"], "r3")));
    let rds = envoy.expect(XdsType::Route).await;
    envoy.ack(&rds, false).await;
    let cds = envoy.expect(XdsType::Cluster).await;
    assert!(cds.resources.is_empty());
    assert_eq!(cds.removed_resources, ["b"]);
    envoy.ack(&cds, false).await;
    let eds = envoy.expect(XdsType::Endpoint).await;
    assert_eq!(eds.removed_resources, ["b"]);
    envoy.ack(&eds, false).await;
    envoy.quiet().await;

    // A NACKed route is not sent again until it changes.
    tx.send_replace(Some(snapshot(&["a"], "bad")));
    let rds = envoy.expect(XdsType::Route).await;
    envoy.ack(&rds, true).await;
    envoy.quiet().await;
    tx.send_replace(Some(snapshot(&["a"], "good")));
    let rds = envoy.expect(XdsType::Route).await;
    assert_eq!(delta_names(&rds), ["ingress_http"]);
}

#[tokio::test]
async fn a_reconnecting_delta_envoy_gets_only_what_it_lacks() {
    let current = snapshot(&["a", "b"], "r1");
    // This Envoy holds cluster a as it is now, and a stale cluster c.
    let a_version = format!("{:016x}", current.get(XdsType::Cluster).digests["a"]);
    let known = BTreeMap::from([
        ("a".to_string(), a_version),
        ("c".to_string(), "0000000000000001".to_string()),
    ]);
    let (_tx, mut envoy) = delta_server(Some(current), &[(XdsType::Cluster, known)]).await;
    let cds = envoy.expect(XdsType::Cluster).await;
    assert_eq!(delta_names(&cds), ["b"]);
    assert_eq!(cds.removed_resources, ["c"]);
}

/// A reconnecting Envoy that subscribes by name and says what it holds is sent only the
/// endpoint sets it lacks or holds in another version.
#[tokio::test]
async fn a_reconnecting_delta_envoy_resumes_named_subscriptions() {
    let current = snapshot(&["a", "b"], "r1");
    let eds = current.get(XdsType::Endpoint);
    let a_version = format!("{:016x}", eds.digests["a"]);
    let (_tx, mut envoy) = delta_server(Some(current.clone()), &[]).await;
    let cds = envoy.expect(XdsType::Cluster).await;
    envoy.ack(&cds, false).await;
    envoy
        .send(DeltaDiscoveryRequest {
            type_url: XdsType::Endpoint.type_url().to_string(),
            resource_names_subscribe: vec!["a".to_string(), "b".to_string()],
            initial_resource_versions: [("a".to_string(), a_version)].into_iter().collect(),
            ..Default::default()
        })
        .await;
    let endpoints = envoy.expect(XdsType::Endpoint).await;
    assert_eq!(delta_names(&endpoints), ["b"]);
}

/// `xds-server.vhds`: Envoy subscribes to vhosts by an empty (wildcard) request once it
/// holds `ingress_http`; only changed vhosts are sent again, a removed cluster waits
/// until Envoy holds the vhosts that no longer use it, and a removed vhost is named in
/// `removed_resources`.
/// A snapshot with `clusters`, `ingress_http` and its `vhosts` (content `tag`).
fn with_vhosts(clusters: &[&str], vhosts: &[&str], tag: &str) -> Arc<Snapshot> {
    Arc::new(Snapshot::new(Resources {
        clusters: map(clusters, "c"),
        endpoints: map(clusters, "e"),
        listeners: map(&["ingress_http"], "l"),
        routes: map(&["ingress_http"], "shell"),
        virtual_hosts: map(vhosts, tag),
        ..Default::default()
    }))
}

/// A delta stream on `snapshot` that ACKed clusters, endpoints, listeners and routes and
/// subscribed to vhosts as Envoy does (an empty request).
async fn vhds_stream(
    snapshot: Arc<Snapshot>,
) -> (watch::Sender<Option<Arc<Snapshot>>>, DeltaEnvoy) {
    let (tx, envoy) = warmed_delta(snapshot).await;
    envoy.subscribe(XdsType::VirtualHost, &[]).await;
    (tx, envoy)
}

#[tokio::test]
async fn delta_vhosts_are_served_to_a_wildcard_subscription_after_their_clusters() {
    let (tx, mut envoy) = vhds_stream(with_vhosts(
        &["a", "b"],
        &["ingress_http/a", "ingress_http/b"],
        "v1",
    ))
    .await;
    let vhds = envoy.expect(XdsType::VirtualHost).await;
    assert_eq!(delta_names(&vhds), ["ingress_http/a", "ingress_http/b"]);
    envoy.ack(&vhds, false).await;
    envoy.quiet().await;

    // Both vhosts change: both go, the RouteConfiguration stays.
    tx.send_replace(Some(with_vhosts(
        &["a", "b"],
        &["ingress_http/a", "ingress_http/b"],
        "v2",
    )));
    let vhds = envoy.expect(XdsType::VirtualHost).await;
    assert_eq!(delta_names(&vhds), ["ingress_http/a", "ingress_http/b"]);
    envoy.ack(&vhds, false).await;
    envoy.quiet().await;
    // One vhost changes: it alone goes.
    let mut one = with_vhosts(&["a", "b"], &["ingress_http/a", "ingress_http/b"], "v2");
    one = Arc::new(one.with_changes(
        XdsType::VirtualHost,
        [(
            "ingress_http/b".to_string(),
            Some(resource("ingress_http/b:v3")),
        )],
    ));
    tx.send_replace(Some(one));
    let vhds = envoy.expect(XdsType::VirtualHost).await;
    assert_eq!(delta_names(&vhds), ["ingress_http/b"]);
    envoy.ack(&vhds, false).await;
    envoy.quiet().await;

    // Vhost a moves to cluster b, and cluster a goes: the cluster's removal waits until
    // Envoy holds the vhost that no longer uses it.
    tx.send_replace(Some(with_vhosts(
        &["b"],
        &["ingress_http/a", "ingress_http/b"],
        "v4",
    )));
    let vhds = envoy.expect(XdsType::VirtualHost).await;
    assert_eq!(delta_names(&vhds), ["ingress_http/a", "ingress_http/b"]);
    envoy.quiet().await;
    envoy.ack(&vhds, false).await;
    let cds = envoy.expect(XdsType::Cluster).await;
    assert_eq!(cds.removed_resources, ["a"]);
    envoy.ack(&cds, false).await;
    let eds = envoy.expect(XdsType::Endpoint).await;
    envoy.ack(&eds, false).await;
    envoy.quiet().await;

    // A vhost that goes is named in `removed_resources`.
    tx.send_replace(Some(with_vhosts(&["b"], &["ingress_http/b"], "v4")));
    let vhds = envoy.expect(XdsType::VirtualHost).await;
    assert!(vhds.resources.is_empty());
    assert_eq!(vhds.removed_resources, ["ingress_http/a"]);
}

/// Under `xds-server.vhds`, a snapshot with `ingress_http` whole (content `tag`), its
/// shell for delta streams, another RouteConfiguration and one VHDS vhost.
fn with_shells(tag: &str) -> Arc<Snapshot> {
    Arc::new(Snapshot::new(Resources {
        clusters: map(&["a"], "c"),
        endpoints: map(&["a"], "e"),
        listeners: map(&["ingress_http"], "l"),
        routes: map(&["ingress_http", "https/x"], tag),
        vhds_routes: map(&["ingress_http"], "shell"),
        virtual_hosts: map(&["ingress_http/a"], tag),
        ..Default::default()
    }))
}

/// Under `xds-server.vhds` one snapshot serves both kinds of Envoy: a state-of-the-world
/// stream gets `ingress_http` whole, a delta stream its shell (the vhosts come over
/// VHDS); a change reaches both, the delta stream's shell staying as it was.
#[tokio::test]
async fn under_vhds_sotw_streams_get_whole_routes_and_delta_streams_the_shell() {
    let (tx, _, mut envoy) = server(Some(with_shells("v1"))).await;
    envoy.send(XdsType::Cluster, &[], "", "", false).await;
    let cds = envoy.expect(XdsType::Cluster).await;
    envoy.ack(XdsType::Cluster, &[], &cds).await;
    envoy.send(XdsType::Endpoint, &["a"], "", "", false).await;
    let eds = envoy.expect(XdsType::Endpoint).await;
    envoy.ack(XdsType::Endpoint, &["a"], &eds).await;
    envoy.send(XdsType::Listener, &[], "", "", false).await;
    let lds = envoy.expect(XdsType::Listener).await;
    envoy.ack(XdsType::Listener, &[], &lds).await;
    let both = ["https/x", "ingress_http"];
    envoy.send(XdsType::Route, &both, "", "", false).await;
    let rds = envoy.expect(XdsType::Route).await;
    let bodies = |r: &DiscoveryResponse| -> Vec<String> {
        r.resources
            .iter()
            .map(|a| String::from_utf8_lossy(&a.value).to_string())
            .collect()
    };
    assert_eq!(bodies(&rds), ["https/x:v1", "ingress_http:v1"]);
    envoy.ack(XdsType::Route, &both, &rds).await;

    let (delta_tx, mut delta) = delta_server(Some(with_shells("v1")), &[]).await;
    let cds = delta.expect(XdsType::Cluster).await;
    delta.ack(&cds, false).await;
    delta.subscribe(XdsType::Endpoint, &["a"]).await;
    let eds = delta.expect(XdsType::Endpoint).await;
    delta.ack(&eds, false).await;
    let lds = delta.expect(XdsType::Listener).await;
    delta.ack(&lds, false).await;
    delta.subscribe(XdsType::Route, &both).await;
    let rds = delta.expect(XdsType::Route).await;
    let delta_bodies = |r: &DeltaDiscoveryResponse| -> Vec<String> {
        r.resources
            .iter()
            .filter_map(|r| r.resource.as_ref())
            .map(|a| String::from_utf8_lossy(&a.value).to_string())
            .collect()
    };
    assert_eq!(delta_bodies(&rds), ["https/x:v1", "ingress_http:shell"]);
    delta.ack(&rds, false).await;
    delta.subscribe(XdsType::VirtualHost, &[]).await;
    let vhds = delta.expect(XdsType::VirtualHost).await;
    assert_eq!(delta_bodies(&vhds), ["ingress_http/a:v1"]);
    delta.ack(&vhds, false).await;
    delta.quiet().await;

    // Both RouteConfigurations change: the state-of-the-world stream gets both, the
    // delta stream the other one and the vhost, its shell unchanged.
    let next = with_shells("v1").with_all_changes({
        let mut changes = isobar::xds::Changes::default();
        changes.by_type.insert(
            XdsType::Route,
            [
                (
                    "ingress_http".to_string(),
                    Some(resource("ingress_http:v2")),
                ),
                ("https/x".to_string(), Some(resource("https/x:v2"))),
            ]
            .into_iter()
            .collect(),
        );
        changes.by_type.insert(
            XdsType::VirtualHost,
            [(
                "ingress_http/a".to_string(),
                Some(resource("ingress_http/a:v2")),
            )]
            .into_iter()
            .collect(),
        );
        changes
    });
    let next = Arc::new(next);
    tx.send_replace(Some(next.clone()));
    let rds = envoy.expect(XdsType::Route).await;
    assert_eq!(bodies(&rds), ["https/x:v2", "ingress_http:v2"]);
    delta_tx.send_replace(Some(next));
    let rds = delta.expect(XdsType::Route).await;
    assert_eq!(delta_bodies(&rds), ["https/x:v2"]);
    delta.ack(&rds, false).await;
    let vhds = delta.expect(XdsType::VirtualHost).await;
    assert_eq!(delta_bodies(&vhds), ["ingress_http/a:v2"]);
}

/// Envoy refuses a delta response as a whole: the resources of a refused response are
/// sent again in halves until the bad one is alone, so one bad vhost does not keep the
/// others from Envoy; the bad one is not sent again until it changes.
#[tokio::test]
async fn a_refused_delta_response_is_retried_in_halves_until_the_bad_resource_is_alone() {
    let vhosts = [
        "ingress_http/a",
        "ingress_http/b",
        "ingress_http/c",
        "ingress_http/d",
    ];
    let (tx, mut envoy) = vhds_stream(with_vhosts(&["a"], &vhosts, "v1")).await;
    // "c" is the bad one.
    let bad = |r: &DeltaDiscoveryResponse| delta_names(r).iter().any(|n| n == "ingress_http/c");
    let first = envoy.expect(XdsType::VirtualHost).await;
    assert_eq!(delta_names(&first), vhosts);
    envoy.ack(&first, true).await;
    let mut held = Vec::new();
    let mut responses = 0;
    loop {
        let Ok(Ok(Some(r))) = tokio::time::timeout(QUIET, envoy.responses.message()).await else {
            break;
        };
        responses += 1;
        assert!(responses < 10, "retries do not end");
        let refused = bad(&r);
        if !refused {
            held.extend(delta_names(&r));
        }
        envoy.ack(&r, refused).await;
    }
    held.sort();
    assert_eq!(held, ["ingress_http/a", "ingress_http/b", "ingress_http/d"]);
    // {a, b} ACKed, {c, d} refused, then {c} refused and {d} ACKed.
    assert_eq!(responses, 4);

    // The bad vhost goes again once it changes.
    let fixed = with_vhosts(&["a"], &vhosts, "v1").with_changes(
        XdsType::VirtualHost,
        [(
            "ingress_http/c".to_string(),
            Some(resource("ingress_http/c:fixed")),
        )],
    );
    tx.send_replace(Some(Arc::new(fixed)));
    let r = envoy.expect(XdsType::VirtualHost).await;
    assert_eq!(delta_names(&r), ["ingress_http/c"]);
}
