//! A plugin the host has never heard of (`tests/plugin`: kind `Mapping` of
//! `test.isobar.dev/v1`, source `mappings`), linked into this test binary and named in
//! `pipeline.sources`, with no other change to the host: its objects are read from the
//! files provider and the Kubernetes API, routed on the listener the plugin adds
//! through a real Envoy, linked to the Services they name, and reported on in Gateway
//! API's route shape by the status writer.

use std::sync::Arc;
use std::time::Duration;

use isobar::cli::serve::{Controller, ProviderChoice};
use isobar::config::{Config, Endpoint};
use isobar::metrics::Metrics;
use isobar::runner::pipeline::Pipeline;
use isobar::xds::Snapshot;
use tokio::sync::watch;

use crate::apiserver::ApiServer;
use crate::support::{
    Behaviour, ServePorts, backend_with, envoy_on, eventually, service_yaml, write,
};

const WAIT: Duration = Duration::from_secs(30);

fn mapping(name: &str, hostname: &str, service: &str, parent: &str) -> String {
    format!(
        "apiVersion: test.isobar.dev/v1\nkind: Mapping\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  hostname: {hostname}\n  prefix: /\n  service: {service}\n  port: 80\n  parentRefs: [{{name: {parent}}}]\n"
    )
}

/// The default configuration with the test plugin's source enabled (its listener on
/// `mappings_port`, its TCP listener on `tcp_port`), Contour's listeners on `ports`,
/// and no hold-off.
fn config(ports: &ServePorts, mappings_port: u16, tcp_port: Option<u16>) -> Config {
    let mut config = Config::default();
    config
        .pipeline
        .sources
        .push(isobar_test_plugin::NAME.to_string());
    config.plugins.insert(
        isobar_test_plugin::NAME.to_string(),
        serde_json::json!({
            "listener": "mappings",
            "address": "127.0.0.1",
            "port": mappings_port,
            "tcp-port": tcp_port,
        }),
    );
    let local = |port| Endpoint {
        address: "127.0.0.1".to_string(),
        port,
    };
    config.envoy.http = local(ports.http);
    config.envoy.https = local(ports.https);
    config.envoy.metrics = local(ports.stats);
    config.envoy.access_log = String::new();
    config.pipeline.holdoff_delay.0 = Duration::ZERO;
    config.pipeline.holdoff_max_delay.0 = Duration::ZERO;
    config.leader_election.disabled = true;
    config
}

/// Serves ADS for `snapshots` on a free loopback port, reporting what Envoy refuses to
/// `rejections`; returns the port.
pub(crate) async fn serve_ads(
    snapshots: watch::Receiver<Option<Arc<Snapshot>>>,
    rejections: tokio::sync::mpsc::UnboundedSender<isobar::xds::Rejection>,
) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("bind: {e}"));
    let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
    let ads = isobar::xds::server::AdsService::new(snapshots, Arc::new(Metrics::default()))
        .reporting(rejections)
        .into_server();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(ads)
            .serve_with_incoming(isobar::xds::server::incoming(listener)),
    );
    port
}

/// `(status, body)` of `GET /` with `Host: host` on `port`, once it answers.
async fn get(client: &reqwest::Client, port: u16, host: &str) -> Option<(u16, String)> {
    let response = client
        .get(format!("http://127.0.0.1:{port}/"))
        .header("host", host)
        .send()
        .await
        .ok()?;
    let status = response.status().as_u16();
    Some((status, response.text().await.unwrap_or_default()))
}

async fn until_answer(client: &reqwest::Client, port: u16, host: &str, want: (u16, &str)) {
    let seen = eventually(WAIT, || async {
        let got = get(client, port, host).await?;
        (got.0 == want.0 && got.1 == want.1).then_some(())
    })
    .await;
    assert!(
        seen.is_some(),
        "{host} never answered {want:?}; last: {:?}",
        get(client, port, host).await
    );
}

/// A Mapping in a manifest directory is routed on the plugin's own listener through a
/// real Envoy; an edit moves it to another Service (built alone and spliced in, the
/// plugin's TCP listener still forwarding where it did); a Mapping naming a missing
/// Service answers 503 until the Service is created (a change to a Service reaches the
/// objects naming it, as their source claims); the TCP listener follows its Mapping to
/// another Service; Envoy rejects nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_kind_is_served_through_envoy_on_its_own_listener() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let manifests = dir.path().join("manifests");
    let (port_a, _) = backend_with("a", Behaviour::Echo).await;
    let (port_b, _) = backend_with("b", Behaviour::Echo).await;
    write(
        &manifests,
        "echo-a.yaml",
        &service_yaml("default", "echo-a", port_a),
    );
    write(
        &manifests,
        "echo-b.yaml",
        &service_yaml("default", "echo-b", port_b),
    );
    write(
        &manifests,
        "mapping.yaml",
        &mapping("m", "mapped.example.com", "echo-a", "mappings"),
    );
    write(
        &manifests,
        "tcp.yaml",
        &mapping("tcp", "tcp.example.com", "echo-a", "mappings-tcp"),
    );
    let ports = ServePorts::free();
    let mappings_port = ServePorts::free().http;
    let tcp_port = ServePorts::free().http;
    let config = config(&ports, mappings_port, Some(tcp_port));
    let pipeline = Pipeline::for_config(&config).unwrap_or_else(|e| panic!("{e}"));
    let controller = Controller::start(
        &config,
        pipeline,
        ProviderChoice::Files {
            dir: Some(manifests.clone()),
            namespaces: Vec::new(),
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let xds_port = serve_ads(controller.snapshots.clone(), controller.rejections.clone()).await;
    let _envoy = envoy_on(dir.path(), xds_port, "sotw");
    // A connection kept open through the TCP proxy would keep its first upstream.
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .pool_max_idle_per_host(0)
        .build()
        .unwrap_or_else(|e| panic!("{e}"));

    until_answer(&client, mappings_port, "mapped.example.com", (200, "a")).await;
    // Nothing else is on that listener.
    let other = get(&client, mappings_port, "other.example.com").await;
    assert_eq!(other.map(|r| r.0), Some(404));
    // The TCP listener forwards whatever it gets (here HTTP, any host) to echo-a.
    until_answer(&client, tcp_port, "anything.example.com", (200, "a")).await;

    let spliced = controller.metrics.spliced_builds.get();
    write(
        &manifests,
        "mapping.yaml",
        &mapping("m", "mapped.example.com", "echo-b", "mappings"),
    );
    until_answer(&client, mappings_port, "mapped.example.com", (200, "b")).await;
    assert!(
        controller.metrics.spliced_builds.get() > spliced,
        "the edit was not built alone"
    );
    until_answer(&client, tcp_port, "anything.example.com", (200, "a")).await;
    write(
        &manifests,
        "tcp.yaml",
        &mapping("tcp", "tcp.example.com", "echo-b", "mappings-tcp"),
    );
    until_answer(&client, tcp_port, "anything.example.com", (200, "b")).await;

    write(
        &manifests,
        "later.yaml",
        &mapping("later", "later.example.com", "echo-c", "mappings"),
    );
    until_answer(&client, mappings_port, "later.example.com", (503, "")).await;
    let (port_c, _) = backend_with("c", Behaviour::Echo).await;
    write(
        &manifests,
        "echo-c.yaml",
        &service_yaml("default", "echo-c", port_c),
    );
    until_answer(&client, mappings_port, "later.example.com", (200, "c")).await;
    until_answer(&client, mappings_port, "mapped.example.com", (200, "b")).await;

    let stats = client
        .get(format!("http://127.0.0.1:{}/stats", ports.stats))
        .send()
        .await
        .unwrap_or_else(|e| panic!("envoy stats: {e}"))
        .text()
        .await
        .unwrap_or_default();
    let rejected: Vec<&str> = stats
        .lines()
        .filter(|l| l.contains("update_rejected"))
        .collect();
    assert!(!rejected.is_empty(), "no update_rejected stats: {stats}");
    assert!(
        rejected.iter().all(|l| l.ends_with(": 0")),
        "Envoy rejected updates: {rejected:?}"
    );
    controller.shutdown().await;
}

fn parents(server: &ApiServer, name: &str) -> serde_json::Value {
    server
        .get("test.isobar.dev/v1", "Mapping", "default", name)
        .map(|o| o["status"]["parents"].clone())
        .unwrap_or_default()
}

fn condition<'a>(parent: &'a serde_json::Value, type_: &str) -> &'a serde_json::Value {
    parent["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == type_))
        .unwrap_or(&serde_json::Value::Null)
}

/// Read from the Kubernetes API, a Mapping's status is written in Gateway API's route
/// shape: one entry per parent, with this controller's name, `Accepted` and
/// `ResolvedRefs` (with `observedGeneration`); a parent that is not the plugin's listener
/// is not accepted; deleting the Service it names turns `ResolvedRefs` False.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_kind_gets_status_per_parent_from_the_kubernetes_api() {
    let server = ApiServer::start().await;
    for document in service_yaml("default", "echo-a", 18080).split("\n---\n") {
        server.put(document);
    }
    server.put(&mapping("m", "mapped.example.com", "echo-a", "mappings"));
    server.put(&mapping(
        "stray",
        "stray.example.com",
        "echo-a",
        "elsewhere",
    ));
    let ports = ServePorts::free();
    let config = config(&ports, ServePorts::free().http, None);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let controller = server.controller(&config, dir.path()).await;

    let written = eventually(WAIT, || async {
        let p = parents(&server, "m");
        (condition(&p[0], "ResolvedRefs")["status"] == "True").then_some(p)
    })
    .await
    .unwrap_or_else(|| panic!("no status on Mapping m: {:?}", parents(&server, "m")));
    assert_eq!(written.as_array().map(Vec::len), Some(1), "{written}");
    assert_eq!(
        written[0]["parentRef"],
        serde_json::json!({"name": "mappings"})
    );
    assert_eq!(
        written[0]["controllerName"],
        isobar::runner::status::CONTROLLER_NAME
    );
    let accepted = condition(&written[0], "Accepted");
    assert_eq!(accepted["status"], "True", "{written}");
    assert_eq!(accepted["observedGeneration"], 1, "{written}");
    assert!(accepted["lastTransitionTime"].is_string(), "{written}");

    let stray = eventually(WAIT, || async {
        let p = parents(&server, "stray");
        (!condition(&p[0], "Accepted").is_null()).then_some(p)
    })
    .await
    .unwrap_or_default();
    assert_eq!(
        condition(&stray[0], "Accepted")["reason"],
        "NoMatchingParent"
    );

    server.delete("v1", "Service", "default", "echo-a");
    let missing = eventually(WAIT, || async {
        let p = parents(&server, "m");
        (condition(&p[0], "ResolvedRefs")["status"] == "False").then_some(p)
    })
    .await
    .unwrap_or_else(|| panic!("ResolvedRefs stayed True: {:?}", parents(&server, "m")));
    assert_eq!(
        condition(&missing[0], "ResolvedRefs")["reason"],
        "BackendNotFound"
    );
    assert_eq!(condition(&missing[0], "Accepted")["status"], "True");
    controller.shutdown().await;
}

fn mapping_matching(name: &str, hostname: &str, service: &str, regex: &str) -> String {
    format!(
        "{}  regex: '{regex}'\n",
        mapping(name, hostname, service, "mappings")
    )
}

/// The `(reason, message)` of the `Accepted` condition of Mapping `name`'s first parent.
fn accepted(server: &ApiServer, name: &str) -> (String, String) {
    let parents = parents(server, name);
    let c = condition(&parents[0], "Accepted");
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
    (text(&c["reason"]), text(&c["message"]))
}

/// An edit whose configuration a real Envoy refuses (a regex only Envoy checks, which
/// no real source lets through) is traced to the object: its previous version is
/// served again, its status names Envoy's message, the metric counts it, later edits of
/// other objects reach Envoy (the refusal does not freeze the routes), the admission
/// webhook refuses the same shape, and a corrected edit is taken; over state of the
/// world and over delta xDS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_envoy_rejects_is_put_back_and_named_on_the_object() {
    a_refused_change_over("sotw").await;
    a_refused_change_over("delta").await;
}

async fn a_refused_change_over(mode: &str) {
    let server = ApiServer::start().await;
    let (port_a, _) = backend_with("a", Behaviour::Echo).await;
    let (port_b, _) = backend_with("b", Behaviour::Echo).await;
    for (name, port) in [("echo-a", port_a), ("echo-b", port_b)] {
        for document in service_yaml("default", name, port).split("\n---\n") {
            server.put(document);
        }
    }
    server.put(&mapping("m", "mapped.example.com", "echo-a", "mappings"));
    server.put(&mapping("other", "other.example.com", "echo-a", "mappings"));
    let ports = ServePorts::free();
    let mappings_port = ServePorts::free().http;
    let config = config(&ports, mappings_port, None);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let controller = server.controller(&config, dir.path()).await;
    let xds_port = serve_ads(controller.snapshots.clone(), controller.rejections.clone()).await;
    let _envoy = envoy_on(dir.path(), xds_port, mode);
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    until_answer(&client, mappings_port, "mapped.example.com", (200, "a")).await;
    until_answer(&client, mappings_port, "other.example.com", (200, "a")).await;

    // RE2 refuses `**`; nothing in Isobar checks this field.
    let refused = mapping_matching("m", "mapped.example.com", "echo-b", "/a**");
    server.put(&refused);
    let (reason, message) = eventually(WAIT, || async {
        let got = accepted(&server, "m");
        (got.0 == "EnvoyRejected").then_some(got)
    })
    .await
    .unwrap_or_else(|| panic!("{mode}: no EnvoyRejected on m: {:?}", parents(&server, "m")));
    assert_eq!(reason, "EnvoyRejected");
    let parent = &parents(&server, "m")[0];
    assert_eq!(condition(parent, "Accepted")["observedGeneration"], 2);
    assert!(
        message.contains("bad repetition operator") && message.contains("previous version"),
        "{message}"
    );
    assert_eq!(controller.metrics.envoy_rejected_objects.get(), 1);
    assert!(controller.metrics.builds.get() > 0);
    // The version before the edit is served, and Envoy takes later edits.
    until_answer(&client, mappings_port, "mapped.example.com", (200, "a")).await;
    server.put(&mapping("other", "other.example.com", "echo-b", "mappings"));
    until_answer(&client, mappings_port, "other.example.com", (200, "b")).await;
    until_answer(&client, mappings_port, "mapped.example.com", (200, "a")).await;

    // The webhook refuses the same shape, under any name.
    let same = mapping_matching("copy", "mapped.example.com", "echo-b", "/a**");
    let object = isobar::provider::manifest::parse_file(std::path::Path::new("copy.yaml"), &same)
        .unwrap_or_else(|e| panic!("{e}"))
        .remove(0);
    let (reply, answer) = tokio::sync::oneshot::channel();
    let candidate = isobar::runner::inbox::Candidate {
        operation: isobar::runner::inbox::Operation::Create,
        key: object.key(),
        object: Some(object),
        dry_run: false,
    };
    let sent = controller
        .admission
        .send(isobar::runner::inbox::AdmissionRequest { candidate, reply })
        .await;
    assert!(sent.is_ok());
    let verdict = answer.await.unwrap_or_else(|e| panic!("{e}"));
    assert!(!verdict.allowed);
    assert!(
        verdict.message.contains("bad repetition operator"),
        "{}",
        verdict.message
    );

    // A corrected edit is taken, and the condition goes.
    server.put(&mapping_matching(
        "m",
        "mapped.example.com",
        "echo-b",
        "/.*",
    ));
    until_answer(&client, mappings_port, "mapped.example.com", (200, "b")).await;
    let cleared = eventually(WAIT, || async {
        let got = accepted(&server, "m");
        (got.0 == "Accepted").then_some(got)
    })
    .await;
    assert!(cleared.is_some(), "{:?}", parents(&server, "m"));
    assert_eq!(controller.metrics.envoy_rejected_objects.get(), 0);
    controller.shutdown().await;
}
