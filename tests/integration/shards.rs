//! An HTTP listener's routes split into shards (`xds-server.route-shards-from`), through
//! a real Envoy over delta and state-of-the-world xDS: every host answers as one table
//! answers it (exact hosts in any case and with a port, wildcard hosts, the default
//! vhost), the scope header never reaches a backend whatever the client sends, and a
//! change to one vhost sends Envoy that vhost's shard alone.

use std::time::Duration;

use isobar::xds::shard::{MIN_SHARDS, shard_of};

use crate::e2e::{Stack, edit, proxy_yaml, start_sotw, start_with};
use crate::support::eventually;

const CONFIG: &str = "xds-server:\n  route-shards-from: 1\n";
const ONE_TABLE: &str = "xds-server:\n  route-shards-from: 0\n";

/// An HTTPProxy sending each prefix to one service.
fn proxy(name: &str, fqdn: &str, routes: &[(&str, &str)]) -> String {
    let routes: Vec<(&str, [(&str, u32); 1])> =
        routes.iter().map(|(p, s)| (*p, [(*s, 1)])).collect();
    let routes: Vec<(&str, &[(&str, u32)])> = routes.iter().map(|(p, s)| (*p, &s[..])).collect();
    proxy_yaml(name, fqdn, &routes)
}

const DEFAULT_BACKEND: &str = r#"apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: fallback, namespace: team}
spec:
  defaultBackend: {service: {name: echo-c, port: {number: 80}}}
"#;

/// Twenty sites, an exact host under a wildcard, the wildcard, and a default backend.
fn files() -> Vec<(String, String)> {
    let mut files = vec![
        (
            "exact.yaml".to_string(),
            proxy("exact", "a.wild.example.com", &[("/", "echo-a")]),
        ),
        (
            "wild.yaml".to_string(),
            proxy("wild", "*.wild.example.com", &[("/", "echo-b")]),
        ),
        ("fallback.yaml".to_string(), DEFAULT_BACKEND.to_string()),
    ];
    for i in 0..20 {
        files.push((
            format!("site-{i}.yaml"),
            proxy(
                &format!("site-{i}"),
                &format!("site-{i}.example.com"),
                &[("/", "mirror")],
            ),
        ));
    }
    files
}

/// An Envoy counter, 0 when Envoy has none of that name.
fn counter(stats: &str, name: &str) -> u64 {
    stats
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(": ")?.parse().ok())
        .unwrap_or(0)
}

/// Each shard's RouteConfiguration updates Envoy took.
async fn shard_updates(stack: &Stack) -> Vec<u64> {
    let stats = stack.envoy_stats().await;
    (0..MIN_SHARDS)
        .map(|k| {
            counter(
                &stats,
                &format!("http.ingress_http.rds.ingress_http/shard-{k:02}.update_success"),
            )
        })
        .collect()
}

/// Hosts of every kind: exact in any case and with a port, under a wildcard (one label,
/// two labels), matched by no vhost but the default, IP literals.
const HOSTS: &[&str] = &[
    "a.wild.example.com",
    "A.Wild.EXAMPLE.com",
    "a.wild.example.com:8080",
    "x.wild.example.com",
    "deep.x.wild.example.com",
    "X.WILD.example.com:80",
    "site-7.example.com",
    "SITE-13.example.com:1234",
    "unknown.example.org",
    "localhost",
    "10.1.2.3:8080",
    "[::1]:8080",
];

/// Status and body of each of [`HOSTS`] at `/`, each sent with a scope header of its
/// own; with `split` routes that header is overwritten and removed before the backend
/// (checked).
async fn answers(stack: &Stack, split: bool) -> Vec<(String, u16, String)> {
    let mut out = Vec::new();
    for host in HOSTS {
        let response = stack
            .send(
                reqwest::Method::GET,
                host,
                "/",
                &[("x-isobar-scope", "ingress_http/0")],
            )
            .await;
        let status = response.status().as_u16();
        let scope = response
            .headers()
            .get("x-seen-scope")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        if split {
            assert_eq!(scope, "", "{host}: the scope header reached the backend");
        }
        let body = response.text().await.unwrap_or_default();
        out.push((host.to_string(), status, body));
    }
    out
}

/// Every host answers as it does from one table (`one`), and as the vhosts say.
async fn answers_as_one_table(stack: &Stack, one: &Stack) {
    let split = answers(stack, true).await;
    assert_eq!(split, answers(one, false).await, "{}", stack.logs());
    for (host, want) in [
        ("A.Wild.EXAMPLE.com", "a"),
        ("X.WILD.example.com:80", "b"),
        ("SITE-13.example.com:1234", "mirror"),
        ("unknown.example.org", "c"),
    ] {
        assert!(
            split.contains(&(host.to_string(), 200, want.to_string())),
            "{host}: {split:?}"
        );
    }
}

async fn a_change_sends_one_shard(stack: &Stack) {
    let before = shard_updates(stack).await;
    assert!(
        before.iter().all(|n| *n >= 1),
        "a shard was never sent: {before:?}"
    );
    edit(
        &stack.manifests(),
        "site-3.yaml",
        &proxy(
            "site-3",
            "site-3.example.com",
            &[("/", "mirror"), ("/new", "echo-a")],
        ),
    );
    stack
        .wait_for("site-3.example.com", "/new", "a", Duration::from_secs(10))
        .await;
    let k = shard_of("site-3.example.com", MIN_SHARDS);
    let after = eventually(Duration::from_secs(5), || async {
        let now = shard_updates(stack).await;
        (now[k] > before[k]).then_some(now)
    })
    .await
    .unwrap_or_else(|| panic!("shard {k} was not sent again"));
    let others: Vec<usize> = (0..MIN_SHARDS)
        .filter(|j| *j != k && after[*j] != before[*j])
        .collect();
    assert!(others.is_empty(), "shards {others:?} were sent again too");
    stack.assert_nothing_rejected().await;
}

const READY: (&str, &str, &str) = ("site-1.example.com", "/", "mirror");

/// Both stacks (split, and one table) on `files`, Envoy over state of the world or delta.
async fn split_and_one_table(sotw: bool) {
    let files = files();
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    let start = async |config| match sotw {
        true => start_sotw(Some(config), &files, READY).await,
        false => start_with(Some(config), &files, READY).await,
    };
    let stack = start(CONFIG).await;
    let one = start(ONE_TABLE).await;
    answers_as_one_table(&stack, &one).await;
    a_change_sends_one_shard(&stack).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_routes_answer_as_one_table_over_delta() {
    split_and_one_table(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_routes_answer_as_one_table_over_state_of_the_world() {
    split_and_one_table(true).await;
}
