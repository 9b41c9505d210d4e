//! Structure-aware fuzzing of the whole path: random but plausible HTTPProxies,
//! Ingresses, Services, EndpointSlices and Secrets (field values drawn from good ones,
//! edge values and the shapes that once crashed Isobar or reached Envoy as a NACK) →
//! manifest decoding → every source → the pipeline → the xDS translator. Invariants: no
//! panic (on a thread with a Tokio worker's 2 MiB stack, so unbounded recursion shows),
//! and every resource passes Envoy's own validation rules, checked in process
//! (`isobar::xds::validate`). A fixed-seed corpus is also served to a real Envoy, which
//! must reject nothing.
//!
//! `ISOBAR_FUZZ_CASES` sets the number of object sets (1,000 by default, a short run);
//! `ISOBAR_FUZZ_SEED` a seed (0 by default, the fixed corpus; `random` for a new one
//! each run, printed when it fails). A long run:
//! `ISOBAR_FUZZ_CASES=200000 ISOBAR_FUZZ_SEED=random cargo test --release --test integration fuzz::`.

use std::path::Path;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, RngAlgorithm, TestRng, TestRunner};
use serde_json::{Value, json};

use isobar::cli::serve::envoy_settings;
use isobar::config::Config;
use isobar::provider::manifest::parse_file;
use isobar::runner::pipeline::Pipeline;
use isobar::xds::validate::check;
use isobar::xds::{XdsType, translate};
use isobar_sdk::Objects;

/// Plausible values and edge values, side by side.
fn text(pool: &'static [&'static str]) -> impl Strategy<Value = String> {
    // The pools' first entries are good values, the rest edge values: most values are
    // good, so that most objects are valid and what they build reaches the encoder.
    let good = pool.len().min(3);
    prop_oneof![
        40 => proptest::sample::select(&pool[..good]).prop_map(str::to_string),
        4 => proptest::sample::select(pool).prop_map(str::to_string),
        1 => "[ -~]{0,12}",
        1 => "[\\x00-\\x7f]{0,6}",
        1 => (1usize..3000).prop_map(|n| "x".repeat(n)),
    ]
}

const PATHS: &[&str] = &[
    "/", "/a", "/a/", "/api/v1", "//x", "", "a", "/a?", "/b#c", "/\u{0}", "/é", "/a/../b",
];
const REGEXES: &[&str] = &[
    "/a.*",
    "^/b[0-9]+$",
    "(?i)/c",
    "/(?-u)a",
    "/((a{30}){30}){30}",
    "/a**",
    "/[z-a]",
    "/\\8",
    "\\p{Letter}",
    "\\pL+",
    "/(",
    "(?P<n>x)",
    "/a{1001}",
    "/\\u0041",
    "[[:alpha:]]",
    "/x{2}{3}",
];
const HEADER_NAMES: &[&str] = &[
    "x-a",
    "X-Tenant",
    "user-agent",
    "x a",
    "",
    ":path",
    "host",
    "x\u{0}a",
    "content-type",
];
const VALUES: &[&str] = &[
    "v",
    "",
    "%REQ(x-a)%",
    "100%",
    "a\r\nb: c",
    "\u{7f}",
    "%CONTOUR_NAMESPACE%",
    "\t",
];
const DURATIONS: &[&str] = &[
    "1s",
    "250ms",
    "1m30s",
    "infinity",
    "0",
    "0s",
    "-1s",
    "2562048h",
    "100000000000s",
    "315576000001s",
    "1.5h",
    "s",
    "",
    "9223372036s",
];
const HOSTS: &[&str] = &[
    "a.example.com",
    "b.example.com",
    "*.example.com",
    "A.Example.com.",
    "a..example.com",
    "",
    "x",
];
const ADDRESSES: &[&str] = &[
    "127.0.0.1",
    "10.0.0.1",
    "::1",
    "0x7f.0.0.1",
    "2130706433",
    "not-an-ip",
    "",
    "1.2.3.4.5",
    "fe80::1%eth0",
];

/// Mostly `good`, sometimes any number (edge values among them).
fn mostly(good: &'static [i64]) -> impl Strategy<Value = i64> {
    prop_oneof![
        8 => proptest::sample::select(good),
        1 => number(),
    ]
}

fn number() -> impl Strategy<Value = i64> {
    prop_oneof![
        12 => 0i64..200,
        1 => Just(-1i64),
        1 => Just(8_589_934_592i64),
        1 => Just(i64::MAX),
        4 => 400i64..600,
        1 => Just(315_576_000_001i64),
    ]
}

fn header_condition() -> impl Strategy<Value = Value> {
    (text(HEADER_NAMES), 0usize..7, text(VALUES), text(REGEXES)).prop_map(
        |(name, kind, value, regex)| match kind {
            0 => json!({"header": {"name": name, "present": true}}),
            1 => json!({"header": {"name": name, "exact": value}}),
            2 => json!({"header": {"name": name, "contains": value}}),
            3 => json!({"header": {"name": name, "notcontains": value}}),
            4 => json!({"header": {"name": name, "regex": regex}}),
            5 => json!({"queryParameter": {"name": name, "prefix": value}}),
            _ => json!({"queryParameter": {"name": name, "regex": regex}}),
        },
    )
}

fn path_condition() -> impl Strategy<Value = Value> {
    (0usize..3, text(PATHS), text(REGEXES)).prop_map(|(kind, path, regex)| match kind {
        0 => json!({"prefix": path}),
        1 => json!({"exact": path}),
        _ => json!({"regex": regex}),
    })
}

fn headers_policy() -> impl Strategy<Value = Value> {
    (text(HEADER_NAMES), text(VALUES), proptest::option::weighted(0.3, text(HEADER_NAMES)))
        .prop_map(|(name, value, remove)| json!({"set": [{"name": name, "value": value}], "remove": remove.into_iter().collect::<Vec<_>>()}))
}

fn service() -> impl Strategy<Value = Value> {
    (
        proptest::sample::select(&["web", "web", "api", "api", "missing"][..]),
        mostly(&[80]),
        proptest::option::of(mostly(&[0, 1, 10, 90])),
        proptest::option::weighted(0.3, headers_policy()),
        proptest::option::weighted(0.2, text(DURATIONS)),
    )
        .prop_map(|(name, port, weight, headers, window)| {
            let mut s = json!({"name": name, "port": port});
            if let Some(w) = weight {
                s["weight"] = json!(w);
            }
            if let Some(h) = headers {
                s["requestHeadersPolicy"] = h;
            }
            if let Some(w) = window {
                s["slowStartPolicy"] = json!({"window": w});
            }
            s
        })
}

fn route() -> impl Strategy<Value = Value> {
    (
        proptest::collection::vec(prop_oneof![path_condition(), header_condition()], 0..3),
        proptest::collection::vec(service(), 0..3),
        0usize..8,
        text(DURATIONS),
        (mostly(&[1, 3, 10]), mostly(&[200, 404, 503]), mostly(&[429, 503]), mostly(&[301, 302])),
        (text(VALUES), text(PATHS), 0i64..5000),
        proptest::option::weighted(0.3, headers_policy()),
    )
        .prop_map(|(conditions, services, extra, duration, numbers, texts, headers)| {
            let (n, status, limited, moved) = numbers;
            let (value, path, size) = texts;
            let mut r = json!({"conditions": conditions, "services": services});
            match extra {
                0 => r["timeoutPolicy"] = json!({"response": duration, "idle": duration}),
                1 => r["retryPolicy"] = json!({"count": n, "perTryTimeout": duration}),
                2 => {
                    r["directResponsePolicy"] = json!({"statusCode": status, "body": "b".repeat(size as usize) + &value});
                    r.as_object_mut().map(|o| o.remove("services"));
                }
                3 => r["rateLimitPolicy"] = json!({"local": {"requests": n, "unit": "second", "responseStatusCode": limited, "responseHeadersToAdd": [{"name": "x-limited", "value": value}]}}),
                4 => {
                    r["conditions"] = json!([{"prefix": "/p"}]);
                    r["pathRewritePolicy"] = json!({"replacePrefix": [{"prefix": "/p", "replacement": path}]});
                }
                5 => r["healthCheckPolicy"] = json!({"path": path, "intervalSeconds": n, "timeoutSeconds": n}),
                6 => {
                    r["requestRedirectPolicy"] = json!({"path": path, "statusCode": moved});
                    r.as_object_mut().map(|o| o.remove("services"));
                }
                _ => {}
            }
            if let Some(h) = headers {
                r["responseHeadersPolicy"] = h;
            }
            r
        })
}

fn proxy(index: usize, count: usize) -> impl Strategy<Value = Value> {
    (
        proptest::option::weighted(
            0.8,
            prop_oneof![
                6 => (0u8..24).prop_map(|n| format!("h{n}.example.com")),
                1 => text(HOSTS),
            ],
        ),
        proptest::collection::vec(route(), 0..4),
        proptest::collection::vec(
            (
                0..count,
                proptest::collection::vec(
                    prop_oneof![
                        6 => text(PATHS).prop_map(|p| json!({"prefix": p})),
                        1 => path_condition(),
                    ],
                    0..2,
                ),
            ),
            0..2,
        ),
        proptest::sample::select(&[0usize, 0, 1, 1, 1, 2, 3][..]),
        proptest::option::weighted(0.2, text(REGEXES)),
    )
        .prop_map(move |(fqdn, routes, includes, tls, origin)| {
            let mut spec = json!({"routes": routes});
            if let Some(fqdn) = fqdn {
                let mut vhost = json!({"fqdn": fqdn});
                match tls {
                    1 => vhost["tls"] = json!({"secretName": "secure-cert"}),
                    2 => vhost["tls"] = json!({"secretName": "bad"}),
                    3 => {
                        vhost["tls"] = json!({"passthrough": true});
                        spec["tcpproxy"] = json!({"services": [{"name": "missing", "port": 443}]});
                    }
                    _ => {}
                }
                if let Some(origin) = origin {
                    vhost["corsPolicy"] = json!({"allowOrigin": [origin], "allowMethods": ["GET"]});
                }
                if tls == 1 && index.is_multiple_of(2) {
                    vhost["authorization"] =
                        json!({"extensionRef": {"name": "authz"}, "failOpen": index.is_multiple_of(4)});
                }
                spec["virtualhost"] = vhost;
            }
            spec["includes"] = includes
                .into_iter()
                .map(|(to, conditions)| json!({"name": format!("p{to}"), "conditions": conditions}))
                .collect();
            json!({
                "apiVersion": "projectcontour.io/v1",
                "kind": "HTTPProxy",
                "metadata": {"name": format!("p{index}"), "namespace": "default"},
                "spec": spec,
            })
        })
}

fn ingress() -> impl Strategy<Value = Value> {
    (
        text(HOSTS),
        proptest::collection::vec((text(PATHS), 0usize..4), 1..3),
        proptest::option::of(text(DURATIONS)),
    )
        .prop_map(|(host, paths, timeout)| {
            let types = ["Exact", "Prefix", "ImplementationSpecific", "Bogus"];
            let paths: Vec<Value> = paths
                .into_iter()
                .map(|(path, t)| json!({"path": path, "pathType": types[t], "backend": {"service": {"name": "web", "port": {"number": 80}}}}))
                .collect();
            let mut annotations = json!({});
            if let Some(t) = timeout {
                annotations["projectcontour.io/response-timeout"] = json!(t);
            }
            json!({
                "apiVersion": "networking.k8s.io/v1",
                "kind": "Ingress",
                "metadata": {"name": "in", "namespace": "default", "annotations": annotations},
                "spec": {"rules": [{"host": host, "http": {"paths": paths}}]},
            })
        })
}

fn http_route(index: usize) -> impl Strategy<Value = Value> {
    (
        proptest::collection::vec(
            prop_oneof![
                6 => (0u8..24).prop_map(|n| format!("h{n}.gateway.example.com")),
                1 => text(HOSTS),
            ],
            0..2,
        ),
        (0usize..4, text(PATHS), text(REGEXES)),
        (text(HEADER_NAMES), text(VALUES), 0usize..2),
        (text(HEADER_NAMES), text(VALUES), proptest::sample::select(&["web", "api", "missing"][..])),
        (mostly(&[80]), proptest::option::of(mostly(&[0, 1, 10])), text(DURATIONS), 0usize..5),
    )
        .prop_map(move |(hostnames, path, header, modifier, backend)| {
            let (kind, value, regex) = path;
            let path = match kind {
                0 => json!({"type": "Exact", "value": value}),
                1 => json!({"type": "PathPrefix", "value": value}),
                2 => json!({"type": "RegularExpression", "value": regex}),
                _ => json!({"value": value}),
            };
            let (name, value, regex_header) = header;
            let header = if regex_header == 0 {
                json!({"name": name, "value": value})
            } else {
                json!({"name": name, "type": "RegularExpression", "value": value})
            };
            let (set_name, set_value, service) = modifier;
            let (port, weight, timeout, extra) = backend;
            let mut backend = json!({"name": service, "port": port});
            if let Some(w) = weight {
                backend["weight"] = json!(w);
            }
            let mut rule = json!({
                "matches": [{"path": path, "headers": [header]}],
                "filters": [{"type": "RequestHeaderModifier", "requestHeaderModifier": {"set": [{"name": set_name, "value": set_value}]}}],
                "backendRefs": [backend],
            });
            match extra {
                0 => rule["timeouts"] = json!({"request": timeout}),
                1 => rule["filters"] = json!([{"type": "RequestRedirect", "requestRedirect": {"path": {"type": "ReplaceFullPath", "replaceFullPath": value}, "statusCode": 301}}]),
                2 => rule["filters"] = json!([{"type": "URLRewrite", "urlRewrite": {"hostname": set_value, "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": value}}}]),
                _ => {}
            }
            json!({
                "apiVersion": "gateway.networking.k8s.io/v1",
                "kind": "HTTPRoute",
                "metadata": {"name": format!("r{index}"), "namespace": "default"},
                "spec": {"parentRefs": [{"name": "gw"}], "hostnames": hostnames, "rules": [rule]},
            })
        })
}

fn extension_service() -> impl Strategy<Value = Value> {
    (
        proptest::sample::select(&["h2", "h2c", "bogus"][..]),
        text(DURATIONS),
        mostly(&[9091]),
        proptest::sample::select(&["RoundRobin", "Random", "Cookie", "nope"][..]),
    )
        .prop_map(|(protocol, timeout, port, strategy)| {
            json!({
                "apiVersion": "projectcontour.io/v1alpha1",
                "kind": "ExtensionService",
                "metadata": {"name": "authz", "namespace": "default"},
                "spec": {
                    "protocol": protocol,
                    "services": [{"name": "api", "port": port}],
                    "timeoutPolicy": {"response": timeout},
                    "loadBalancerPolicy": {"strategy": strategy},
                },
            })
        })
}

fn endpoints() -> impl Strategy<Value = Value> {
    (proptest::collection::vec(text(ADDRESSES), 0..4), number()).prop_map(|(addresses, port)| {
        let endpoints: Vec<Value> = addresses
            .into_iter()
            .map(|a| json!({"addresses": [a], "conditions": {"ready": true}}))
            .collect();
        json!({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {"name": "api-1", "namespace": "default", "labels": {"kubernetes.io/service-name": "api"}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
            "endpoints": endpoints,
        })
    })
}

/// One object set: up to six HTTPProxies (including each other, in chains and cycles),
/// an Ingress, up to three HTTPRoutes on the base's Gateway, an ExtensionService some
/// proxies' authorization names, the `api` Service's endpoints.
pub(crate) fn object_set() -> impl Strategy<Value = Vec<Value>> {
    (1usize..7, 0usize..4).prop_flat_map(|(count, routes)| {
        (
            (0..count).map(|i| proxy(i, count)).collect::<Vec<_>>(),
            proptest::option::of(ingress()),
            (0..routes).map(http_route).collect::<Vec<_>>(),
            proptest::option::weighted(0.7, extension_service()),
            endpoints(),
        )
            .prop_map(|(mut set, ingress, routes, extension, slice)| {
                set.extend(ingress);
                set.extend(routes);
                set.extend(extension);
                set.push(slice);
                set
            })
    })
}

/// The fixed objects every set is built with: Services `web` and `api`, a good and a
/// bad TLS Secret, a GatewayClass and Gateway (an HTTP and an HTTPS listener).
pub(crate) fn base() -> String {
    let secrets = std::fs::read_to_string("tests/golden/secrets.yaml").unwrap_or_default();
    format!(
        "{GATEWAY}---\n{}---\napiVersion: v1\nkind: Service\nmetadata: {{name: api, namespace: default}}\nspec:\n  ports: [{{name: http, port: 80, targetPort: 8080}}]\n---\n{secrets}\n---\napiVersion: v1\nkind: Secret\nmetadata: {{name: bad, namespace: default}}\ntype: kubernetes.io/tls\nstringData: {{tls.crt: nope, tls.key: nope}}\n",
        crate::support::service_yaml("default", "web", 18100)
    )
}

const GATEWAY: &str = "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {name: fuzz}\nspec: {controllerName: projectcontour.io/gateway-controller}\n---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: gw, namespace: default}\nspec:\n  gatewayClassName: fuzz\n  listeners:\n    - {name: http, protocol: HTTP, port: 10080}\n    - {name: https, protocol: HTTPS, port: 10443, hostname: '*.gateway.example.com', tls: {certificateRefs: [{name: secure-cert}]}}\n";

/// The configuration the sets are built with: the defaults, with Gateway API on.
pub(crate) fn fuzz_config() -> Config {
    let mut config = Config::default();
    config.pipeline.sources.push("gateway-api".to_string());
    config
}

/// The manifest text of one set (JSON documents are YAML).
pub(crate) fn manifest(set: &[Value]) -> String {
    set.iter()
        .map(|v| serde_json::to_string(v).unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n---\n")
}

/// How many objects decoded (the rest exercise the provider's error path).
pub(crate) static DECODED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// How many virtual hosts the sets built.
pub(crate) static VHOSTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Everything Envoy would refuse in what Isobar builds from `text`, or the panic.
pub(crate) fn violations(
    pipeline: &Pipeline,
    config: &Config,
    text: &str,
) -> Result<Vec<String>, String> {
    let mut objects = Objects::default();
    let base = parse_file(Path::new("base.yaml"), &base()).map_err(|e| e.to_string())?;
    // Each object is decoded alone, as the API server hands them over; one that fails
    // (a value out of its type's range) takes the provider's error path and is left out.
    let mut set = Vec::new();
    for document in text.split("\n---\n") {
        match parse_file(Path::new("object.json"), document) {
            Ok(objects) => {
                DECODED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                set.extend(objects);
            }
            Err(e) => {
                if std::env::var_os("ISOBAR_FUZZ_DEBUG").is_some() {
                    eprintln!("not decoded: {e}");
                }
            }
        }
    }
    for object in base.into_iter().chain(set) {
        objects.apply(object);
    }
    let output = pipeline.build(&objects);
    VHOSTS.fetch_add(
        output.ir.vhost_count(),
        std::sync::atomic::Ordering::Relaxed,
    );
    if std::env::var_os("ISOBAR_FUZZ_DEBUG").is_some() {
        for (key, status) in &output.status.objects {
            for e in &status.errors {
                eprintln!(
                    "status {key:?}: {:?} {}",
                    e.reason,
                    e.message.chars().take(80).collect::<String>()
                );
            }
        }
    }
    let resources = translate(&output.ir, &objects, &envoy_settings(config));
    let mut out = Vec::new();
    for t in XdsType::ORDER {
        for (name, bytes) in resources.of(t) {
            for v in check(t, bytes)? {
                out.push(format!("{} {name}: {v}", t.short()));
            }
        }
    }
    Ok(out)
}

fn seed() -> Option<[u8; 32]> {
    let seed = std::env::var("ISOBAR_FUZZ_SEED").unwrap_or_else(|_| "0".to_string());
    if seed == "random" {
        return None;
    }
    let n: u64 = seed.parse().unwrap_or(0);
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&n.to_le_bytes());
    Some(bytes)
}

pub(crate) fn runner(cases: u32) -> TestRunner {
    let config = RunnerConfig {
        cases,
        failure_persistence: None,
        max_shrink_iters: 200,
        ..RunnerConfig::default()
    };
    match seed() {
        Some(bytes) => {
            TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes))
        }
        None => TestRunner::new(config),
    }
}

fn cases() -> u32 {
    std::env::var("ISOBAR_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

/// No object set makes Isobar panic or build anything Envoy's rules refuse.
#[test]
fn random_objects_never_panic_and_never_break_envoys_rules() {
    let done = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(|| {
            let config = fuzz_config();
            let pipeline = Pipeline::for_config(&config).unwrap_or_else(|e| panic!("{e}"));
            let mut runner = runner(cases());
            runner.run(&object_set(), |set| {
                let text = manifest(&set);
                let broken = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    violations(&pipeline, &config, &text)
                }))
                .map_err(|_| TestCaseError::fail(format!("panicked on:\n{text}")))?
                .map_err(TestCaseError::fail)?;
                prop_assert!(
                    broken.is_empty(),
                    "Envoy would refuse: {broken:#?}\nobjects:\n{text}"
                );
                Ok(())
            })
        })
        .unwrap_or_else(|e| panic!("{e}"))
        .join();
    let decoded = DECODED.load(std::sync::atomic::Ordering::Relaxed);
    let vhosts = VHOSTS.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!("fuzz: {decoded} objects decoded, {vhosts} virtual hosts built");
    match done {
        Ok(Ok(())) => {}
        Ok(Err(e)) => panic!("{e}"),
        Err(_) => panic!("the fuzz run panicked outside a case"),
    }
}

/// The first sets of the fixed seed, served one after another to a real Envoy beside a
/// canary site: Envoy rejects nothing and the canary keeps answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_corpus_reaches_a_real_envoy_without_a_rejection() {
    let mut runner = TestRunner::new_with_rng(
        RunnerConfig::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]),
    );
    let strategy = object_set();
    let sets: Vec<Vec<Value>> = (0..24)
        .map(|_| {
            strategy
                .new_tree(&mut runner)
                .map(|t| proptest::strategy::ValueTree::current(&t))
                .unwrap_or_default()
        })
        .collect();
    serve_corpus(&sets, None).await;
}

/// Serves `sets` one after another (one file per object, as the API server hands them
/// over) to a real Envoy beside a canary site, with `config` as `contour.yaml`: Envoy
/// rejects nothing and the canary keeps answering.
pub(crate) async fn serve_corpus(sets: &[Vec<Value>], config: Option<&str>) {
    let canary = "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {name: canary, namespace: default}\nspec:\n  virtualhost: {fqdn: canary.example.com}\n  routes: [{services: [{name: echo-a, port: 80}]}]\n";
    let base = base();
    let stack = crate::e2e::start_with(
        config,
        &[("canary.yaml", canary), ("base.yaml", &base)],
        ("canary.example.com", "/", "a"),
    )
    .await;
    for (i, set) in sets.iter().enumerate() {
        let before = stack.builds().await.unwrap_or_default();
        // One file per object, as the API server hands them over one by one: an object
        // that does not decode leaves the others of its set in place.
        let dir = stack.manifests().join("set");
        let _ = std::fs::remove_dir_all(&dir);
        for (k, object) in set.iter().enumerate() {
            let text = serde_json::to_string(object).unwrap_or_default();
            crate::support::write(&dir, &format!("{k}.json"), &text);
        }
        let set = manifest(set);
        let built = crate::support::eventually(Duration::from_secs(10), || async {
            stack.builds().await.filter(|b| *b > before)
        })
        .await;
        assert!(built.is_some(), "set {i} was never built\n{}", stack.logs());
        // Envoy has taken (or refused) what was sent once the canary still answers.
        tokio::time::sleep(Duration::from_millis(300)).await;
        stack
            .wait_for("canary.example.com", "/", "a", Duration::from_secs(10))
            .await;
        let rejected = stack.rejected_updates().await;
        assert!(
            rejected.is_empty(),
            "set {i} was rejected: {rejected:?}\n{set}\n{}",
            stack.logs()
        );
    }
}
