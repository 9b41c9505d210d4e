//! The Kubernetes provider against an API server over real HTTP (`apiserver.rs`), with
//! kube-rs's real client and watcher: live changes reaching xDS, relists after 410 Gone,
//! start-up gating, decode failures, Secret filtering, namespaces, and an unreachable API.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use isobar::config::Config;
use isobar::metrics::Metrics;
use isobar::provider::kube::{KubeProvider, WatchHealth};
use isobar::provider::{Event, Provider};
use isobar::runner::pipeline::Pipeline;
use isobar::xds::{Snapshot, XdsType};
use isobar_sdk::Kind;
use tokio::sync::mpsc;

use crate::apiserver::ApiServer;
use crate::support::eventually;

const WAIT: Duration = Duration::from_secs(20);

fn tenant(ns: &str, fqdn: &str) -> [String; 3] {
    [
        format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: app, namespace: {ns}}}\nspec:\n  ports: [{{name: http, port: 80, targetPort: 8080}}]\n"
        ),
        format!(
            "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: app-1\n  namespace: {ns}\n  labels: {{kubernetes.io/service-name: app}}\naddressType: IPv4\nports: [{{name: http, port: 8080, protocol: TCP}}]\nendpoints:\n  - {{addresses: [\"10.0.0.1\"], conditions: {{ready: true}}}}\n"
        ),
        proxy(ns, "site", fqdn),
    ]
}

fn proxy(ns: &str, name: &str, fqdn: &str) -> String {
    format!(
        "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  virtualhost: {{fqdn: {fqdn}}}\n  routes:\n    - services: [{{name: app, port: 80}}]\n"
    )
}

fn put_all(server: &ApiServer, objects: &[String]) {
    for object in objects {
        server.put(object);
    }
}

async fn client(server: &ApiServer) -> kube::Client {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = server.kubeconfig(dir.path());
    isobar::provider::kube::client(Some(std::path::Path::new(&path)))
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A replica on `server`, wired exactly as `isobar serve --kubeconfig` wires it.
struct Controller {
    inner: isobar::cli::serve::Controller,
}

impl std::ops::Deref for Controller {
    type Target = isobar::cli::serve::Controller;
    fn deref(&self) -> &Self::Target {
        &self.inner
    }
}

async fn controller(server: &ApiServer, namespaces: &[&str]) -> Controller {
    let mut config = Config::default();
    config.leader_election.disabled = true;
    controller_with(server, namespaces, config).await
}

async fn controller_with(
    server: &ApiServer,
    namespaces: &[&str],
    mut config: Config,
) -> Controller {
    config.pipeline.holdoff_delay.0 = Duration::ZERO;
    config.pipeline.holdoff_max_delay.0 = Duration::ZERO;
    let pipeline = Pipeline::for_config(&config).unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let kubeconfig = server.kubeconfig(dir.path());
    let choice = isobar::cli::serve::ProviderChoice::Kubernetes {
        kubeconfig: Some(kubeconfig.into()),
        namespaces: namespaces.iter().map(|s| s.to_string()).collect(),
    };
    let inner = isobar::cli::serve::Controller::start(&config, pipeline, choice)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    Controller { inner }
}

impl Controller {
    fn snapshot(&self) -> Option<Arc<Snapshot>> {
        self.snapshots.borrow().clone()
    }

    /// Whether some resource of type `t` holds `text` (a vhost name, an address).
    fn holds(&self, t: XdsType, text: &str) -> bool {
        self.snapshot().is_some_and(|s| {
            s.get(t)
                .resources
                .values()
                .any(|r| contains(r, text.as_bytes()))
        })
    }

    /// Whether a route table names `fqdn`.
    fn serves(&self, fqdn: &str) -> bool {
        self.holds(XdsType::Route, fqdn)
    }

    /// Whether some ClusterLoadAssignment holds `address`.
    fn serves_endpoint(&self, address: &str) -> bool {
        self.holds(XdsType::Endpoint, address)
    }

    async fn until(&self, what: &str, check: impl Fn(&Controller) -> bool) {
        let ok = eventually(WAIT, || async { check(self).then_some(()) }).await;
        assert!(ok.is_some(), "timed out waiting for: {what}");
    }

    fn builds(&self) -> u64 {
        metric(&self.metrics, "isobar_builds_total")
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn metric(metrics: &Metrics, name: &str) -> u64 {
    metrics
        .encode()
        .lines()
        .find_map(|l| l.strip_prefix(name)?.trim().split(' ').next()?.parse().ok())
        .unwrap_or(0)
}

fn lists(server: &ApiServer, plural: &str) -> usize {
    server
        .requests()
        .iter()
        .filter(|r| r.contains(&format!("/{plural} ")) && !r.contains("\"watch\""))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_created_updated_and_deleted_reach_xds() {
    let server = ApiServer::start().await;
    put_all(&server, &tenant("team-a", "a.example.com"));
    let c = controller(&server, &[]).await;
    c.until("a.example.com served", |c| c.serves("a.example.com"))
        .await;

    put_all(&server, &tenant("team-b", "b.example.com"));
    c.until("b.example.com served", |c| c.serves("b.example.com"))
        .await;
    server.put(&proxy("team-a", "site", "a2.example.com"));
    c.until("a renamed", |c| {
        c.serves("a2.example.com") && !c.serves("a.example.com")
    })
    .await;
    server.delete("projectcontour.io/v1", "HTTPProxy", "team-b", "site");
    c.until("b gone", |c| !c.serves("b.example.com")).await;
    assert!(c.serves("a2.example.com"));
    // Lists were paged and watches resumed from the list's resourceVersion.
    assert!(server.last_list().is_some());
    let requests = server.requests();
    assert!(
        requests
            .iter()
            .any(|r| r.contains("httpproxies") && r.contains("\"limit\"")),
        "{requests:?}"
    );
    assert!(
        requests.iter().any(|r| r.contains("httpproxies")
            && r.contains("\"resourceVersion\"")
            && r.contains("\"watch\"")),
        "{requests:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_served_before_every_watch_has_listed() {
    let server = ApiServer::start().await;
    put_all(&server, &tenant("team-a", "a.example.com"));
    server.set_down(true);
    let c = controller(&server, &[]).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        c.snapshot().is_none(),
        "a snapshot before the lists completed"
    );
    assert_eq!(c.builds(), 0);
    server.set_down(false);
    c.until("served after the lists", |c| c.serves("a.example.com"))
        .await;
}

/// Changes made while the client could not watch, then a compacted history: the client's
/// watch gets 410 Gone, it relists, and ends with the same xDS as a cold start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_410_after_missed_changes_ends_as_a_cold_start() {
    let server = ApiServer::start().await;
    put_all(&server, &tenant("team-a", "a.example.com"));
    put_all(&server, &tenant("team-b", "b.example.com"));
    let warm = controller(&server, &[]).await;
    warm.until("a and b served", |c| {
        c.serves("a.example.com") && c.serves("b.example.com")
    })
    .await;
    let lists_before = lists(&server, "httpproxies");

    server.set_down(true);
    tokio::time::sleep(Duration::from_millis(800)).await;
    server.delete("projectcontour.io/v1", "HTTPProxy", "team-b", "site");
    server.put(&proxy("team-a", "site", "a2.example.com"));
    put_all(&server, &tenant("team-c", "c.example.com"));
    server.expire_watches(true);
    server.set_down(false);

    warm.until("the missed changes applied", |c| {
        c.serves("c.example.com") && c.serves("a2.example.com") && !c.serves("b.example.com")
    })
    .await;
    assert!(
        lists(&server, "httpproxies") > lists_before,
        "the client relisted"
    );
    let cold = controller(&server, &[]).await;
    cold.until("cold start served", |c| c.serves("c.example.com"))
        .await;
    warm.until("warm equals cold", |c| c.snapshot() == cold.snapshot())
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relist_that_finds_nothing_new_builds_nothing() {
    let server = ApiServer::start().await;
    put_all(&server, &tenant("team-a", "a.example.com"));
    let c = controller(&server, &[]).await;
    c.until("served", |c| c.serves("a.example.com")).await;
    // Quiet first: the build just seen is counted after it is published, and the
    // status written back comes round as a watch event.
    let mut builds = c.builds();
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = c.builds();
        if now == builds {
            break;
        }
        builds = now;
    }
    let snapshot = c.snapshot();
    let lists_before = lists(&server, "httpproxies");
    server.expire_watches(true);
    let relisted = eventually(WAIT, || async {
        (lists(&server, "httpproxies") > lists_before).then_some(())
    })
    .await;
    assert!(relisted.is_some(), "no relist after 410");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(c.builds(), builds, "a relist of unchanged objects rebuilt");
    assert!(c.snapshot() == snapshot);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_that_does_not_decode_is_skipped_and_the_watch_goes_on() {
    let server = ApiServer::start().await;
    put_all(&server, &tenant("team-a", "a.example.com"));
    server.put(
        "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {name: broken, namespace: team-a}\nspec:\n  virtualhost: {fqdn: broken.example.com}\n  routes: 7\n",
    );
    let c = controller(&server, &[]).await;
    c.until("a served", |c| c.serves("a.example.com")).await;
    assert!(!c.serves("broken.example.com"));
    // A good object later still arrives: the watch did not stop.
    server.put(&proxy("team-a", "later", "later.example.com"));
    c.until("later served", |c| c.serves("later.example.com"))
        .await;
    // An update that breaks a served object keeps its last good version. (The count is not
    // exact: a status write on the broken object is a new event, decoded and counted again.)
    let failed_before = metric(&c.metrics, "isobar_decode_errors_total{kind=\"HTTPProxy\"}");
    assert!(failed_before >= 1, "{}", c.metrics.encode());
    server.put(
        "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {name: later, namespace: team-a}\nspec:\n  virtualhost: {fqdn: later.example.com}\n  routes: {}\n",
    );
    let errors = eventually(WAIT, || async {
        (metric(&c.metrics, "isobar_decode_errors_total{kind=\"HTTPProxy\"}") > failed_before)
            .then_some(())
    })
    .await;
    assert!(errors.is_some(), "{}", c.metrics.encode());
    assert!(c.serves("later.example.com"));
    // Both say why in their status: the one never read is invalid and not served; the
    // other keeps serving its last good version, with a warning.
    let reason =
        |status: &serde_json::Value, list: &str| valid_condition(status)[list][0]["reason"].clone();
    let told = eventually(WAIT, || async {
        let broken = proxy_status(&server, "team-a", "broken");
        let later = proxy_status(&server, "team-a", "later");
        (reason(&broken, "errors") == "ObjectNotReadable"
            && reason(&later, "warnings") == "ObjectNotReadable")
            .then_some((broken, later))
    })
    .await;
    let (broken, later) = told.unwrap_or_else(|| {
        panic!(
            "{} {}",
            proxy_status(&server, "team-a", "broken"),
            proxy_status(&server, "team-a", "later")
        )
    });
    assert_eq!(broken["currentStatus"], "invalid");
    assert_eq!(later["currentStatus"], "valid");
}

/// Provider events straight from the watchers.
async fn events(server: &ApiServer, kinds: &[Kind], namespaces: &[&str]) -> Vec<Event> {
    let provider = Box::new(KubeProvider::new(
        client(server).await,
        namespaces.iter().map(|s| s.to_string()).collect(),
        Arc::new(WatchHealth::default()),
        Arc::new(Metrics::default()),
    ));
    let (tx, mut rx) = mpsc::channel(1024);
    let kinds: BTreeSet<Kind> = kinds.iter().copied().collect();
    let task = tokio::spawn(async move {
        let _ = provider.run(kinds, tx).await;
    });
    let mut out = Vec::new();
    loop {
        match tokio::time::timeout(WAIT, rx.recv()).await {
            Ok(Some(Event::Synced)) => break,
            Ok(Some(Event::Listed { .. })) => {}
            Ok(Some(event)) => out.push(event),
            _ => panic!("the provider never synced"),
        }
    }
    task.abort();
    out
}

fn secret(name: &str, kind: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: team-a}}\ntype: {kind}\ndata: {{key: c2VjcmV0}}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_the_controller_never_needs_stay_out() {
    let server = ApiServer::start().await;
    server.put(&secret("release", "helm.sh/release.v1"));
    server.put(&secret("token", "kubernetes.io/service-account-token"));
    server.put(&secret("pull", "kubernetes.io/dockerconfigjson"));
    server.put(&secret("opaque", "Opaque"));
    server.put(
        "apiVersion: v1\nkind: Secret\nmetadata: {name: bundle, namespace: team-a}\ntype: Opaque\ndata: {ca.crt: Y2E=, password: c2VjcmV0}\n",
    );
    let events = events(&server, &[Kind::Secret], &[]).await;
    let mut seen = Vec::new();
    for event in &events {
        let Some(s) = (match event {
            Event::Apply(o) => o.get::<isobar_sdk::api::Secret>(),
            _ => None,
        }) else {
            panic!("unexpected {event:?}");
        };
        assert!(s.metadata.managed_fields.is_none(), "managedFields kept");
        let keys: Vec<String> = s.data.iter().flat_map(|d| d.keys().cloned()).collect();
        let values = s.data.iter().flat_map(|d| d.values());
        assert!(
            values.into_iter().all(|v| v.0 != b"secret"),
            "a value that cannot be a JWKS is kept: {s:?}"
        );
        seen.push((s.metadata.name.clone().unwrap_or_default(), keys));
    }
    seen.sort();
    let none: Vec<String> = Vec::new();
    assert_eq!(
        seen,
        vec![
            (
                "bundle".to_string(),
                vec!["ca.crt".to_string(), "password".to_string()]
            ),
            ("opaque".to_string(), vec!["key".to_string()]),
            ("pull".to_string(), none),
        ],
        "helm and token secrets are not listed; foreign types keep no data; Opaque ones keep their keys, \
         the values of those Isobar does not read only when they may be a JWKS"
    );
    let requests = server.requests();
    assert!(
        requests.iter().any(|r| r.contains("/secrets")
            && r.contains("type!=helm.sh/release.v1,type!=kubernetes.io/service-account-token")),
        "{requests:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_namespaces_limits_what_is_read() {
    let server = ApiServer::start().await;
    put_all(&server, &tenant("team-a", "a.example.com"));
    put_all(&server, &tenant("team-b", "b.example.com"));
    let events = events(&server, &[isobar_contour::HTTP_PROXY], &["team-b"]).await;
    let names: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            Event::Apply(o) => Some(o.key().to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(names, vec!["HTTPProxy team-b/site"]);
    assert!(
        server
            .requests()
            .iter()
            .filter(|r| r.contains("httpproxies"))
            .all(|r| r.contains("/namespaces/team-b/httpproxies"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_api_server_keeps_the_last_config_and_is_not_ready() {
    let server = ApiServer::start().await;
    put_all(&server, &tenant("team-a", "a.example.com"));
    let c = controller(&server, &[]).await;
    c.until("served", |c| c.serves("a.example.com")).await;
    assert!(c.health.healthy());
    let snapshot = c.snapshot();
    server.set_down(true);
    c.until("not healthy", |c| !c.health.healthy()).await;
    assert!(c.snapshot() == snapshot, "the served config changed");
    server.set_down(false);
    c.until("healthy again", |c| c.health.healthy()).await;
    assert!(c.serves("a.example.com"));
}

fn demo(service: &str) -> String {
    format!(
        "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: demo, namespace: default}}\nspec:\n  virtualhost: {{fqdn: demo.example.com}}\n  routes:\n    - services: [{{name: {service}, port: 80}}]\n"
    )
}

/// `isobar serve --kubeconfig` with a real Envoy: objects on the API server are routed,
/// changes arrive live, and an API server outage keeps Envoy's routes while `/readyz`
/// says not ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_from_the_kubernetes_api_through_envoy() {
    let api = ApiServer::start().await;
    let mut stack =
        crate::e2e::start_on_api(&api, &[&demo("echo-a")], ("demo.example.com", "/", "a")).await;
    api.put(&demo("echo-b"));
    stack
        .wait_for("demo.example.com", "/", "b", Duration::from_secs(10))
        .await;
    // The change is measured on its way to Envoy; the debug endpoint shows the IR.
    let text = |url: String| async move {
        match reqwest::get(url).await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    };
    let metrics = text(format!("http://127.0.0.1:{}/metrics", stack.metrics_port)).await;
    for expected in [
        "isobar_event_to_xds_seconds_count{xds_type=\"vhds\"}",
        "isobar_xds_bytes_total{xds_type=\"rds\"}",
        "isobar_xds_resources_total{xds_type=\"cds\"}",
    ] {
        assert!(metrics.contains(expected), "{expected} missing:\n{metrics}");
    }
    let ir = text(format!("http://127.0.0.1:{}/debug/ir", stack.debug_port)).await;
    let ir: serde_json::Value = serde_json::from_str(&ir).unwrap_or_else(|e| panic!("{e}: {ir}"));
    assert!(
        ir["listeners"]["ingress_http"]["virtual_hosts"]["demo.example.com"].is_object(),
        "{ir}"
    );
    let dag = text(format!("http://127.0.0.1:{}/debug/dag", stack.debug_port)).await;
    assert!(
        dag.starts_with("digraph") && dag.contains("\"http demo.example.com\""),
        "{dag}"
    );

    let ready = |port: u16| async move {
        reqwest::get(format!("http://127.0.0.1:{port}/readyz"))
            .await
            .map(|r| r.status().as_u16())
            .unwrap_or(0)
    };
    assert_eq!(ready(stack.health_port).await, 200, "{}", stack.logs());
    api.set_down(true);
    let unready = eventually(WAIT, || async {
        (ready(stack.health_port).await == 503).then_some(())
    })
    .await;
    assert!(unready.is_some(), "{}", stack.logs());
    assert_eq!(
        stack.get("demo.example.com", "/").await,
        Some((200, "b".to_string())),
        "Envoy lost its routes while the API server was down"
    );
    api.set_down(false);
    let ready_again = eventually(WAIT, || async {
        (ready(stack.health_port).await == 200).then_some(())
    })
    .await;
    assert!(ready_again.is_some(), "{}", stack.logs());

    api.delete("projectcontour.io/v1", "HTTPProxy", "default", "demo");
    let gone = eventually(WAIT, || async {
        matches!(stack.get("demo.example.com", "/").await, Some((404, _))).then_some(())
    })
    .await;
    assert!(gone.is_some(), "{}", stack.logs());

    // It led (the default Lease) and wrote status; SIGTERM releases the Lease at once.
    let lease = || {
        api.get(
            "coordination.k8s.io/v1",
            "Lease",
            "projectcontour",
            "leader-elect",
        )
    };
    let holder = lease().map(|l| l["spec"]["holderIdentity"].clone());
    assert!(
        holder
            .as_ref()
            .and_then(|h| h.as_str())
            .is_some_and(|h| !h.is_empty()),
        "{holder:?}"
    );
    let status = stack.terminate_isobar();
    assert!(
        status.is_some_and(|s| s.success()),
        "{status:?}\n{}",
        stack.logs()
    );
    assert_eq!(
        lease().map(|l| l["spec"]["holderIdentity"].clone()),
        Some(serde_json::json!("")),
        "the Lease was not released"
    );
}

fn proxy_status(server: &ApiServer, ns: &str, name: &str) -> serde_json::Value {
    server
        .get("projectcontour.io/v1", "HTTPProxy", ns, name)
        .map(|o| o["status"].clone())
        .unwrap_or_default()
}

fn valid_condition(status: &serde_json::Value) -> serde_json::Value {
    status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Valid"))
        .cloned()
        .unwrap_or_default()
}

fn writes(metrics: &Metrics, result: &str) -> u64 {
    metric(
        metrics,
        &format!("isobar_status_writes_total{{result=\"{result}\"}}"),
    )
}

/// Status is written once per change: ten rebuilds of unchanged objects write nothing;
/// other controllers' conditions stay; lastTransitionTime moves only when the Valid
/// condition's status does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_is_written_once_and_only_when_it_changes() {
    let server = ApiServer::start().await;
    put_all(&server, &tenant("team-a", "a.example.com"));
    server.put(
        "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {name: broken, namespace: team-a}\nspec:\n  virtualhost: {fqdn: broken.example.com}\n  routes:\n    - services: [{name: missing, port: 80}]\nstatus:\n  conditions:\n    - {type: example.com/Scanned, status: \"True\", reason: Clean, message: scanned, lastTransitionTime: \"2026-01-01T00:00:00Z\"}\n",
    );
    let mut config = Config::default();
    config.leader_election.disabled = true;
    config.ingress_status_address = "192.0.2.10,lb.example.com".to_string();
    let c = controller_with(&server, &[], config).await;
    let done = eventually(WAIT, || async {
        let ok = proxy_status(&server, "team-a", "site")["currentStatus"] == "valid"
            && proxy_status(&server, "team-a", "broken")["currentStatus"] == "invalid";
        ok.then_some(())
    })
    .await;
    assert!(done.is_some(), "{:?}", server.status_writes());
    let site = proxy_status(&server, "team-a", "site");
    assert_eq!(valid_condition(&site)["status"], "True");
    assert_eq!(valid_condition(&site)["observedGeneration"], 1);
    assert_eq!(site["description"], "Valid HTTPProxy");
    assert_eq!(
        site["loadBalancer"],
        serde_json::json!({"ingress": [{"ip": "192.0.2.10"}, {"hostname": "lb.example.com"}]})
    );
    let broken = proxy_status(&server, "team-a", "broken");
    let condition = valid_condition(&broken);
    assert_eq!(condition["reason"], "ErrorPresent");
    assert_eq!(
        condition["errors"][0]["reason"],
        "ServiceUnresolvedReference"
    );
    let scanned = broken["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "example.com/Scanned"))
        .cloned();
    assert!(
        scanned.is_some(),
        "another controller's condition was dropped: {broken}"
    );

    let before = server.status_writes();
    assert_eq!(before.get("team-a/site"), Some(&1));
    assert_eq!(before.get("team-a/broken"), Some(&1));
    // Ten rebuilds that change nothing for these proxies' statuses (the Service a route
    // names, its circuit breaker changed: the route is rebuilt).
    let builds = metric(&c.metrics, "isobar_builds_total");
    for i in 0..10 {
        server.put(&format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: app, namespace: team-a, annotations: {{projectcontour.io/max-connections: \"{}\"}}}}\nspec:\n  ports: [{{name: http, port: 80, targetPort: 8080}}]\n",
            i + 1
        ));
        let target = builds + i + 1;
        let built = eventually(WAIT, || async {
            (metric(&c.metrics, "isobar_builds_total") >= target).then_some(())
        })
        .await;
        assert!(built.is_some(), "rebuild {i} did not happen");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        server.status_writes(),
        before,
        "unchanged statuses were written again"
    );

    // Still invalid, for another reason: rewritten, same lastTransitionTime.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    server.put(
        "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {name: broken, namespace: team-a}\nspec:\n  virtualhost: {fqdn: broken.example.com}\n  routes:\n    - services: [{name: absent, port: 80}]\n",
    );
    let rewritten = eventually(WAIT, || async {
        let status = proxy_status(&server, "team-a", "broken");
        let message = valid_condition(&status)["errors"][0]["message"].to_string();
        message.contains("absent").then_some(status)
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "not rewritten: {}",
            proxy_status(&server, "team-a", "broken")
        )
    });
    assert_eq!(
        valid_condition(&rewritten)["lastTransitionTime"],
        condition["lastTransitionTime"]
    );
    assert_eq!(valid_condition(&rewritten)["observedGeneration"], 2);
    // Fixed: the condition turns True and its transition time moves.
    server.put(&proxy("team-a", "broken", "broken.example.com"));
    let fixed = eventually(WAIT, || async {
        let status = proxy_status(&server, "team-a", "broken");
        (status["currentStatus"] == "valid").then_some(status)
    })
    .await
    .unwrap_or_else(|| panic!("never valid"));
    assert_ne!(
        valid_condition(&fixed)["lastTransitionTime"],
        condition["lastTransitionTime"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_conflict_is_retried() {
    let server = ApiServer::start().await;
    put_all(&server, &tenant("team-a", "a.example.com"));
    server.inject_conflicts(2);
    let c = controller(&server, &[]).await;
    let written = eventually(WAIT, || async {
        (proxy_status(&server, "team-a", "site")["currentStatus"] == "valid").then_some(())
    })
    .await;
    assert!(written.is_some(), "{}", c.metrics.encode());
    // The object can show the status before the writer has counted its write.
    let counted = eventually(WAIT, || async {
        (writes(&c.metrics, "written") == 1).then_some(())
    })
    .await;
    assert!(counted.is_some(), "{}", c.metrics.encode());
    assert_eq!(writes(&c.metrics, "conflict"), 2);
    assert_eq!(writes(&c.metrics, "written"), 1);
    assert_eq!(writes(&c.metrics, "failed"), 0);
}

fn leased(lease: &str) -> Config {
    let mut config = Config::default();
    config.leader_election.lease_duration.0 = Duration::from_secs(3);
    config.leader_election.renew_deadline.0 = Duration::from_secs(2);
    config.leader_election.retry_period.0 = Duration::from_millis(500);
    config.leader_election.resource_name = lease.to_string();
    config
}

fn leading(c: &Controller) -> bool {
    c.leader.as_ref().is_some_and(|l| *l.borrow())
}

/// Two replicas on one API server: both serve xDS, exactly one writes status; killing it
/// hands over within the lease time, and a clean shutdown hands over at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_one_writer_and_a_handover() {
    let server = ApiServer::start().await;
    put_all(&server, &tenant("team-a", "a.example.com"));
    let a = controller_with(&server, &[], leased("isobar-test")).await;
    a.until("a leads", leading).await;
    let b = controller_with(&server, &[], leased("isobar-test")).await;
    a.until("a writes", |a| writes(&a.metrics, "written") == 1)
        .await;
    b.until("b serves", |b| b.serves("a.example.com")).await;
    assert!(!leading(&b), "two leaders");

    server.put(&proxy("team-a", "site", "a2.example.com"));
    a.until("a rewrites", |a| writes(&a.metrics, "written") == 2)
        .await;
    b.until("b serves the change", |b| b.serves("a2.example.com"))
        .await;
    assert_eq!(writes(&b.metrics, "written"), 0, "a follower wrote status");
    assert_eq!(
        writes(&b.metrics, "unchanged"),
        0,
        "a follower read for status"
    );

    // The leader dies without releasing: b takes over once the lease runs out.
    let killed = tokio::time::Instant::now();
    drop(a);
    b.until("b leads", leading).await;
    let handover = killed.elapsed();
    assert!(handover <= Duration::from_secs(6), "took {handover:?}");
    server.put(&proxy("team-a", "site", "a3.example.com"));
    b.until("b writes", |b| writes(&b.metrics, "written") >= 1)
        .await;
    assert!(b.serves("a3.example.com"));

    // A clean shutdown releases the lease: c leads well before the lease would expire.
    let c = controller_with(&server, &[], leased("isobar-test")).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!leading(&c));
    let stopped = tokio::time::Instant::now();
    b.inner.shutdown().await;
    c.until("c leads", leading).await;
    let handover = stopped.elapsed();
    assert!(handover < Duration::from_secs(2), "took {handover:?}");
}

fn tls_secret(ns: &str, name: &str, fqdn: &str) -> String {
    let params =
        rcgen::CertificateParams::new(vec![fqdn.to_string()]).unwrap_or_else(|e| panic!("{e}"));
    let key = rcgen::KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
    let cert = params.self_signed(&key).unwrap_or_else(|e| panic!("{e}"));
    let indent = |text: String| -> String { text.lines().map(|l| format!("    {l}\n")).collect() };
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: {ns}}}\ntype: kubernetes.io/tls\nstringData:\n  tls.crt: |\n{}  tls.key: |\n{}",
        indent(cert.pem()),
        indent(key.serialize_pem())
    )
}

/// An unreferenced Secret keeps no data in Isobar; when an HTTPProxy starts using it, it
/// is read again (one GET) before the build that needs it is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreferenced_secret_is_fetched_again_when_referenced() {
    let server = ApiServer::start().await;
    put_all(&server, &tenant("team-a", "a.example.com"));
    server.put(&tls_secret("team-a", "later", "a.example.com"));
    let c = controller(&server, &[]).await;
    c.until("a served", |c| c.serves("a.example.com")).await;
    let fetched = |server: &ApiServer| {
        server
            .requests()
            .iter()
            .any(|r| r.starts_with("GET /api/v1/namespaces/team-a/secrets/later "))
    };
    assert!(!fetched(&server));
    server.put(
        "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {name: site, namespace: team-a}\nspec:\n  virtualhost: {fqdn: a.example.com, tls: {secretName: later}}\n  routes:\n    - services: [{name: app, port: 80}]\n",
    );
    c.until("the certificate served", |c| {
        c.snapshot().is_some_and(|s| {
            s.get(XdsType::Secret)
                .resources
                .keys()
                .any(|k| k.starts_with("team-a/later/"))
        })
    })
    .await;
    assert!(fetched(&server), "the secret was not read again");
    let status = eventually(WAIT, || async {
        let s = proxy_status(&server, "team-a", "site");
        (s["currentStatus"] == "valid").then_some(s)
    })
    .await;
    assert!(
        status.is_some(),
        "{}",
        proxy_status(&server, "team-a", "site")
    );
}

/// Envoy's own client certificate (`tls.envoy-client-certificate`) is in use as long as
/// it is configured: a later full build serves it without reading the Secret again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_envoy_client_certificate_stays_in_use_across_full_builds() {
    let server = ApiServer::start().await;
    put_all(&server, &tenant("team-a", "a.example.com"));
    // Served only while some upstream is reached over TLS.
    let service = |ports: &str| {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: app, namespace: team-a}}\nspec:\n  ports: [{ports}]\n"
        )
    };
    server.put(&service("{name: http, port: 80, appProtocol: https}"));
    server.put(&tls_secret("projectcontour", "envoy-client", "envoy"));
    let mut config = Config::default();
    config.leader_election.disabled = true;
    config.tls.envoy_client_certificate.namespace = "projectcontour".to_string();
    config.tls.envoy_client_certificate.name = "envoy-client".to_string();
    let c = controller_with(&server, &[], config).await;
    let served = |c: &Controller| {
        c.snapshot().is_some_and(|s| {
            s.get(XdsType::Secret)
                .resources
                .keys()
                .any(|k| k.starts_with("projectcontour/envoy-client/"))
        })
    };
    c.until("the client certificate served", served).await;
    let builds = c.builds();
    // A Service change is a full build.
    server.put(&service(
        "{name: http, port: 80, appProtocol: https}, {name: admin, port: 81}",
    ));
    // Were it dropped after the first build, this one would first read it again.
    c.until("a full build", |c| c.builds() > builds).await;
    assert!(served(&c), "the client certificate is no longer served");
    let refetched = server
        .requests()
        .iter()
        .any(|r| r.starts_with("GET /api/v1/namespaces/projectcontour/secrets/envoy-client "));
    assert!(!refetched, "the client certificate was read again");
}

/// An EndpointSlice change runs no build: only the Service's ClusterLoadAssignment is
/// recomputed and published; every other type keeps its version, and the EDS version is
/// the same content hash a full build would give.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_change_updates_eds_alone() {
    let server = ApiServer::start().await;
    put_all(&server, &tenant("team-a", "a.example.com"));
    put_all(&server, &tenant("team-b", "b.example.com"));
    let c = controller(&server, &[]).await;
    c.until("served", |c| {
        c.serves("a.example.com") && c.serves("b.example.com")
    })
    .await;
    let before = c.snapshot().unwrap_or_else(|| panic!("no snapshot"));
    let builds = c.builds();
    server.put(
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: app-1\n  namespace: team-a\n  labels: {kubernetes.io/service-name: app}\naddressType: IPv4\nports: [{name: http, port: 8080, protocol: TCP}]\nendpoints:\n  - {addresses: [\"10.0.0.9\"], conditions: {ready: true}}\n",
    );
    c.until("new endpoint served", |c| c.serves_endpoint("10.0.0.9"))
        .await;
    let after = c.snapshot().unwrap_or_else(|| panic!("no snapshot"));
    assert_eq!(c.builds(), builds, "an endpoint change ran the pipeline");
    assert!(metric(&c.metrics, "isobar_endpoint_updates_total") >= 1);
    for t in [
        XdsType::Cluster,
        XdsType::Listener,
        XdsType::Route,
        XdsType::Secret,
    ] {
        assert_eq!(before.get(t).version, after.get(t).version, "{t:?} changed");
    }
    let (old, new) = (before.get(XdsType::Endpoint), after.get(XdsType::Endpoint));
    assert_ne!(old.version, new.version);
    let changed: Vec<&isobar::xds::Name> = new
        .digests
        .iter()
        .filter(|(name, digest)| old.digests.get(*name) != Some(*digest))
        .map(|(name, _)| name)
        .collect();
    assert_eq!(changed.len(), 1, "{changed:?}");
    assert!(changed[0].starts_with("team-a/app/"), "{changed:?}");
    assert_eq!(
        new.version,
        isobar::xds::snapshot::version_of(new.digests.iter()),
        "the EDS version is not the content hash"
    );
}

/// A real cluster's EndpointSlice names each endpoint's pod and node and carries a
/// trigger-time annotation; a pod replaced at the same address changes only those, and
/// Isobar, which routes by address, does no work for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slice_whose_addresses_stay_is_no_endpoint_change() {
    let slice = |pod: &str, at: &str| {
        format!(
            "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: app-1\n  namespace: team-a\n  labels: {{kubernetes.io/service-name: app}}\n  annotations: {{endpoints.kubernetes.io/last-change-trigger-time: \"{at}\"}}\n  ownerReferences: [{{apiVersion: v1, kind: Service, name: app, uid: 5d2f7c1e-0000-4000-8000-000000000001}}]\naddressType: IPv4\nports: [{{name: http, port: 8080, protocol: TCP}}]\nendpoints:\n  - addresses: [\"10.0.0.9\"]\n    conditions: {{ready: true}}\n    nodeName: node-{pod}\n    zone: zone-a\n    targetRef: {{kind: Pod, name: app-{pod}, namespace: team-a, uid: 5d2f7c1e-0000-4000-8000-00000000000{pod}}}\n"
        )
    };
    let server = ApiServer::start().await;
    put_all(&server, &tenant("team-a", "a.example.com"));
    server.put(&slice("1", "2026-11-24T00:00:00Z"));
    let c = controller(&server, &[]).await;
    c.until("the endpoint served", |c| c.serves_endpoint("10.0.0.9"))
        .await;
    let updates = metric(&c.metrics, "isobar_endpoint_updates_total");
    let version = c
        .snapshot()
        .map(|s| s.get(XdsType::Endpoint).version.clone());
    server.put(&slice("2", "2026-11-24T00:05:00Z"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        metric(&c.metrics, "isobar_endpoint_updates_total"),
        updates,
        "a new pod at the same address recomputed endpoints"
    );
    assert_eq!(
        c.snapshot()
            .map(|s| s.get(XdsType::Endpoint).version.clone()),
        version
    );
}

/// An admission review that names a Secret whose data the controller dropped (nothing
/// used it) waits for it to be read again and judges the real thing: a good certificate
/// is admitted without a word, a Secret that is not a certificate is refused, and a
/// Secret that does not exist (yet) is only a warning (cert-manager creates it later).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_reads_secrets_the_controller_dropped() {
    let server = ApiServer::start().await;
    put_all(&server, &tenant("team-a", "a.example.com"));
    server.put(&tls_secret("team-a", "spare", "b.example.com"));
    server.put(
        "apiVersion: v1\nkind: Secret\nmetadata: {name: junk, namespace: team-a}\ntype: kubernetes.io/tls\ndata: {tls.crt: bm90IGEgY2VydA==, tls.key: bm90IGEga2V5}\n",
    );
    let c = controller(&server, &[]).await;
    c.until("a served", |c| c.serves("a.example.com")).await;
    let review = |secret: &str| {
        let yaml = format!(
            "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: b, namespace: team-a}}\nspec:\n  virtualhost: {{fqdn: b.example.com, tls: {{secretName: {secret}}}}}\n  routes:\n    - services: [{{name: app, port: 80}}]\n"
        );
        let object = isobar::provider::manifest::parse_file(std::path::Path::new("b.yaml"), &yaml)
            .unwrap_or_else(|e| panic!("{e}"))
            .remove(0);
        let candidate = isobar::runner::inbox::Candidate {
            operation: isobar::runner::inbox::Operation::Create,
            key: object.key(),
            object: Some(object),
            dry_run: true,
        };
        let admission = c.admission.clone();
        async move {
            let (reply, answer) = tokio::sync::oneshot::channel();
            let request = isobar::runner::inbox::AdmissionRequest { candidate, reply };
            assert!(admission.send(request).await.is_ok());
            answer.await.unwrap_or_else(|e| panic!("{e}"))
        }
    };
    let good = review("spare").await;
    assert!(good.allowed && good.warnings.is_empty(), "{good:?}");
    let junk = review("junk").await;
    assert!(!junk.allowed, "{junk:?}");
    assert!(junk.message.contains("team-a/junk"), "{junk:?}");
    assert!(!junk.message.contains("not found"), "{junk:?}");
    let later = review("not-yet").await;
    assert!(later.allowed, "{later:?}");
    assert!(
        later.warnings.iter().any(|w| w.contains("team-a/not-yet")),
        "{later:?}"
    );
}

/// Without a fixed address, `status.loadBalancer` is the Envoy Service's own, and follows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_balancer_status_follows_the_envoy_service() {
    let server = ApiServer::start().await;
    put_all(&server, &tenant("team-a", "a.example.com"));
    let envoy = |ip: &str| {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: envoy, namespace: projectcontour}}\nspec:\n  type: LoadBalancer\n  ports: [{{port: 80}}]\nstatus:\n  loadBalancer:\n    ingress: [{{ip: \"{ip}\"}}]\n"
        )
    };
    server.put(&envoy("198.51.100.7"));
    let _c = controller(&server, &[]).await;
    for ip in ["198.51.100.7", "198.51.100.8"] {
        server.put(&envoy(ip));
        let seen = eventually(WAIT, || async {
            let status = proxy_status(&server, "team-a", "site");
            (status["loadBalancer"]["ingress"][0]["ip"] == ip).then_some(())
        })
        .await;
        assert!(
            seen.is_some(),
            "{ip}: {}",
            proxy_status(&server, "team-a", "site")
        );
    }
}

/// `kubernetesClientQPS` / `kubernetesClientBurst`: the client makes at most a burst of
/// requests per `burst / qps` seconds (here 2 per second: six requests take two
/// seconds or more); without them, it does not wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubernetes_client_keeps_to_its_request_rate() {
    use isobar::provider::kube::{RequestRate, client_limited};
    let server = ApiServer::start().await;
    put_all(&server, &tenant("team", "a.example.com"));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = server.kubeconfig(dir.path());
    let six_gets = |client: kube::Client| async move {
        let api: kube::Api<k8s_openapi::api::core::v1::Service> =
            kube::Api::namespaced(client, "team");
        let started = std::time::Instant::now();
        for _ in 0..6 {
            api.get("app").await.unwrap_or_else(|e| panic!("{e}"));
        }
        started.elapsed()
    };
    let limited = client_limited(
        Some(std::path::Path::new(&path)),
        RequestRate {
            qps: Some(2.0),
            burst: Some(2),
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let took = six_gets(limited).await;
    assert!(
        took >= Duration::from_millis(1900),
        "six requests in {took:?}"
    );
    let free = six_gets(client(&server).await).await;
    assert!(
        free < Duration::from_millis(900),
        "six requests in {free:?}"
    );
}

/// `serve --disable-feature tlsroutes` (Contour's): the kind is not watched at all, as
/// if its CRD were not installed, and the rest is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabled_features_are_not_watched() {
    let server = ApiServer::start().await;
    put_all(&server, &tenant("team", "a.example.com"));
    let mut config = Config::default();
    config.leader_election.disabled = true;
    config.gateway = Some(serde_json::json!({}));
    config.disabled_features = vec!["tlsroutes".to_string(), "tcproutes".to_string()];
    let replica = controller_with(&server, &[], config).await;
    replica
        .until("the proxy is served", |c| c.serves("a.example.com"))
        .await;
    let requests = server.requests();
    assert!(
        requests.iter().any(|r| r.contains("/httproutes")),
        "{requests:?}"
    );
    assert!(
        !requests
            .iter()
            .any(|r| r.contains("/tlsroutes") || r.contains("/tcproutes")),
        "{requests:?}"
    );
}
