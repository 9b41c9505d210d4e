//! End to end: `isobar serve` on a manifest directory, a real Envoy started from
//! `isobar bootstrap`, and two HTTP backends, all on loopback.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::support::{
    Behaviour, ISOBAR, Proc, ServePorts, backend_with, envoy_bin, envoy_on, eventually,
    service_yaml, spawn, write,
};

const STARTUP: Duration = Duration::from_secs(30);
const CHANGE: Duration = Duration::from_secs(10);

pub(crate) struct Stack {
    dir: tempfile::TempDir,
    http_port: u16,
    pub(crate) https_port: u16,
    pub(crate) stats_port: u16,
    pub(crate) metrics_port: u16,
    pub(crate) health_port: u16,
    pub(crate) debug_port: u16,
    /// Contour's `envoy-admin` listener.
    pub(crate) admin_port: u16,
    xds_port: u16,
    pub(crate) client: reqwest::Client,
    /// Requests each backend has seen, by Service name.
    pub(crate) hits: BTreeMap<&'static str, Arc<AtomicUsize>>,
    _isobar: Proc,
    _envoy: Proc,
}

impl Stack {
    pub(crate) fn http_port(&self) -> u16 {
        self.http_port
    }

    /// Sends Isobar SIGTERM and waits (up to 10 s) for it to exit; returns its exit status.
    pub(crate) fn terminate_isobar(&mut self) -> Option<std::process::ExitStatus> {
        let pid = self._isobar.0.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status();
        assert!(sent.is_ok_and(|s| s.success()), "kill -TERM {pid} failed");
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self._isobar.0.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    pub(crate) fn manifests(&self) -> PathBuf {
        self.dir.path().join("manifests")
    }

    pub(crate) fn logs(&self) -> String {
        let read =
            |name: &str| std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default();
        format!(
            "--- isobar.log\n{}\n--- envoy.log\n{}",
            read("isobar.log"),
            read("envoy.log")
        )
    }

    /// The body and status Envoy answers for `host` + `path`, or None if the request failed.
    /// Sends `method` `path` to Envoy's HTTP listener with `Host: host` and `headers`.
    pub(crate) async fn send(
        &self,
        method: reqwest::Method,
        host: &str,
        path: &str,
        headers: &[(&str, &str)],
    ) -> reqwest::Response {
        let url = format!("http://127.0.0.1:{}{path}", self.http_port);
        let mut request = self.client.request(method, url).header("host", host);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request
            .send()
            .await
            .unwrap_or_else(|e| panic!("{host}{path}: {e}\n{}", self.logs()))
    }

    pub(crate) async fn get(&self, host: &str, path: &str) -> Option<(u16, String)> {
        let url = format!("http://127.0.0.1:{}{path}", self.http_port);
        let response = self
            .client
            .get(url)
            .header("host", host)
            .send()
            .await
            .ok()?;
        let status = response.status().as_u16();
        Some((status, response.text().await.ok()?))
    }

    /// The body of a 200 answer to `GET path` with `Host: host` (panics on another).
    pub(crate) async fn body_of(&self, host: &str, path: &str) -> String {
        self.body(host, path).await
    }

    async fn body(&self, host: &str, path: &str) -> String {
        match self.get(host, path).await {
            Some((200, body)) => body,
            other => panic!("GET {host}{path}: {other:?}\n{}", self.logs()),
        }
    }

    /// Waits until `host` + `path` answers 200 with `want`; returns how long that took.
    pub(crate) async fn wait_for(
        &self,
        host: &str,
        path: &str,
        want: &str,
        timeout: Duration,
    ) -> Duration {
        let start = Instant::now();
        let seen = eventually(timeout, || async {
            matches!(self.get(host, path).await, Some((200, ref body)) if body == want)
                .then_some(())
        })
        .await;
        if seen.is_none() {
            panic!(
                "GET {host}{path} never answered {want:?} (last: {:?})\n{}",
                self.get(host, path).await,
                self.logs()
            );
        }
        start.elapsed()
    }

    /// GET `path` from Envoy's admin, on its unix socket.
    pub(crate) async fn admin_get(&self, path: &str) -> String {
        crate::support::admin_get(&self.dir.path().join("admin.sock"), path).await
    }

    /// Every domain of the route configurations Envoy is running.
    /// The virtual hosts of every route configuration Envoy holds.
    async fn envoy_vhosts(&self) -> Vec<serde_json::Value> {
        let dump = self
            .admin_get("/config_dump?resource=dynamic_route_configs")
            .await;
        let doc: serde_json::Value = serde_json::from_str(&dump).unwrap_or_default();
        doc["configs"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|c| {
                c["route_config"]["virtual_hosts"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .collect()
    }

    pub(crate) async fn envoy_domains(&self) -> std::collections::BTreeSet<String> {
        self.envoy_vhosts()
            .await
            .iter()
            .flat_map(|v| v["domains"].as_array().cloned().unwrap_or_default())
            .filter_map(|d| d.as_str().map(str::to_string))
            .collect()
    }

    /// The clusters the routes of `host` send to, as Envoy holds them.
    async fn route_clusters(&self, host: &str) -> std::collections::BTreeSet<String> {
        self.envoy_vhosts()
            .await
            .iter()
            .filter(|v| {
                v["domains"]
                    .as_array()
                    .is_some_and(|d| d.iter().any(|d| d == host))
            })
            .flat_map(|v| v["routes"].as_array().cloned().unwrap_or_default())
            .filter_map(|r| r["route"]["cluster"].as_str().map(str::to_string))
            .collect()
    }

    /// How many builds isobar has completed (`isobar_builds_total`), if it answers.
    pub(crate) async fn builds(&self) -> Option<u64> {
        let url = format!("http://127.0.0.1:{}/metrics", self.metrics_port);
        let text = self.client.get(url).send().await.ok()?.text().await.ok()?;
        text.lines()
            .find(|l| l.starts_with("isobar_builds_total"))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|v| v.parse::<u64>().ok())
    }

    /// Envoy's own stats through the `stats-health` listener Isobar configures.
    pub(crate) async fn envoy_stats(&self) -> String {
        let url = format!("http://127.0.0.1:{}/stats", self.stats_port);
        match self.client.get(url).send().await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(e) => panic!("envoy stats: {e}\n{}", self.logs()),
        }
    }

    /// The status Envoy's `stats-health` listener answers for `path`.
    async fn stats_status(&self, path: &str) -> Option<u16> {
        let url = format!("http://127.0.0.1:{}{path}", self.stats_port);
        let response = self.client.get(url).send().await.ok()?;
        Some(response.status().as_u16())
    }

    /// Envoy's `update_rejected` stats that are not 0.
    pub(crate) async fn rejected_updates(&self) -> Vec<String> {
        let stats = self.envoy_stats().await;
        stats
            .lines()
            .filter(|l| l.contains("update_rejected") && !l.ends_with(": 0"))
            .map(str::to_string)
            .collect()
    }

    pub(crate) async fn assert_nothing_rejected(&self) {
        let stats = self.envoy_stats().await;
        assert!(
            stats.contains("update_rejected"),
            "no update_rejected stats in:\n{stats}"
        );
        let bad = self.rejected_updates().await;
        assert!(
            bad.is_empty(),
            "Envoy rejected updates: {bad:?}\n{}",
            self.logs()
        );
    }
}

/// An HTTPProxy in `default` for `fqdn` (a wildcard too): each route a prefix and its
/// services with their weights.
pub(crate) fn proxy_yaml(name: &str, fqdn: &str, routes: &[(&str, &[(&str, u32)])]) -> String {
    let mut text = format!(
        "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  virtualhost: {{fqdn: '{fqdn}'}}\n  routes:\n"
    );
    for (prefix, services) in routes {
        text.push_str(&format!(
            "    - conditions: [{{prefix: \"{prefix}\"}}]\n      services:\n"
        ));
        for (service, weight) in *services {
            text.push_str(&format!(
                "        - {{name: {service}, port: 80, weight: {weight}}}\n"
            ));
        }
    }
    text
}

const SHOP_INGRESS: &str = r#"apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: shop, namespace: default}
spec:
  rules:
    - host: shop.example.com
      http:
        paths:
          - {path: /, pathType: Prefix, backend: {service: {name: echo-a, port: {name: http}}}}
          - {path: /b, pathType: Prefix, backend: {service: {name: echo-b, port: {number: 80}}}}
"#;

/// Backends `a`, `b` and `c` (answering their own name), Services `echo-a` and `echo-b`
/// in `default` and `echo-c` in `team` pointing at them, plus `files` in the manifest
/// directory; then isobar and Envoy, ready once `ready` = (host, path, body) answers.
pub(crate) async fn start(files: &[(&str, &str)], ready: (&str, &str, &str)) -> Stack {
    start_with(None, files, ready).await
}

/// [`start`], with `contour.yaml` given to `isobar serve -c` when set. Envoy is
/// bootstrapped as `isobar bootstrap` does by default: delta ADS, so plain vhosts come
/// over VHDS (`xds-server.vhds` is on by default).
pub(crate) async fn start_with(
    config: Option<&str>,
    files: &[(&str, &str)],
    ready: (&str, &str, &str),
) -> Stack {
    start_from(config, files, None, ready, "delta").await
}

/// [`start_with`], with Envoy on state-of-the-world ADS (Contour's bootstrap): every
/// plain vhost in the one `ingress_http` RouteConfiguration.
pub(crate) async fn start_sotw(
    config: Option<&str>,
    files: &[(&str, &str)],
    ready: (&str, &str, &str),
) -> Stack {
    start_from(config, files, None, ready, "sotw").await
}

/// [`start`], with Envoy asking for incremental (delta) ADS.
pub(crate) async fn start_delta(
    config: Option<&str>,
    files: &[(&str, &str)],
    ready: (&str, &str, &str),
) -> Stack {
    start_from(config, files, None, ready, "delta").await
}

/// [`start`] with `isobar serve --kubeconfig` on `api`: the backends' Services and
/// EndpointSlices are created there, and `objects` (one document each) with them.
pub(crate) async fn start_on_api(
    api: &crate::apiserver::ApiServer,
    objects: &[&str],
    ready: (&str, &str, &str),
) -> Stack {
    start_from(None, &[], Some((api, objects)), ready, "delta").await
}

async fn start_from(
    config: Option<&str>,
    files: &[(&str, &str)],
    api: Option<(&crate::apiserver::ApiServer, &[&str])>,
    ready: (&str, &str, &str),
    xds_mode: &str,
) -> Stack {
    // Without an Envoy to run, fail before starting anything.
    envoy_bin();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let manifests = dir.path().join("manifests");
    let config_path = dir.path().join("contour.yaml");
    std::fs::write(&config_path, config.unwrap_or("{}\n")).unwrap_or_else(|e| panic!("{e}"));
    let mut hits = BTreeMap::new();
    for (ns, name, body, behaviour) in [
        ("default", "echo-a", "a", Behaviour::Echo),
        ("default", "echo-b", "b", Behaviour::Echo),
        ("team", "echo-c", "c", Behaviour::Echo),
        ("default", "flaky", "flaky", Behaviour::Flaky),
        ("default", "slow", "slow", Behaviour::Slow),
        ("default", "mirror", "mirror", Behaviour::Echo),
    ] {
        let (port, count) = backend_with(body, behaviour).await;
        hits.insert(name, count);
        match api {
            Some((server, _)) => {
                for document in service_yaml(ns, name, port).split("\n---\n") {
                    server.put(document);
                }
            }
            None => write(
                &manifests,
                &format!("services/{name}.yaml"),
                &service_yaml(ns, name, port),
            ),
        }
    }
    for (name, text) in files {
        write(&manifests, name, text);
    }
    let source = match api {
        Some((server, objects)) => {
            for object in objects {
                server.put(object);
            }
            vec!["--kubeconfig".to_string(), server.kubeconfig(dir.path())]
        }
        None => vec![
            "--manifests".to_string(),
            manifests.to_string_lossy().into_owned(),
        ],
    };

    let (ports, isobar_proc) = spawn_isobar(dir.path(), &config_path, &source).await;
    let ServePorts {
        xds: xds_port,
        http: http_port,
        https: https_port,
        stats: stats_port,
        metrics: metrics_port,
        health: health_port,
        debug: debug_port,
        admin: admin_port,
    } = ports;
    let envoy_proc = envoy_on(dir.path(), xds_port, xds_mode);
    let stack = Stack {
        dir,
        http_port,
        https_port,
        stats_port,
        metrics_port,
        health_port,
        debug_port,
        admin_port,
        xds_port,
        hits,
        client: reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_else(|e| panic!("client: {e}")),
        _isobar: isobar_proc,
        _envoy: envoy_proc,
    };
    let (host, path, body) = ready;
    stack.wait_for(host, path, body, STARTUP).await;
    stack
}

/// `isobar serve` on free loopback ports. A port chosen free can be taken by another
/// test before isobar binds it; isobar then exits naming it, and is started again on
/// other ports (three tries) rather than failing a test over the race.
async fn spawn_isobar(dir: &Path, config: &Path, source: &[String]) -> (ServePorts, Proc) {
    let log = dir.join("isobar.log");
    for _ in 0..3 {
        let ports = ServePorts::free();
        let mut isobar = spawn(
            "isobar",
            Command::new(ISOBAR)
                .args(["serve", "-c", &config.to_string_lossy(), "--insecure"])
                .args(source)
                .args(ports.args())
                .envs(ports.envs())
                // The fuzz tests' own settings are not isobar's (which refuses them).
                .env_remove("ISOBAR_FUZZ_CASES")
                .env_remove("ISOBAR_FUZZ_SEED")
                .env_remove("ISOBAR_FUZZ_DEBUG"),
            &log,
        );
        let listening = [ports.xds, ports.health, ports.metrics, ports.debug];
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let exited = isobar.0.try_wait().ok().flatten().is_some();
            if exited {
                break;
            }
            let mut bound = true;
            for port in listening {
                bound &= tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .is_ok();
            }
            if bound || tokio::time::Instant::now() > deadline {
                return (ports, isobar);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let said = std::fs::read_to_string(&log).unwrap_or_default();
        if !said.contains("Address already in use") {
            return (ports, isobar);
        }
    }
    panic!(
        "isobar could not bind free ports three times:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}

/// The quick-start shape: HTTPProxy `demo` and Ingress `shop`.
async fn start_demo() -> Stack {
    let demo = proxy_yaml(
        "demo",
        "demo.example.com",
        &[
            ("/", &[("echo-a", 1)]),
            ("/b", &[("echo-b", 1)]),
            ("/split", &[("echo-a", 80), ("echo-b", 20)]),
        ],
    );
    start(
        &[("demo.yaml", &demo), ("shop.yaml", SHOP_INGRESS)],
        ("demo.example.com", "/", "a"),
    )
    .await
}

pub(crate) fn edit(manifests: &Path, name: &str, text: &str) {
    write(manifests, name, text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_envoy_routes_what_isobar_serves() {
    let stack = start_demo().await;

    // Routing by host and by path.
    assert_eq!(stack.body("demo.example.com", "/").await, "a");
    assert_eq!(stack.body("demo.example.com", "/b").await, "b");
    assert_eq!(stack.body("shop.example.com", "/b/x").await, "b");
    assert_eq!(
        stack.get("nowhere.example.com", "/").await.map(|(s, _)| s),
        Some(404),
        "an unknown host has no route"
    );

    // HTTPProxy prefixes are string prefixes (Contour); Ingress Prefix is per segment.
    assert_eq!(stack.body("demo.example.com", "/bar").await, "b");
    assert_eq!(stack.body("shop.example.com", "/bar").await, "a");

    // An 80/20 split, within tolerance over 400 requests.
    let mut to_a = 0;
    for _ in 0..400 {
        if stack.body("demo.example.com", "/split").await == "a" {
            to_a += 1;
        }
    }
    assert!(
        (280..=360).contains(&to_a),
        "80/20 split sent {to_a}/400 to a"
    );

    // Editing a manifest changes routing without restarting Envoy.
    edit(
        &stack.manifests(),
        "demo.yaml",
        &proxy_yaml("demo", "demo.example.com", &[("/", &[("echo-b", 1)])]),
    );
    let took = stack.wait_for("demo.example.com", "/", "b", CHANGE).await;
    eprintln!("hot reload: manifest written → Envoy routing changed in {took:?}");

    // A broken manifest is reported, keeps its last good objects, and other files still
    // apply.
    edit(
        &stack.manifests(),
        "shop.yaml",
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: [oops\n",
    );
    edit(
        &stack.manifests(),
        "other.yaml",
        &proxy_yaml("other", "other.example.com", &[("/", &[("echo-a", 1)])]),
    );
    stack.wait_for("other.example.com", "/", "a", CHANGE).await;
    assert_eq!(stack.body("shop.example.com", "/b").await, "b");
    assert_eq!(stack.body("demo.example.com", "/").await, "b");
    let problems = eventually(CHANGE, || async {
        let url = format!("http://127.0.0.1:{}/metrics", stack.metrics_port);
        let text = stack.client.get(url).send().await.ok()?.text().await.ok()?;
        text.lines()
            .any(|l| l.starts_with("isobar_manifest_errors") && !l.ends_with(" 0"))
            .then_some(())
    })
    .await;
    let log = std::fs::read_to_string(stack.dir.path().join("isobar.log")).unwrap_or_default();
    assert!(
        problems.is_some(),
        "isobar_manifest_errors did not count the broken manifest\n{}",
        stack.logs()
    );
    let reports: Vec<&str> = log.lines().filter(|l| l.contains("shop.yaml")).collect();
    assert_eq!(
        reports.len(),
        1,
        "the broken file is reported once: {reports:?}"
    );
    assert!(
        reports[0].contains("line=3"),
        "the report names the line: {reports:?}"
    );

    a_new_cluster_warms_on_endpoints_envoy_holds(&stack).await;

    // Only Envoy's ready and stats endpoints are exposed on the stats listener.
    assert_eq!(stack.stats_status("/config_dump").await, Some(404));
    assert_eq!(stack.stats_status("/ready").await, Some(200));

    stack.assert_nothing_rejected().await;
}

/// A route's cluster changes (its load-balancing strategy) while its Service, and so its
/// endpoint set, stays. Envoy warms the new cluster on endpoints it already holds and does
/// not ask for them again (envoy#47302), so Isobar must send them anew: the route moves to
/// the new cluster well within Envoy's 15-second fetch timeout, answering all along.
async fn a_new_cluster_warms_on_endpoints_envoy_holds(stack: &Stack) {
    let site = |policy: &str| {
        format!(
            "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: warm, namespace: default}}\nspec:\n  virtualhost: {{fqdn: warm.example.com}}\n  routes:\n    - services: [{{name: echo-a, port: 80}}]{policy}\n"
        )
    };
    edit(&stack.manifests(), "warm.yaml", &site(""));
    stack.wait_for("warm.example.com", "/", "a", CHANGE).await;
    let before = stack.route_clusters("warm.example.com").await;
    assert_eq!(before.len(), 1, "{before:?}\n{}", stack.logs());
    edit(
        &stack.manifests(),
        "warm.yaml",
        &site("\n      loadBalancerPolicy: {strategy: Random}"),
    );
    let started = Instant::now();
    let moved = eventually(Duration::from_secs(5), || async {
        let answer = stack.get("warm.example.com", "/").await;
        assert_eq!(
            answer,
            Some((200, "a".to_string())),
            "a request failed while the route moved to its new cluster\n{}",
            stack.logs()
        );
        let now = stack.route_clusters("warm.example.com").await;
        (!now.is_empty() && now != before).then_some(())
    })
    .await;
    assert!(
        moved.is_some(),
        "the route did not move to its new cluster within 5 s\n{}",
        stack.logs()
    );
    assert_eq!(
        stack.body("warm.example.com", "/").await,
        "a",
        "{}",
        stack.logs()
    );
    eprintln!(
        "a new cluster on held endpoints: routed through it after {:?}",
        started.elapsed()
    );
}

/// Delta xDS with `xds-server.vhds` off: `ingress_http` whole, sent again per change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_envoy_over_delta_xds() {
    delta_changes(Some("xds-server:\n  vhds: false\n"), "delta").await;
}

/// An Envoy on state-of-the-world xDS (Contour's bootstrap) against the defaults, where
/// delta Envoys get VHDS: it gets every plain vhost in `ingress_http`, sent again whole
/// per change, and the same changes reach it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_envoy_over_state_of_the_world_gets_whole_routes() {
    let stack = delta_changes(None, "sotw").await;
    let stats = stack.envoy_stats().await;
    let updates = stats
        .lines()
        .find_map(|l| l.strip_prefix("http.ingress_http.rds.ingress_http.update_success: "))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or_default();
    assert!(
        updates >= 3,
        "ingress_http updated {updates} times\n{stats}"
    );
    assert!(
        !stats.contains("rds.vhds."),
        "VHDS over state of the world\n{stats}"
    );
}

/// `xds-server.vhds`: the same changes reach Envoy as vhosts of their own; the
/// `ingress_http` RouteConfiguration is sent once. A state-of-the-world stream on the same
/// server gets `ingress_http` whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_envoy_over_vhds() {
    let stack = delta_changes(None, "delta").await;
    let stats = stack.envoy_stats().await;
    let stat = |name: &str| {
        stats
            .lines()
            .find_map(|l| {
                l.strip_prefix(name)?
                    .strip_prefix(": ")?
                    .parse::<u64>()
                    .ok()
            })
            .unwrap_or_else(|| panic!("no stat {name}\n{stats}"))
    };
    // The first vhosts, then each of the three changes (at least: Envoy may batch).
    assert!(
        stat("http.ingress_http.rds.vhds.ingress_http.update_success") >= 2,
        "{stats}"
    );
    assert_eq!(
        stat("http.ingress_http.rds.ingress_http.update_success"),
        1,
        "the RouteConfiguration was sent again for a vhost change\n{stats}"
    );
    assert!(
        stack.envoy_domains().await.contains("other.example.com"),
        "{}",
        stack.logs()
    );
    // An Envoy on state-of-the-world xDS is served too: `ingress_http` whole, every vhost
    // in it, once it has taken the clusters and subscribed to their endpoints.
    use envoy_types::pb::envoy::config::cluster::v3::Cluster;
    use envoy_types::pb::envoy::config::route::v3::RouteConfiguration;
    use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
    use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
    use prost::Message;
    let mut ads =
        AggregatedDiscoveryServiceClient::connect(format!("http://127.0.0.1:{}", stack.xds_port))
            .await
            .unwrap_or_else(|e| panic!("connect: {e}"));
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let url = |t: &str| format!("type.googleapis.com/envoy.config.{t}");
    let request = |t: &str, names: Vec<String>, nonce: &str| DiscoveryRequest {
        type_url: url(t),
        resource_names: names,
        response_nonce: nonce.to_string(),
        ..Default::default()
    };
    let _ = tx.send(request("cluster.v3.Cluster", Vec::new(), "")).await;
    let mut responses = ads
        .stream_aggregated_resources(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap_or_else(|e| panic!("a state-of-the-world stream: {e}"))
        .into_inner();
    let mut next = async || {
        tokio::time::timeout(Duration::from_secs(30), responses.message())
            .await
            .ok()
            .and_then(|r| r.ok().flatten())
            .unwrap_or_else(|| panic!("no response on the state-of-the-world stream"))
    };
    let cds = next().await;
    let clusters: Vec<String> = cds
        .resources
        .iter()
        .filter_map(|a| Cluster::decode(&a.value[..]).ok())
        .map(|c| match c.eds_cluster_config {
            Some(eds) if !eds.service_name.is_empty() => eds.service_name,
            _ => c.name,
        })
        .collect();
    let _ = tx
        .send(request("cluster.v3.Cluster", Vec::new(), &cds.nonce))
        .await;
    let _ = tx
        .send(request(
            "endpoint.v3.ClusterLoadAssignment",
            clusters.clone(),
            "",
        ))
        .await;
    let eds = next().await;
    let _ = tx
        .send(request(
            "endpoint.v3.ClusterLoadAssignment",
            clusters,
            &eds.nonce,
        ))
        .await;
    let _ = tx
        .send(request(
            "route.v3.RouteConfiguration",
            vec!["ingress_http".into()],
            "",
        ))
        .await;
    let rds = loop {
        let r = next().await;
        if r.type_url == url("route.v3.RouteConfiguration") {
            break r;
        }
    };
    let routes =
        RouteConfiguration::decode(&rds.resources[0].value[..]).unwrap_or_else(|e| panic!("{e}"));
    let domains: Vec<&str> = routes
        .virtual_hosts
        .iter()
        .flat_map(|v| v.domains.iter().map(String::as_str))
        .collect();
    assert!(routes.vhds.is_none(), "{routes:?}");
    assert!(domains.contains(&"other.example.com"), "{domains:?}");
}

/// Changes a route, adds a site and removes one over delta xDS, checking each through
/// Envoy; `config` is the `contour.yaml`.
async fn delta_changes(config: Option<&str>, mode: &str) -> Stack {
    let demo = proxy_yaml(
        "demo",
        "demo.example.com",
        &[("/", &[("echo-a", 1)]), ("/b", &[("echo-b", 1)])],
    );
    let files = [("demo.yaml", demo.as_str()), ("shop.yaml", SHOP_INGRESS)];
    let ready = ("demo.example.com", "/", "a");
    let stack = match mode {
        "sotw" => start_sotw(config, &files, ready).await,
        _ => start_delta(config, &files, ready).await,
    };
    let log = std::fs::read_to_string(stack.dir.path().join("isobar.log")).unwrap_or_default();
    let transport = match mode {
        "sotw" => "transport=state-of-the-world",
        _ => "transport=delta",
    };
    assert!(
        log.lines()
            .any(|l| l.contains("envoy connected") && l.contains(transport)),
        "{}",
        stack.logs()
    );
    assert_eq!(stack.body("shop.example.com", "/b/x").await, "b");

    // A changed route, a new site, a removed site (its route and cluster go away).
    edit(
        &stack.manifests(),
        "demo.yaml",
        &proxy_yaml("demo", "demo.example.com", &[("/", &[("echo-b", 1)])]),
    );
    stack.wait_for("demo.example.com", "/", "b", CHANGE).await;
    edit(
        &stack.manifests(),
        "other.yaml",
        &proxy_yaml("other", "other.example.com", &[("/", &[("mirror", 1)])]),
    );
    stack
        .wait_for("other.example.com", "/", "mirror", CHANGE)
        .await;
    std::fs::remove_file(stack.manifests().join("shop.yaml")).unwrap_or_else(|e| panic!("{e}"));
    let gone = eventually(CHANGE, || async {
        (stack.get("shop.example.com", "/b/x").await.map(|(s, _)| s) == Some(404)).then_some(())
    })
    .await;
    assert!(
        gone.is_some(),
        "the removed Ingress still routes\n{}",
        stack.logs()
    );
    assert_eq!(stack.body("demo.example.com", "/").await, "b");
    assert_eq!(stack.body("other.example.com", "/").await, "mirror");
    if config.is_none() && mode == "delta" {
        a_new_cluster_warms_on_endpoints_envoy_holds(&stack).await;
    }
    stack.assert_nothing_rejected().await;
    stack
}

const SITE: &str = r#"apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: site, namespace: default}
spec:
  virtualhost: {fqdn: site.example.com}
  routes:
    - services: [{name: echo-a, port: 80}]
    - conditions: [{header: {name: x-canary, exact: "yes"}}]
      services: [{name: echo-b, port: 80}]
    - conditions: [{exact: /exact}]
      services: [{name: echo-b, port: 80}]
    - conditions: [{regex: "/re/[0-9]+"}]
      services: [{name: echo-b, port: 80}]
    - conditions: [{prefix: /q}, {queryParameter: {name: v, exact: "2"}}]
      services: [{name: echo-b, port: 80}]
    - conditions: [{prefix: /h}, {header: {name: x-env, notcontains: prod, treatMissingAsEmpty: true}}]
      services: [{name: echo-b, port: 80}]
  includes:
    - {name: blog, namespace: team, conditions: [{prefix: /blog}]}
    - {name: gone, namespace: team, conditions: [{prefix: /gone}]}
---
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: blog, namespace: team}
spec:
  routes:
    - services: [{name: echo-c, port: 80}]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_envoy_matches_conditions_and_follows_includes() {
    let stack = start(&[("site.yaml", SITE)], ("site.example.com", "/", "a")).await;
    let get = |path: &'static str, header: Option<(&'static str, &'static str)>| {
        let stack = &stack;
        async move {
            let headers: Vec<(&str, &str)> = header.into_iter().collect();
            let response = stack
                .send(reqwest::Method::GET, "site.example.com", path, &headers)
                .await;
            let status = response.status().as_u16();
            (status, response.text().await.unwrap_or_default())
        }
    };
    let ok = |body: &str| (200, body.to_string());
    assert_eq!(get("/", None).await, ok("a"));
    assert_eq!(
        get("/", Some(("x-canary", "yes"))).await,
        ok("b"),
        "header exact"
    );
    assert_eq!(get("/", Some(("x-canary", "no"))).await, ok("a"));
    assert_eq!(get("/exact", None).await, ok("b"), "exact path");
    assert_eq!(get("/exactly", None).await, ok("a"));
    assert_eq!(get("/re/42", None).await, ok("b"), "regex path");
    assert_eq!(get("/re/x", None).await, ok("a"));
    assert_eq!(get("/q?v=2", None).await, ok("b"), "query exact");
    assert_eq!(get("/q?v=3", None).await, ok("a"));
    assert_eq!(
        get("/h", None).await,
        ok("b"),
        "missing header is empty, so not 'prod'"
    );
    assert_eq!(get("/h", Some(("x-env", "prod-eu"))).await, ok("a"));
    assert_eq!(
        get("/blog/post", None).await,
        ok("c"),
        "included proxy in another namespace"
    );
    assert_eq!(
        get("/gone", None).await.0,
        502,
        "an include that does not exist answers 502"
    );
    stack.assert_nothing_rejected().await;
}

const POLICIES: &str = r#"apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: policies, namespace: default}
spec:
  virtualhost: {fqdn: policy.example.com}
  routes:
    - services: [{name: echo-a, port: 80}]
    - conditions: [{prefix: /app}]
      pathRewritePolicy:
        replacePrefix: [{replacement: /}]
      services: [{name: echo-a, port: 80}]
    - conditions: [{prefix: /headers}]
      requestHeadersPolicy:
        set: [{name: X-Hello, value: "100% %CONTOUR_NAMESPACE%"}, {name: Host, value: rewritten.internal}]
      responseHeadersPolicy:
        set: [{name: X-Served-By, value: isobar}]
        remove: [x-seen-path]
      services: [{name: echo-a, port: 80}]
    - conditions: [{prefix: /service-headers}]
      services:
        - name: echo-b
          port: 80
          requestHeadersPolicy:
            set: [{name: x-hello, value: "%CONTOUR_SERVICE_NAME%:%CONTOUR_SERVICE_PORT%"}]
    - conditions: [{prefix: /moved}]
      requestRedirectPolicy: {scheme: https, hostname: new.example.com, statusCode: 302, path: /there}
    - conditions: [{prefix: /teapot}]
      directResponsePolicy: {statusCode: 418, body: "short and stout"}
    - conditions: [{prefix: /flaky}]
      retryPolicy: {count: 3, retryOn: [5xx]}
      services: [{name: flaky, port: 80}]
    - conditions: [{prefix: /slow}]
      timeoutPolicy: {response: 300ms}
      services: [{name: slow, port: 80}]
    - conditions: [{prefix: /cookies}]
      cookieRewritePolicies:
        - name: session
          pathRewrite: {value: /}
          domainRewrite: {value: example.com}
          secure: false
          sameSite: Lax
      services: [{name: echo-a, port: 80}]
    - conditions: [{prefix: /mirrored}]
      services:
        - {name: echo-b, port: 80}
        - {name: mirror, port: 80, mirror: true}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_envoy_applies_route_policies() {
    let stack = start(
        &[("policies.yaml", POLICIES)],
        ("policy.example.com", "/", "a"),
    )
    .await;
    let get = |path: &'static str| {
        let stack = &stack;
        async move {
            let response = stack
                .send(reqwest::Method::GET, "policy.example.com", path, &[])
                .await;
            let status = response.status().as_u16();
            let headers = response.headers().clone();
            let header = move |name: &str| {
                headers
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string)
            };
            (status, header, response.text().await.unwrap_or_default())
        }
    };

    // Prefix rewrite, with Contour's trailing-slash twin: `/app/x` → `/x`, `/app` → `/`.
    let (_, seen, _) = get("/app/x?q=1").await;
    assert_eq!(seen("x-seen-path").as_deref(), Some("/x?q=1"));
    let (_, seen, _) = get("/app").await;
    assert_eq!(seen("x-seen-path").as_deref(), Some("/"));

    // Request and response header policies; `%` escaped, Contour's variables expanded.
    let (status, seen, _) = get("/headers").await;
    assert_eq!(status, 200);
    assert_eq!(seen("x-seen-hello").as_deref(), Some("100% default"));
    assert_eq!(seen("x-seen-host").as_deref(), Some("rewritten.internal"));
    assert_eq!(seen("x-served-by").as_deref(), Some("isobar"));
    assert_eq!(seen("x-seen-path"), None, "removed from the response");
    let (_, seen, body) = get("/service-headers").await;
    assert_eq!(body, "b");
    assert_eq!(seen("x-seen-hello").as_deref(), Some("echo-b:80"));

    // Redirects and direct responses.
    let (status, seen, _) = get("/moved").await;
    assert_eq!(status, 302);
    assert_eq!(
        seen("location").as_deref(),
        Some("https://new.example.com/there")
    );
    let (status, _, body) = get("/teapot").await;
    assert_eq!((status, body.as_str()), (418, "short and stout"));

    // Retries hide a backend failing every other request; a timeout answers 504.
    for _ in 0..6 {
        assert_eq!(get("/flaky").await.0, 200, "retried");
    }
    assert_eq!(get("/slow").await.0, 504);

    // Cookie rewriting: only the named cookie's attributes change.
    let response = stack
        .send(reqwest::Method::GET, "policy.example.com", "/cookies", &[])
        .await;
    let cookies: Vec<String> = response
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok().map(str::to_string))
        .collect();
    assert_eq!(
        cookies,
        vec![
            "session=abc; Path=/; Domain=example.com; SameSite=Lax".to_string(),
            "other=1; Path=/".to_string()
        ]
    );

    // Mirroring: the mirror sees the requests, the client sees the primary.
    let before = stack.hits["mirror"].load(Ordering::SeqCst);
    for _ in 0..5 {
        assert_eq!(get("/mirrored").await.2, "b");
    }
    let mirrored = eventually(CHANGE, || async {
        (stack.hits["mirror"].load(Ordering::SeqCst) >= before + 5).then_some(())
    })
    .await;
    assert!(mirrored.is_some(), "the mirror saw no requests");

    stack.assert_nothing_rejected().await;
}

const IP_FILTERS: &str = r#"apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: ips, namespace: default}
spec:
  virtualhost:
    fqdn: ips.example.com
    ipAllowPolicy: [{source: Peer, cidr: 10.0.0.0/8}]
  routes:
    - services: [{name: echo-a, port: 80}]
    - conditions: [{prefix: /loopback}]
      ipAllowPolicy: [{source: Peer, cidr: 127.0.0.0/8}]
      services: [{name: echo-a, port: 80}]
    - conditions: [{prefix: /denied}]
      ipDenyPolicy: [{source: Peer, cidr: 127.0.0.1}]
      services: [{name: echo-a, port: 80}]
---
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: open, namespace: default}
spec:
  virtualhost: {fqdn: open.example.com}
  routes: [{services: [{name: echo-b, port: 80}]}]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_envoy_enforces_ip_allow_and_deny() {
    let stack = start(&[("ips.yaml", IP_FILTERS)], ("open.example.com", "/", "b")).await;
    let stack = &stack;
    let status = |path: &'static str| async move {
        stack.get("ips.example.com", path).await.map(|(s, _)| s)
    };
    assert_eq!(status("/").await, Some(403), "vhost allows only 10.0.0.0/8");
    assert_eq!(
        status("/loopback").await,
        Some(200),
        "the route's own allow list wins"
    );
    assert_eq!(
        status("/denied").await,
        Some(403),
        "the route denies 127.0.0.1"
    );
    stack.assert_nothing_rejected().await;
}

fn root(ns: &str, name: &str, fqdn: &str, created: &str, service: &str) -> String {
    format!(
        "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: {name}, namespace: {ns}, creationTimestamp: \"{created}\"}}\nspec:\n  virtualhost: {{fqdn: {fqdn}}}\n  routes: [{{services: [{{name: {service}, port: 80}}]}}]\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_envoy_duplicate_fqdns_contour_mode() {
    let original = root(
        "default",
        "original",
        "site.example.com",
        "2025-01-01T00:00:00Z",
        "echo-a",
    );
    let stack = start(
        &[
            ("original.yaml", &original),
            (
                "open.yaml",
                &root(
                    "default",
                    "open",
                    "open.example.com",
                    "2025-01-01T00:00:00Z",
                    "echo-b",
                ),
            ),
        ],
        ("site.example.com", "/", "a"),
    )
    .await;
    // A newcomer claims the same FQDN: Contour takes the site down for both.
    let newcomer = root(
        "team",
        "newcomer",
        "SITE.example.com.",
        "2026-01-01T00:00:00Z",
        "echo-c",
    );
    write(&stack.manifests(), "newcomer.yaml", &newcomer);
    let gone = eventually(CHANGE, || async {
        matches!(stack.get("site.example.com", "/").await, Some((404, _))).then_some(())
    })
    .await;
    assert!(
        gone.is_some(),
        "both claimants invalid: the FQDN is not served\n{}",
        stack.logs()
    );
    assert_eq!(
        stack.body("open.example.com", "/").await,
        "b",
        "other sites are untouched"
    );
    stack.assert_nothing_rejected().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_envoy_oldest_wins_and_root_namespaces() {
    let config = "plugins:\n  conflicts: {mode: oldest-wins}\n  root-namespaces: {namespaces: [default, team]}\n";
    let original = root(
        "default",
        "original",
        "site.example.com",
        "2025-01-01T00:00:00Z",
        "echo-a",
    );
    let stack = start_with(
        Some(config),
        &[("original.yaml", &original)],
        ("site.example.com", "/", "a"),
    )
    .await;
    let newcomer = root(
        "team",
        "newcomer",
        "site.example.com",
        "2026-01-01T00:00:00Z",
        "echo-c",
    );
    write(&stack.manifests(), "newcomer.yaml", &newcomer);
    // A root outside the root namespaces is refused; one inside is served.
    write(
        &stack.manifests(),
        "rogue.yaml",
        &root(
            "rogue",
            "rogue",
            "rogue.example.com",
            "2026-01-01T00:00:00Z",
            "echo-b",
        ),
    );
    write(
        &stack.manifests(),
        "later.yaml",
        &root(
            "team",
            "later",
            "later.example.com",
            "2026-01-01T00:00:00Z",
            "echo-c",
        ),
    );
    stack.wait_for("later.example.com", "/", "c", CHANGE).await;
    assert_eq!(
        stack.body("site.example.com", "/").await,
        "a",
        "the oldest claimant keeps the site"
    );
    assert_eq!(
        stack.get("rogue.example.com", "/").await.map(|r| r.0),
        Some(404)
    );
    stack.assert_nothing_rejected().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_envoy_allows_websocket_upgrades_only_where_enabled() {
    let proxy = "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {name: ws, namespace: default}\nspec:\n  virtualhost: {fqdn: ws.example.com}\n  routes:\n    - services: [{name: echo-a, port: 80}]\n    - conditions: [{prefix: /ws}]\n      enableWebsockets: true\n      services: [{name: echo-a, port: 80}]\n";
    let stack = start(&[("ws.yaml", proxy)], ("ws.example.com", "/", "a")).await;
    let upgrade = |path: &'static str| {
        let stack = &stack;
        async move {
            let headers = [("connection", "upgrade"), ("upgrade", "websocket")];
            let response = stack
                .send(reqwest::Method::GET, "ws.example.com", path, &headers)
                .await;
            Some(response.status().as_u16())
        }
    };
    // Envoy refuses an upgrade on a route without websockets, and passes it on where
    // they are enabled (the test backend then answers without upgrading).
    assert_eq!(upgrade("/").await, Some(403));
    assert_eq!(upgrade("/ws").await, Some(200));
    stack.assert_nothing_rejected().await;
}

const CORS_AND_LIMITS: &str = r#"apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: cors, namespace: default}
spec:
  virtualhost:
    fqdn: cors.example.com
    corsPolicy:
      allowOrigin: ["https://app.example.com"]
      allowMethods: [GET, PUT]
      maxAge: 1m
  routes:
    - services: [{name: echo-a, port: 80}]
    - conditions: [{prefix: /limited}]
      rateLimitPolicy:
        local: {requests: 2, unit: minute, responseHeadersToAdd: [{name: x-limited, value: "yes"}]}
      services: [{name: echo-a, port: 80}]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_envoy_answers_cors_and_enforces_local_rate_limits() {
    let stack = start(
        &[("cors.yaml", CORS_AND_LIMITS)],
        ("cors.example.com", "/", "a"),
    )
    .await;
    let preflight = |origin: &'static str| {
        let stack = &stack;
        async move {
            let headers = [("origin", origin), ("access-control-request-method", "PUT")];
            let r = stack
                .send(reqwest::Method::OPTIONS, "cors.example.com", "/", &headers)
                .await;
            r.headers()
                .get("access-control-allow-origin")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        }
    };
    assert_eq!(
        preflight("https://app.example.com").await.as_deref(),
        Some("https://app.example.com")
    );
    assert_eq!(preflight("https://evil.example.com").await, None);

    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(stack.get("cors.example.com", "/limited").await.map(|r| r.0));
    }
    assert_eq!(
        statuses,
        vec![Some(200), Some(200), Some(429), Some(429)],
        "2 per minute"
    );
    assert_eq!(
        stack.body("cors.example.com", "/").await,
        "a",
        "other routes are not limited"
    );
    stack.assert_nothing_rejected().await;
}

/// Contour's graceful shutdown with a real Envoy: `envoy shutdown-manager` holds
/// `/shutdown` until `envoy shutdown` has failed Envoy's health checks (its readiness
/// fails) and the open connections have closed — a request in flight on a keep-alive
/// connection finishes first — and written the ready file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_shutdown_drains_before_the_manager_lets_envoy_stop() {
    let stack = start(
        &[
            (
                "slow.yaml",
                &proxy_yaml("slow", "slow.example.com", &[("/", &[("slow", 1)])]),
            ),
            (
                "ready.yaml",
                &proxy_yaml("ready", "ready.example.com", &[("/", &[("echo-a", 1)])]),
            ),
        ],
        ("ready.example.com", "/", "a"),
    )
    .await;
    let ready_file = stack.dir.path().join("ok");
    let port = crate::support::ServePorts::free().http;
    let _manager = spawn(
        "shutdown-manager",
        Command::new(ISOBAR).args([
            "envoy",
            "shutdown-manager",
            "--serve-port",
            &port.to_string(),
            "--ready-file",
            &ready_file.display().to_string(),
        ]),
        &stack.dir.path().join("shutdown-manager.log"),
    );
    let manager = format!("http://127.0.0.1:{port}");
    let healthy = eventually(CHANGE, || async {
        let r = stack
            .client
            .get(format!("{manager}/healthz"))
            .send()
            .await
            .ok()?;
        (r.status() == 200).then_some(())
    })
    .await;
    assert!(
        healthy.is_some(),
        "the shutdown manager never served /healthz"
    );
    // Envoy's preStop: held until Envoy has drained.
    let held = {
        let client = reqwest::Client::new();
        let url = format!("{manager}/shutdown");
        tokio::spawn(async move { client.get(url).send().await.map(|r| r.status().as_u16()) })
    };
    // A request in flight on a keep-alive connection.
    let keep_alive = reqwest::Client::builder()
        .pool_max_idle_per_host(1)
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let url = format!("http://127.0.0.1:{}/", stack.http_port);
    let in_flight = {
        let (client, url) = (keep_alive.clone(), url.clone());
        tokio::spawn(async move {
            let r = client
                .get(url)
                .header("host", "slow.example.com")
                .send()
                .await
                .ok()?;
            Some((r.status().as_u16(), r.text().await.ok()?))
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let shutdown_log = stack.dir.path().join("shutdown.log");
    let _shutdown = spawn(
        "envoy shutdown",
        Command::new(ISOBAR).args([
            "envoy",
            "shutdown",
            "--admin-address",
            &stack.dir.path().join("admin.sock").display().to_string(),
            "--check-interval",
            "200ms",
            "--ready-file",
            &ready_file.display().to_string(),
        ]),
        &shutdown_log,
    );
    // Envoy stops being ready at once; the request in flight still finishes.
    let unready = eventually(CHANGE, || async {
        let url = format!("http://127.0.0.1:{}/ready", stack.stats_port);
        let r = stack.client.get(url).send().await.ok()?;
        (r.status() != 200).then_some(())
    })
    .await;
    assert!(
        unready.is_some(),
        "Envoy still reports ready after envoy shutdown began\n{}",
        std::fs::read_to_string(&shutdown_log).unwrap_or_default()
    );
    assert_eq!(
        in_flight.await.unwrap_or_else(|e| panic!("{e}")),
        Some((200, "slow".to_string()))
    );
    assert!(
        !ready_file.exists(),
        "drained while a keep-alive connection was open"
    );
    assert!(
        !held.is_finished(),
        "/shutdown answered before Envoy drained"
    );
    // The client goes away: its connection closes. The stack's own client has an idle
    // connection too: its next request is answered with `Connection: close` (Envoy
    // closes connections as they are used while health checks fail). Envoy has drained.
    drop(keep_alive);
    let _ = stack.get("ready.example.com", "/").await;
    let drained = eventually(Duration::from_secs(90), || async {
        ready_file.exists().then_some(())
    })
    .await;
    assert!(
        drained.is_some(),
        "Envoy never drained\n{}",
        std::fs::read_to_string(&shutdown_log).unwrap_or_default()
    );
    let status = tokio::time::timeout(Duration::from_secs(5), held)
        .await
        .unwrap_or_else(|_| panic!("/shutdown still held after the ready file was written"));
    assert_eq!(status.ok().and_then(Result::ok), Some(200));
}

/// Contour's configuration keys through a real Envoy: JSON access log lines with the
/// configured fields, slashes not merged, `permitInsecure` ignored; Envoy takes it all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contour_configuration_keys_reach_envoy() {
    let ca = crate::tls::new_ca("keys CA");
    let cert = crate::tls::issue(&ca, "secure-keys.example.com");
    let config = r#"accesslog-format: json
json-fields: ["@timestamp", path, response_code, upstream_protocol, "hello=%REQ(X-HELLO)%"]
disableMergeSlashes: true
disablePermitInsecure: true
timeouts: {request-timeout: 30s, connection-idle-timeout: 90s}
network: {num-trusted-hops: 1}
"#;
    let secure = "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {name: secure, namespace: default}\nspec:\n  virtualhost: {fqdn: secure-keys.example.com, tls: {secretName: keys-cert}}\n  routes: [{permitInsecure: true, services: [{name: echo-b, port: 80}]}]\n";
    let stack = start_with(
        Some(config),
        &[
            (
                "plain.yaml",
                &proxy_yaml("plain", "keys.example.com", &[("/", &[("echo-a", 1)])]),
            ),
            ("secure.yaml", secure),
            (
                "cert.yaml",
                &crate::tls::tls_secret("default", "keys-cert", &cert),
            ),
        ],
        ("keys.example.com", "/", "a"),
    )
    .await;
    let response = stack
        .send(
            reqwest::Method::GET,
            "keys.example.com",
            "//a//b",
            &[("x-hello", "there")],
        )
        .await;
    let seen = response
        .headers()
        .get("x-seen-path")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    assert_eq!(seen.as_deref(), Some("//a//b"), "slashes were merged");
    assert_eq!(
        stack.get("secure-keys.example.com", "/").await.map(|r| r.0),
        Some(301),
        "permitInsecure was honoured"
    );
    let logged = eventually(CHANGE, || async {
        let log = std::fs::read_to_string(stack.dir.path().join("envoy.log")).ok()?;
        log.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|l| l["hello"] == "there")
    })
    .await
    .unwrap_or_else(|| panic!("no JSON access log line\n{}", stack.logs()));
    assert_eq!(logged["path"], "//a//b");
    assert_eq!(logged["response_code"], 200);
    assert!(logged["@timestamp"].is_string(), "{logged}");
    // One of Envoy's operators by its name in lower case, as Contour takes them.
    assert_eq!(logged["upstream_protocol"], "HTTP/1.1", "{logged}");
    stack.assert_nothing_rejected().await;
}

/// `--use-proxy-protocol`: Envoy's listeners read the load balancer's PROXY header first;
/// a connection with one is served, one without is closed unanswered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_protocol_listeners_need_the_load_balancers_header() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let manifests = dir.path().join("manifests");
    let (port, _) = backend_with("a", Behaviour::Echo).await;
    write(
        &manifests,
        "echo.yaml",
        &service_yaml("default", "echo-a", port),
    );
    write(
        &manifests,
        "proxy.yaml",
        &proxy_yaml("pp", "pp.example.com", &[("/", &[("echo-a", 1)])]),
    );
    let ports = ServePorts::free();
    let _isobar = spawn(
        "isobar",
        Command::new(ISOBAR)
            .args(["serve", "--insecure", "--use-proxy-protocol", "--manifests"])
            .arg(&manifests)
            .args(ports.args())
            .envs(ports.envs()),
        &dir.path().join("isobar.log"),
    );
    let _envoy = envoy_on(dir.path(), ports.xds, "sotw");
    let send = |proxy_header: bool| async move {
        let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", ports.http))
            .await
            .ok()?;
        let mut request = String::new();
        if proxy_header {
            request.push_str(&format!(
                "PROXY TCP4 203.0.113.7 127.0.0.1 5555 {}\r\n",
                ports.http
            ));
        }
        request.push_str("GET / HTTP/1.1\r\nHost: pp.example.com\r\nConnection: close\r\n\r\n");
        tcp.write_all(request.as_bytes()).await.ok()?;
        let mut answer = Vec::new();
        tokio::time::timeout(Duration::from_secs(2), tcp.read_to_end(&mut answer))
            .await
            .ok()?
            .ok()?;
        Some(String::from_utf8_lossy(&answer).into_owned())
    };
    let served = eventually(STARTUP, || async {
        send(true).await.filter(|a| a.starts_with("HTTP/1.1 200"))
    })
    .await;
    let logs = || std::fs::read_to_string(dir.path().join("envoy.log")).unwrap_or_default();
    let served = served.unwrap_or_else(|| panic!("never served with a PROXY header\n{}", logs()));
    assert!(served.ends_with('a'), "{served}");
    let plain = send(false).await.unwrap_or_default();
    assert!(
        !plain.starts_with("HTTP/1.1 200"),
        "served without a PROXY header: {plain}"
    );
}

/// The value of counter `name` in Envoy's stats.
fn counter(stats: &str, name: &str) -> Option<u64> {
    let prefix = format!("{name}: ");
    stats
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|v| v.parse().ok())
}

/// A configuration whose routes need no upstream (a maintenance page and an HTTPS
/// redirect) or one without endpoints yet: Envoy's first requests for clusters,
/// endpoints and listeners are answered at once, empty where empty, so a fresh Envoy
/// serves within a second of starting instead of waiting out its 15-second
/// `initial_fetch_timeout` — over delta and over state of the world.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configuration_without_clusters_is_served_at_once() {
    let maintenance = "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {name: maintenance, namespace: default}\nspec:\n  virtualhost: {fqdn: maintenance.example.com}\n  routes:\n    - conditions: [{prefix: /}]\n      directResponsePolicy: {statusCode: 200, body: down for maintenance}\n    - conditions: [{prefix: /secure}]\n      requestRedirectPolicy: {scheme: https, statusCode: 301}\n";
    // A Service whose first endpoints have not arrived: its cluster's endpoints are
    // answered empty, so the cluster warms (and answers 503) instead of holding Envoy.
    let pending = "apiVersion: v1\nkind: Service\nmetadata: {name: pending, namespace: default}\nspec:\n  ports: [{name: http, port: 80, targetPort: 8080}]\n---\napiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {name: pending, namespace: default}\nspec:\n  virtualhost: {fqdn: pending.example.com}\n  routes:\n    - services: [{name: pending, port: 80}]\n";
    for mode in ["delta", "sotw"] {
        let started = Instant::now();
        let stack = start_from(
            None,
            &[("maintenance.yaml", maintenance), ("pending.yaml", pending)],
            None,
            ("maintenance.example.com", "/", "down for maintenance"),
            mode,
        )
        .await;
        let took = started.elapsed();
        let (status, _) = stack
            .get("maintenance.example.com", "/secure")
            .await
            .unwrap_or_else(|| panic!("{mode}: no answer\n{}", stack.logs()));
        assert_eq!(status, 301, "{mode}");
        let pending = stack.get("pending.example.com", "/").await;
        assert_eq!(pending.map(|(s, _)| s), Some(503), "{mode}");
        let stats = stack.envoy_stats().await;
        for stalled in [
            "cluster_manager.cds.init_fetch_timeout",
            "listener_manager.lds.init_fetch_timeout",
            "cluster_manager.warming_clusters",
        ] {
            assert_eq!(
                counter(&stats, stalled),
                Some(0),
                "{mode}: {stalled}\n{stats}"
            );
        }
        assert_eq!(
            counter(&stats, "cluster_manager.cds.update_success").map(|n| n >= 1),
            Some(true),
            "{mode}: the empty set of clusters was never taken\n{stats}"
        );
        // Isobar's start, Envoy's and Envoy's first answer.
        assert!(
            took < Duration::from_secs(1),
            "{mode}: first answer after {took:?}\n{}",
            stack.logs()
        );
        eprintln!("{mode}: first answer {took:?} after start");
    }
}
