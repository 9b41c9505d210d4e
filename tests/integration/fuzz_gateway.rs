//! Gateway API objects generated from the v1.6.1 CRDs' own schemas
//! (`../shared/gateway-api-crds/v1.6.1/experimental`, read at run time): every property
//! the schema has may appear, with values of its type — enums from the schema, integers
//! at and past their bounds, strings from pools of good and edge values chosen by what
//! the property is (hostnames, paths, header names, durations, references) — and
//! references pointed, mostly, at objects that exist. Sets of a Gateway, its
//! ListenerSet, routes of every kind, a BackendTLSPolicy, an XBackendTrafficPolicy and a
//! ReferenceGrant go through
//! decoding, the Gateway API source, the pipeline and the translator: no panic, nothing
//! breaking Envoy's rules. A fixed corpus is served to a real Envoy, which must reject
//! nothing. The schemas' CEL rules are not applied: objects an API server would refuse
//! reach Isobar from the files provider all the same.
//!
//! `ISOBAR_FUZZ_CASES` (300 by default here) and `ISOBAR_FUZZ_SEED` as in `fuzz.rs`.

use std::path::PathBuf;

use proptest::test_runner::{RngAlgorithm, TestRng};
use rand::{Rng, RngExt};
use serde_json::{Map, Value, json};

use isobar::runner::pipeline::Pipeline;

/// Where the CRDs of `channel` (`standard`, `experimental`) are: beside the project, as
/// the workplace and CI have them.
fn crd_dir(channel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/gateway-api-crds/v1.6.1")
        .join(channel)
}

/// The `spec` schema of `plural`'s served version `version`, from its experimental CRD
/// (a superset of the standard one).
fn schema(plural: &str, version: &str) -> Value {
    schema_in("experimental", plural, version)
}

/// [`schema`] from the CRD of `channel`.
fn schema_in(channel: &str, plural: &str, version: &str) -> Value {
    let group = group_of(plural);
    let path = crd_dir(channel).join(format!("{group}_{plural}.yaml"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (the Gateway API v1.6.1 CRDs are read from there)",
            path.display()
        )
    });
    let crd: Value = serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{plural}: {e}"));
    crd["spec"]["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["name"] == version)
        .map(|v| v["schema"]["openAPIV3Schema"]["properties"]["spec"].clone())
        .unwrap_or_else(|| panic!("{plural} has no version {version}"))
}

const HOSTS: &[&str] = &[
    "a.gateway.example.com",
    "b.gateway.example.com",
    "*.gateway.example.com",
    "*.example.com",
    "example.com",
    "*",
    "",
    "UPPER.Example.COM",
    "a..b",
    "-bad-.example.com",
    "xn--bcher-kva.example",
    "10.0.0.1",
    "a.b.c.d.e.f.g.h.example.com",
    "*.*.example.com",
    "labellabellabellabellabellabellabellabellabellabellabellabellabel.example.com",
];
const PATHS: &[&str] = &[
    "/",
    "/foo",
    "/foo/",
    "/foo/bar",
    "",
    "foo",
    "//",
    "/a/../b",
    "/%2F",
    "/with space",
    "/é",
    "/(.*)",
    "/*",
    "/foo?x=1",
    "/foo#x",
];
const REGEXES: &[&str] = &[
    "/v[0-9]+/.*",
    "(",
    "a{1000000}",
    "^/$",
    ".*",
    "(?i)/x",
    "\\",
];
const HEADER_NAMES: &[&str] = &[
    "x-fuzz",
    "X-Fuzz",
    "host",
    ":authority",
    ":path",
    "",
    "x fuzz",
    "content-length",
    "x-é",
    "transfer-encoding",
    "cookie",
    "x-envoy-internal",
];
const VALUES: &[&str] = &[
    "v",
    "",
    " padded ",
    "a\nb",
    "%",
    "é",
    "%{REQ(x)}%",
    "a;b=c",
    "0",
];
const DURATIONS: &[&str] = &[
    "1s",
    "0s",
    "10ms",
    "1h",
    "2562047h",
    "9999999h",
    "-1s",
    "1",
    "abc",
    "1h1m1s1ms",
];
const NAMES: &[&str] = &[
    "web",
    "api",
    "missing",
    "gw",
    "fz",
    "echo",
    "secure-cert",
    "bad",
    "",
];
const NAMESPACES: &[&str] = &["default", "other", "", "kube-system"];
const GROUPS: &[&str] = &["", "gateway.networking.k8s.io", "example.com", "core"];
const KINDS: &[&str] = &[
    "Service",
    "Gateway",
    "ListenerSet",
    "Secret",
    "ConfigMap",
    "Bogus",
    "HTTPRoute",
];
const SECTIONS: &[&str] = &["http", "https", "tcp", "udp", "tls", "missing", "a"];
const PORTS: &[i64] = &[80, 443, 8080, 10080, 10443, 0, 1, 65535, 65536, -1];

fn pick<'a, R: Rng>(rng: &mut R, pool: &[&'a str]) -> &'a str {
    pool[rng.random_range(0..pool.len())]
}

/// A value of `schema` for property `name` (its parent's `parent`), at `depth`.
fn generate<R: Rng>(schema: &Value, name: &str, parent: &str, depth: usize, rng: &mut R) -> Value {
    if let Some(values) = schema["enum"].as_array().filter(|v| !v.is_empty()) {
        // The schema's own values, once in a long while one it does not have (which
        // takes the object down the provider's error path).
        if schema["type"] == "string" && rng.random_range(0..300) == 0 {
            return json!("Unknown");
        }
        return values[rng.random_range(0..values.len())].clone();
    }
    match schema["type"].as_str().unwrap_or("object") {
        "object" => {
            let mut out = Map::new();
            let required: Vec<&str> = schema["required"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let empty = Map::new();
            let properties = schema["properties"].as_object().unwrap_or(&empty);
            let odds = if depth < 3 { 2 } else { 4 };
            for (key, sub) in properties {
                if required.contains(&key.as_str()) || rng.random_range(0..odds) == 0 {
                    out.insert(key.clone(), generate(sub, key, name, depth + 1, rng));
                }
            }
            if let Some(values) = schema["additionalProperties"].as_object() {
                let value = Value::Object(values.clone());
                for _ in 0..rng.random_range(0..3) {
                    out.insert(
                        pick(rng, HEADER_NAMES).to_string(),
                        generate(&value, name, parent, depth + 1, rng),
                    );
                }
            }
            Value::Object(out)
        }
        "array" => {
            let max = schema["maxItems"].as_u64().unwrap_or(4).min(4);
            let min = schema["minItems"].as_u64().unwrap_or(0).min(max);
            let n = rng.random_range(min..=max);
            (0..n)
                .map(|_| generate(&schema["items"], name, parent, depth + 1, rng))
                .collect()
        }
        "integer" => {
            if name.to_ascii_lowercase().contains("port") {
                return json!(PORTS[rng.random_range(0..PORTS.len())]);
            }
            let low = schema["minimum"].as_i64().unwrap_or(0);
            let high = schema["maximum"].as_i64().unwrap_or(1000);
            match rng.random_range(0..6) {
                0 => json!(low),
                1 => json!(high),
                2 => json!(low.saturating_sub(1)),
                3 => json!(high.saturating_add(1)),
                _ => json!(rng.random_range(low..=high.max(low))),
            }
        }
        "boolean" => json!(rng.random_bool(0.5)),
        _ => json!(string(name, parent, rng)),
    }
}

/// A string for property `name` of `parent`, by what it holds.
fn string<R: Rng>(name: &str, parent: &str, rng: &mut R) -> String {
    let lower = name.to_ascii_lowercase();
    let pool: &[&str] = match lower.as_str() {
        "hostname" | "hostnames" | "preferredhostname" => HOSTS,
        "namespace" => NAMESPACES,
        "group" => GROUPS,
        "kind" => KINDS,
        "protocol" => &[
            "HTTP", "HTTPS", "TLS", "TCP", "UDP", "HTTP", "HTTPS", "x", "",
        ],
        "sectionname" => SECTIONS,
        "value" if parent == "path" => {
            return if rng.random_range(0..3) == 0 {
                pick(rng, REGEXES).to_string()
            } else {
                pick(rng, PATHS).to_string()
            };
        }
        "value" => VALUES,
        "name" if matches!(parent, "headers" | "set" | "add" | "remove" | "queryParams") => {
            HEADER_NAMES
        }
        "remove" => HEADER_NAMES,
        "name" => NAMES,
        "replacefullpath" | "replaceprefixmatch" => PATHS,
        "request" | "backendrequest" | "backoff" | "interval" | "timeout" | "idletimeout"
        | "absolutetimeout" => DURATIONS,
        "uri" => &["spiffe://abc.example.com/x", "https://x", "", "not a uri"],
        "allowmethods" => &["GET", "POST", "*", "BREW"],
        "alloworigins" => &[
            "https://a.example.com",
            "*",
            "https://*.example.com",
            "",
            "null",
        ],
        _ => &["x", "", "fuzz", "a.example.com", "/", "é"],
    };
    pick(rng, pool).to_string()
}

/// One object of `kind` named `name`, its spec generated from `spec`, with what ties it
/// to the rest set most of the time.
fn object<R: Rng>(kind: &str, version: &str, name: &str, spec: &Value, rng: &mut R) -> Value {
    let mut generated = generate(spec, "spec", kind, 0, rng);
    let mostly = |rng: &mut R| rng.random_range(0..5) != 0;
    match kind {
        "Gateway" => {
            if mostly(rng) {
                generated["gatewayClassName"] = json!("fuzz");
            }
            if mostly(rng) {
                generated["allowedListeners"] = json!({"namespaces": {"from": "All"}});
            }
        }
        "ListenerSet" => {
            if mostly(rng) {
                generated["parentRef"] = json!({"name": "fz"});
            }
        }
        "BackendTLSPolicy" | "XBackendTrafficPolicy" => {
            if mostly(rng) {
                generated["targetRefs"] =
                    json!([{"group": "", "kind": "Service", "name": pick(rng, &["web", "api"])}]);
            }
        }
        "ReferenceGrant" => {}
        _ => {
            if let Some(parents) = generated["parentRefs"].as_array_mut() {
                for parent in parents {
                    if mostly(rng) {
                        parent["name"] = json!(pick(rng, &["gw", "fz"]));
                        parent["namespace"] = json!("default");
                        if let Some(p) = parent.as_object_mut() {
                            p.remove("group");
                            p.remove("kind");
                            if rng.random_bool(0.7) {
                                p.remove("sectionName");
                                p.remove("port");
                            }
                        }
                    }
                }
            }
        }
    }
    json!({
        "apiVersion": format!("{}/{version}", group_of(kind)),
        "kind": kind,
        "metadata": {"name": name, "namespace": "default"},
        "spec": generated,
    })
}

/// The API group of a kind, by its name or plural (the `X…` kinds are the experimental
/// group's).
fn group_of(kind_or_plural: &str) -> &'static str {
    if kind_or_plural.starts_with(['x', 'X']) {
        "gateway.networking.x-k8s.io"
    } else {
        "gateway.networking.k8s.io"
    }
}

/// The kinds generated: kind, version, plural, how many per set at most.
const KINDS_GENERATED: &[(&str, &str, &str, usize)] = &[
    ("Gateway", "v1", "gateways", 1),
    ("ListenerSet", "v1", "listenersets", 1),
    ("HTTPRoute", "v1", "httproutes", 3),
    ("GRPCRoute", "v1", "grpcroutes", 1),
    ("TLSRoute", "v1", "tlsroutes", 1),
    ("TCPRoute", "v1", "tcproutes", 1),
    ("UDPRoute", "v1", "udproutes", 1),
    ("BackendTLSPolicy", "v1", "backendtlspolicies", 1),
    (
        "XBackendTrafficPolicy",
        "v1alpha1",
        "xbackendtrafficpolicies",
        1,
    ),
    ("ReferenceGrant", "v1", "referencegrants", 1),
];

struct Generator {
    schemas: Vec<Value>,
}

impl Generator {
    fn new() -> Generator {
        Generator {
            schemas: KINDS_GENERATED
                .iter()
                .map(|(_, version, plural, _)| schema(plural, version))
                .collect(),
        }
    }

    /// One set: the Gateway `fz` always, the other kinds now and then.
    fn set<R: Rng>(&self, rng: &mut R) -> Vec<Value> {
        let mut out = Vec::new();
        for ((kind, version, _, most), spec) in KINDS_GENERATED.iter().zip(&self.schemas) {
            let n = if *kind == "Gateway" {
                1
            } else {
                rng.random_range(0..=*most)
            };
            for i in 0..n {
                let name = if *kind == "Gateway" {
                    "fz".to_string()
                } else {
                    format!("{}-{i}", kind.to_ascii_lowercase())
                };
                out.push(object(kind, version, &name, spec, rng));
            }
        }
        out
    }
}

fn rng() -> TestRng {
    let seed = std::env::var("ISOBAR_FUZZ_SEED").unwrap_or_else(|_| "0".to_string());
    let mut bytes = [0u8; 32];
    if seed == "random" {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        bytes[..16].copy_from_slice(&nanos.to_le_bytes());
        eprintln!("fuzz_gateway seed bytes: {bytes:?}");
    } else {
        bytes[..8].copy_from_slice(&seed.parse::<u64>().unwrap_or(0).to_le_bytes());
        bytes[8] = 0x67;
    }
    TestRng::from_seed(RngAlgorithm::ChaCha, &bytes)
}

/// No set of schema-shaped Gateway API objects makes Isobar panic or build anything
/// Envoy's rules refuse.
#[test]
fn objects_from_the_crd_schemas_never_panic_and_never_break_envoys_rules() {
    let cases: usize = std::env::var("ISOBAR_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let done = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            let generator = Generator::new();
            let config = crate::fuzz::fuzz_config();
            let pipeline = Pipeline::for_config(&config).unwrap_or_else(|e| panic!("{e}"));
            let mut rng = rng();
            let mut vhosts_before = 0;
            for case in 0..cases {
                let set = generator.set(&mut rng);
                let text = crate::fuzz::manifest(&set);
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    crate::fuzz::violations(&pipeline, &config, &text)
                }));
                match outcome {
                    Err(_) => panic!("case {case} panicked on:\n{text}"),
                    Ok(Err(e)) => panic!("case {case}: {e}\n{text}"),
                    Ok(Ok(broken)) => assert!(
                        broken.is_empty(),
                        "case {case}: Envoy would refuse {broken:#?}\nobjects:\n{text}"
                    ),
                }
                vhosts_before += 1;
            }
            vhosts_before
        })
        .unwrap_or_else(|e| panic!("{e}"))
        .join();
    let decoded = crate::fuzz::DECODED.load(std::sync::atomic::Ordering::Relaxed);
    let vhosts = crate::fuzz::VHOSTS.load(std::sync::atomic::Ordering::Relaxed);
    match done {
        Ok(n) => eprintln!(
            "fuzz_gateway: {n} sets, {decoded} objects decoded, {vhosts} virtual hosts built (with fuzz.rs when run together)"
        ),
        Err(e) => std::panic::resume_unwind(e),
    }
}

/// The first sets of the fixed seed, served one after another to a real Envoy beside a
/// canary site: Envoy rejects nothing and the canary keeps answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_shaped_objects_reach_a_real_envoy_without_a_rejection() {
    let generator = Generator::new();
    let mut rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[11; 32]);
    let sets: Vec<Vec<Value>> = (0..16).map(|_| generator.set(&mut rng)).collect();
    let config = "gateway:\n  controllerName: projectcontour.io/gateway-controller\n";
    crate::fuzz::serve_corpus(&sets, Some(config)).await;
}

/// An object of `schema` with every property it allows, one item per list, each enum's
/// first value, integers at their minimum and strings a plausible value.
fn maximal(schema: &Value, name: &str) -> Value {
    if let Some(first) = schema["enum"].as_array().and_then(|v| v.first()) {
        return first.clone();
    }
    match schema["type"].as_str().unwrap_or("object") {
        "object" => {
            let empty = Map::new();
            let properties = schema["properties"].as_object().unwrap_or(&empty);
            let mut out: Map<String, Value> = properties
                .iter()
                .map(|(key, sub)| (key.clone(), maximal(sub, key)))
                .collect();
            if let Some(values) = schema["additionalProperties"].as_object() {
                out.insert(
                    "x-key".to_string(),
                    maximal(&Value::Object(values.clone()), name),
                );
            }
            Value::Object(out)
        }
        "array" => json!([maximal(&schema["items"], name)]),
        "integer" => json!(schema["minimum"].as_i64().unwrap_or(1).max(1)),
        "boolean" => json!(true),
        _ => json!(match name {
            "hostname" | "hostnames" => "a.example.com",
            "value" | "replaceFullPath" | "replacePrefixMatch" => "/x",
            "request" | "backendRequest" | "backoff" | "idleTimeout" | "absoluteTimeout" => "1s",
            "uri" => "spiffe://a.example.com/x",
            _ => "x",
        }),
    }
}

/// The scalar leaves of `value`, by JSON pointer.
fn leaves(value: &Value, at: String, out: &mut Vec<(String, Value)>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                leaves(v, format!("{at}/{key}"), out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                leaves(v, format!("{at}/{i}"), out);
            }
        }
        other => out.push((at, other.clone())),
    }
}

/// Every field the v1.6.1 standard schemas have (spec, for each kind Isobar serves; for
/// HTTPRoute and GRPCRoute the experimental one, whose `retry` and `sessionPersistence`
/// Isobar reads, and XBackendTrafficPolicy's, only experimental) survives decoding into
/// Isobar's types: none is dropped unseen.
#[test]
fn every_field_of_the_v1_6_1_schemas_survives_decoding() {
    use isobar_plugin_gateway_api::kinds;
    fn round_trip<T: serde::de::DeserializeOwned + serde::Serialize>(
        v: Value,
    ) -> Result<Value, String> {
        let typed: T = serde_json::from_value(v).map_err(|e| e.to_string())?;
        serde_json::to_value(typed).map_err(|e| e.to_string())
    }
    let mut dropped = Vec::new();
    for (kind, version, plural, _) in KINDS_GENERATED {
        let channel = if ["HTTPRoute", "GRPCRoute"].contains(kind)
            || group_of(kind) != "gateway.networking.k8s.io"
        {
            "experimental"
        } else {
            "standard"
        };
        let spec = maximal(&schema_in(channel, plural, version), "spec");
        let object = json!({
            "apiVersion": format!("{}/{version}", group_of(kind)),
            "kind": kind,
            "metadata": {"name": "m", "namespace": "default"},
            "spec": spec,
        });
        let back = match *kind {
            "Gateway" => round_trip::<kinds::Gateway>(object.clone()),
            "ListenerSet" => round_trip::<kinds::ListenerSet>(object.clone()),
            "HTTPRoute" => round_trip::<kinds::HttpRoute>(object.clone()),
            "GRPCRoute" => round_trip::<kinds::GrpcRoute>(object.clone()),
            "TLSRoute" => round_trip::<kinds::TlsRoute>(object.clone()),
            "TCPRoute" => round_trip::<kinds::TcpRoute>(object.clone()),
            "UDPRoute" => round_trip::<kinds::UdpRoute>(object.clone()),
            "BackendTLSPolicy" => round_trip::<kinds::BackendTlsPolicy>(object.clone()),
            "XBackendTrafficPolicy" => round_trip::<kinds::BackendTrafficPolicy>(object.clone()),
            "ReferenceGrant" => round_trip::<kinds::ReferenceGrant>(object.clone()),
            other => panic!("no type for {other}"),
        }
        .unwrap_or_else(|e| panic!("{kind}: {e}\n{object}"));
        let mut wrote = Vec::new();
        leaves(&object["spec"], String::new(), &mut wrote);
        assert!(wrote.len() > 5, "{kind}: the schema gave {wrote:?}");
        for (at, value) in wrote {
            if back["spec"].pointer(&at) != Some(&value) {
                dropped.push(format!("{kind} spec{at} = {value}"));
            }
        }
    }
    assert!(dropped.is_empty(), "fields the types drop: {dropped:#?}");
}
