//! The rules Envoy keeps in its code (`isobar::xds::semantic`): for every rule family, a
//! resource breaking it is flagged by Isobar's check **and** refused by a real Envoy
//! (`envoy --mode validate` on a bootstrap holding it as a static resource), while the
//! same resources without the breach pass both. So each rule is one Envoy enforces,
//! and Isobar finds each breach before Envoy would refuse it.

use std::collections::BTreeSet;

use prost_reflect::DynamicMessage;
use serde_json::{Value, json};

use isobar::xds::XdsType;
use isobar::xds::semantic::FAMILIES;
use isobar::xds::validate::pool;

const HCM: &str = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";
const ROUTER: &str = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router";
const TLS: &str =
    "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext";

/// One resource: what Envoy's API calls it, and it as proto3 JSON.
#[derive(Clone)]
enum Resource {
    Route(Value),
    Listener(Value),
    Cluster(Value),
    Endpoints(Value),
    Secret(Value),
}

impl Resource {
    fn xds(&self) -> (XdsType, &'static str, &Value) {
        match self {
            Resource::Route(v) => (
                XdsType::Route,
                "envoy.config.route.v3.RouteConfiguration",
                v,
            ),
            Resource::Listener(v) => (XdsType::Listener, "envoy.config.listener.v3.Listener", v),
            Resource::Cluster(v) => (XdsType::Cluster, "envoy.config.cluster.v3.Cluster", v),
            Resource::Endpoints(v) => (
                XdsType::Endpoint,
                "envoy.config.endpoint.v3.ClusterLoadAssignment",
                v,
            ),
            Resource::Secret(v) => (
                XdsType::Secret,
                "envoy.extensions.transport_sockets.tls.v3.Secret",
                v,
            ),
        }
    }

    /// The rule families Isobar's check finds in it.
    fn families(&self) -> BTreeSet<String> {
        let (t, message, json) = self.xds();
        let descriptor = pool()
            .unwrap_or_else(|e| panic!("{e}"))
            .get_message_by_name(message)
            .unwrap_or_else(|| panic!("no {message}"));
        let dynamic = DynamicMessage::deserialize(descriptor, json.clone())
            .unwrap_or_else(|e| panic!("{message} from {json}: {e}"));
        let bytes = prost::Message::encode_to_vec(&dynamic);
        let name = json["cluster_name"].as_str().unwrap_or_default();
        isobar::xds::semantic::check(t, name, &bytes)
            .into_iter()
            .map(|v| v.rule.split(':').next().unwrap_or_default().to_string())
            .collect()
    }
}

fn route(action: Value) -> Value {
    json!({"match": {"prefix": "/"}, "route": action})
}

fn table(vhosts: Value) -> Value {
    json!({"name": "r", "virtual_hosts": vhosts})
}

fn vhost(name: &str, domains: &[&str], extra: Value) -> Value {
    let mut v =
        json!({"name": name, "domains": domains, "routes": [route(json!({"cluster": "c"}))]});
    for (k, x) in extra.as_object().into_iter().flatten() {
        v[k] = x.clone();
    }
    v
}

fn hcm(route_config: Value, http_filters: Value) -> Value {
    json!({"@type": HCM, "stat_prefix": "h", "route_config": route_config, "http_filters": http_filters})
}

fn router() -> Value {
    json!([{"name": "envoy.filters.http.router", "typed_config": {"@type": ROUTER}}])
}

fn listener(port: u16, chains: Value) -> Value {
    json!({
        "name": format!("l{port}"),
        "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}},
        "filter_chains": chains,
    })
}

fn http_listener(route_config: Value) -> Value {
    listener(
        10000,
        json!([{"filters": [{"name": "hcm", "typed_config": hcm(route_config, router())}]}]),
    )
}

fn endpoint(address: &str) -> Value {
    json!({"endpoint": {"address": {"socket_address": {"address": address, "port_value": 1}}}})
}

fn static_cluster(name: &str, endpoints: Value) -> Value {
    json!({
        "name": name,
        "type": "STATIC",
        "connect_timeout": "1s",
        "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": endpoints}]},
    })
}

/// A listener terminating TLS with the static secrets `cert`, and optionally `tickets`
/// and `ca`.
fn tls_listener(tickets: bool, ca: bool) -> Value {
    let mut context = json!({
        "@type": TLS,
        "common_tls_context": {"tls_certificate_sds_secret_configs": [{"name": "cert"}]},
    });
    if tickets {
        context["session_ticket_keys_sds_secret_config"] = json!({"name": "tickets"});
    }
    if ca {
        context["common_tls_context"]["validation_context_sds_secret_config"] =
            json!({"name": "ca"});
    }
    listener(
        10443,
        json!([{
            "filters": [{"name": "hcm", "typed_config": hcm(table(json!([vhost("v", &["*"], json!({}))])), router())}],
            "transport_socket": {"name": "envoy.transport_sockets.tls", "typed_config": context},
        }]),
    )
}

struct Pair {
    cert: String,
    key: String,
}

fn pair(host: &str) -> Pair {
    let params =
        rcgen::CertificateParams::new(vec![host.to_string()]).unwrap_or_else(|e| panic!("{e}"));
    let key = rcgen::KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
    let cert = params.self_signed(&key).unwrap_or_else(|e| panic!("{e}"));
    Pair {
        cert: cert.pem(),
        key: key.serialize_pem(),
    }
}

fn certificate(name: &str, cert: &str, key: &str) -> Value {
    json!({"name": name, "tls_certificate": {
        "certificate_chain": {"inline_string": cert},
        "private_key": {"inline_string": key},
    }})
}

/// A bootstrap holding `resource` beside what it needs (cluster `c`, the TLS listener's
/// good secrets unless the resource replaces one).
fn bootstrap(resource: &Resource, good: &Pair) -> Value {
    let mut listeners = vec![];
    let mut clusters = vec![static_cluster("c", json!([endpoint("127.0.0.1")]))];
    let mut secrets = vec![certificate("cert", &good.cert, &good.key)];
    match resource {
        Resource::Route(t) => listeners.push(http_listener(t.clone())),
        Resource::Listener(l) => listeners.push(l.clone()),
        Resource::Cluster(c) => clusters.push(c.clone()),
        Resource::Endpoints(e) => {
            let mut c = static_cluster("e", json!([]));
            c["load_assignment"] = e.clone();
            clusters.push(c);
        }
        Resource::Secret(s) => {
            let name = s["name"].as_str().unwrap_or_default();
            secrets.retain(|x| x["name"] != name);
            secrets.push(s.clone());
            listeners.push(tls_listener(name == "tickets", name == "ca"));
        }
    }
    // Isobar's runtime layer, as a fresh Envoy gets it first over RTDS.
    json!({
        "layered_runtime": {"layers": [{"name": "dynamic", "static_layer": {
            "re2.max_program_size.error_level": isobar::xds::semantic::RE2_PROGRAM_MAX,
        }}]},
        "static_resources": {"listeners": listeners, "clusters": clusters, "secrets": secrets},
    })
}

/// Whether Envoy takes the bootstrap, and what it said.
fn envoy_takes(config: &Value, dir: &std::path::Path, n: usize) -> (bool, String) {
    let path = dir.join(format!("case-{n}.json"));
    std::fs::write(&path, config.to_string()).unwrap_or_else(|e| panic!("{e}"));
    let out = std::process::Command::new(crate::support::envoy_bin())
        .args([
            "--mode",
            "validate",
            "--use-dynamic-base-id",
            "-l",
            "error",
            "-c",
        ])
        .arg(&path)
        .output()
        .unwrap_or_else(|e| panic!("envoy: {e}"));
    let said =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    (out.status.success(), said)
}

/// Each case: the family, the resource breaking it.
fn cases(good: &Pair, other: &Pair) -> Vec<(&'static str, Resource)> {
    let one = |action: Value| {
        Resource::Route(table(
            json!([{"name": "v", "domains": ["a.example.com"], "routes": [route(action)]}]),
        ))
    };
    let with_route = |r: Value| {
        Resource::Route(table(
            json!([{"name": "v", "domains": ["a.example.com"], "routes": [r]}]),
        ))
    };
    let header = |option: Value| {
        Resource::Route(table(json!([vhost(
            "v",
            &["a.example.com"],
            json!({"request_headers_to_add": [option]})
        )])))
    };
    let chain = |m: Value| json!({"filter_chain_match": m, "filters": [{"name": "hcm", "typed_config": hcm(table(json!([vhost("v", &["*"], json!({}))])), router())}]});
    let with_hcm = |extra: Value, filters: Value| {
        let mut h = hcm(table(json!([vhost("v", &["*"], json!({}))])), filters);
        for (k, x) in extra.as_object().into_iter().flatten() {
            h[k] = x.clone();
        }
        Resource::Listener(listener(
            10000,
            json!([{"filters": [{"name": "hcm", "typed_config": h}]}]),
        ))
    };
    let cors = json!({"name": "envoy.filters.http.cors", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.cors.v3.Cors"}});
    let router_filter = router()[0].clone();
    let health_check = json!({"timeout": "1s", "interval": "1s", "unhealthy_threshold": 1, "healthy_threshold": 1, "http_health_check": {"path": "/"}});
    vec![
        (
            "route.single-wildcard-domain",
            Resource::Route(table(json!([
                vhost("a", &["*"], json!({})),
                vhost("b", &["*"], json!({}))
            ]))),
        ),
        (
            "route.unique-domains",
            Resource::Route(table(json!([
                vhost("a", &["a.example.com"], json!({})),
                vhost("b", &["A.example.com"], json!({}))
            ]))),
        ),
        (
            "headers.not-modifiable",
            header(json!({"header": {"key": "host", "value": "x"}})),
        ),
        (
            "headers.not-modifiable",
            Resource::Route(table(json!([vhost(
                "v",
                &["a.example.com"],
                json!({"request_headers_to_remove": [":path"]})
            )]))),
        ),
        (
            "headers.append-and-append-action",
            header(
                json!({"header": {"key": "x-a", "value": "1"}, "append": true, "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}),
            ),
        ),
        (
            "headers.substitution-format",
            header(json!({"header": {"key": "x-a", "value": "50%off"}})),
        ),
        (
            "route.one-rewrite",
            one(
                json!({"cluster": "c", "prefix_rewrite": "/a", "regex_rewrite": {"pattern": {"regex": "^/b"}, "substitution": "/c"}}),
            ),
        ),
        (
            "route.weighted-cluster-name",
            one(
                json!({"weighted_clusters": {"clusters": [{"name": "c", "cluster_header": "x-c", "weight": 1}]}}),
            ),
        ),
        (
            "route.weighted-cluster-weights",
            one(json!({"weighted_clusters": {"clusters": [{"name": "c", "weight": 0}]}})),
        ),
        (
            "route.mirror-cluster",
            one(
                json!({"cluster": "c", "request_mirror_policies": [{"cluster": "c", "cluster_header": "x-m"}]}),
            ),
        ),
        (
            "route.duplicate-upgrade",
            one(
                json!({"cluster": "c", "upgrade_configs": [{"upgrade_type": "websocket"}, {"upgrade_type": "WebSocket"}]}),
            ),
        ),
        (
            "route.retry-back-off",
            one(
                json!({"cluster": "c", "retry_policy": {"retry_back_off": {"base_interval": "2s", "max_interval": "1s"}}}),
            ),
        ),
        (
            "route.direct-response-size",
            with_route(
                json!({"match": {"prefix": "/"}, "direct_response": {"status": 200, "body": {"inline_string": "a".repeat(5000)}}}),
            ),
        ),
        (
            "regex.re2",
            with_route(
                json!({"match": {"safe_regex": {"regex": "/(?=x)"}}, "route": {"cluster": "c"}}),
            ),
        ),
        (
            "regex.re2",
            with_route(
                json!({"match": {"safe_regex": {"regex": "/a{1001}"}}, "route": {"cluster": "c"}}),
            ),
        ),
        (
            "regex.re2",
            with_route(
                json!({"match": {"safe_regex": {"regex": "/(?:a{100}){20}"}}, "route": {"cluster": "c"}}),
            ),
        ),
        (
            "regex.re2",
            with_route(
                json!({"match": {"safe_regex": {"regex": "(?:[a-z]{1000})".repeat(1100)}}, "route": {"cluster": "c"}}),
            ),
        ),
        (
            "regex.ignore-case",
            with_route(
                json!({"match": {"prefix": "/", "headers": [{"name": "x-a", "string_match": {"safe_regex": {"regex": "a"}, "ignore_case": true}}]}, "route": {"cluster": "c"}}),
            ),
        ),
        (
            "listener.address",
            Resource::Listener(json!({"name": "l", "filter_chains": [chain(json!({}))]})),
        ),
        (
            "listener.filter-chains",
            Resource::Listener(listener(10000, json!([]))),
        ),
        (
            "listener.duplicate-filter-chain-match",
            Resource::Listener(listener(
                10000,
                json!([
                    chain(json!({"server_names": ["a.example.com"]})),
                    chain(json!({"server_names": ["a.example.com"]}))
                ]),
            )),
        ),
        (
            "listener.duplicate-filter-chain-match",
            Resource::Listener(listener(
                10000,
                json!([
                    chain(json!({"server_names": ["a.example.com", "b.example.com"]})),
                    chain(json!({"server_names": ["B.example.com"]}))
                ]),
            )),
        ),
        (
            "listener.partial-wildcard-server-name",
            Resource::Listener(listener(
                10000,
                json!([chain(json!({"server_names": ["a*.example.com"]}))]),
            )),
        ),
        (
            "listener.unimplemented-match-fields",
            Resource::Listener(listener(
                10000,
                json!([chain(json!({"address_suffix": "x"}))]),
            )),
        ),
        (
            "listener.terminal-filter",
            Resource::Listener(listener(
                10000,
                json!([{"filters": [
                    {"name": "hcm", "typed_config": hcm(table(json!([vhost("v", &["*"], json!({}))])), router())},
                    {"name": "tcp", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy", "stat_prefix": "t", "cluster": "c"}},
                ]}]),
            )),
        ),
        (
            "hcm.terminal-http-filter",
            with_hcm(json!({}), json!([router_filter, cors])),
        ),
        (
            "hcm.terminal-http-filter",
            with_hcm(json!({}), json!([cors])),
        ),
        (
            "hcm.strip-port",
            with_hcm(
                json!({"strip_matching_host_port": true, "strip_any_host_port": true}),
                router(),
            ),
        ),
        (
            "hcm.duplicate-upgrade",
            with_hcm(
                json!({"upgrade_configs": [{"upgrade_type": "websocket"}, {"upgrade_type": "websocket"}]}),
                router(),
            ),
        ),
        (
            "cluster.eds-config",
            Resource::Cluster({
                let mut c = static_cluster("x", json!([endpoint("127.0.0.1")]));
                c["eds_cluster_config"] = json!({"service_name": "x", "eds_config": {"path_config_source": {"path": "/dev/null"}}});
                c
            }),
        ),
        (
            "cluster.eds-config",
            Resource::Cluster(json!({"name": "x", "type": "EDS", "connect_timeout": "1s"})),
        ),
        (
            "cluster.ip-endpoints",
            Resource::Cluster(static_cluster("x", json!([endpoint("localhost")]))),
        ),
        (
            "cluster.logical-dns-single-host",
            Resource::Cluster({
                let mut c = static_cluster(
                    "x",
                    json!([endpoint("a.example.com"), endpoint("b.example.com")]),
                );
                c["type"] = json!("LOGICAL_DNS");
                c
            }),
        ),
        (
            "cluster.health-checks",
            Resource::Cluster({
                let mut c = static_cluster("x", json!([endpoint("127.0.0.1")]));
                c["health_checks"] = json!([health_check, health_check]);
                c
            }),
        ),
        (
            "cluster.per-host-thresholds",
            Resource::Cluster({
                let mut c = static_cluster("x", json!([endpoint("127.0.0.1")]));
                c["circuit_breakers"] = json!({"per_host_thresholds": [{"max_requests": 5}]});
                c
            }),
        ),
        (
            "cluster.hash-weight-sums",
            Resource::Cluster({
                let mut c = static_cluster("x", json!([]));
                c["lb_policy"] = json!("RING_HASH");
                c["load_assignment"]["endpoints"] = json!([
                    {"locality": {"zone": "a"}, "load_balancing_weight": u32::MAX, "lb_endpoints": [endpoint("127.0.0.1")]},
                    {"locality": {"zone": "b"}, "load_balancing_weight": u32::MAX, "lb_endpoints": [endpoint("127.0.0.2")]},
                ]);
                c["common_lb_config"] = json!({"locality_weighted_lb_config": {}});
                c
            }),
        ),
        (
            "endpoints.ip-addresses",
            Resource::Endpoints(
                json!({"cluster_name": "e", "endpoints": [{"lb_endpoints": [endpoint("localhost")]}]}),
            ),
        ),
        (
            "endpoints.drop-overloads",
            Resource::Endpoints(
                json!({"cluster_name": "e", "endpoints": [{"lb_endpoints": [endpoint("127.0.0.1")]}],
            "policy": {"drop_overloads": [{"category": "a", "drop_percentage": {"numerator": 1}}, {"category": "b", "drop_percentage": {"numerator": 1}}]}}),
            ),
        ),
        (
            "secret.certificate",
            Resource::Secret(certificate("cert", &good.cert, &other.key)),
        ),
        (
            "secret.certificate",
            Resource::Secret(certificate("cert", "not a certificate", &good.key)),
        ),
        (
            "secret.session-ticket-keys",
            Resource::Secret(
                json!({"name": "tickets", "session_ticket_keys": {"keys": [{"inline_string": "too short"}]}}),
            ),
        ),
        (
            "secret.validation-context",
            Resource::Secret(
                json!({"name": "ca", "validation_context": {"trusted_ca": {"inline_string": "not a certificate"}}}),
            ),
        ),
    ]
}

/// What Envoy says refusing a breach of each family (any of).
fn envoy_says(family: &str) -> &'static [&'static str] {
    match family {
        "route.single-wildcard-domain" => &["Only a single wildcard domain is permitted"],
        "route.unique-domains" => &["Only unique values for domains are permitted"],
        "headers.not-modifiable" => &[":-prefixed or host headers may not be"],
        "headers.append-and-append-action" => &["Both append and append_action are set"],
        "headers.substitution-format" => &["Couldn't find valid command"],
        "route.one-rewrite" => &["Specify only one of prefix_rewrite, regex_rewrite"],
        "route.weighted-cluster-name" => &[
            "Only one of name or cluster_header",
            "At least one of name or cluster_header",
        ],
        "route.weighted-cluster-weights" => &[
            "Sum of weights in the weighted_cluster must be greater than 0",
            "exceeds",
        ],
        "route.mirror-cluster" => &["in request mirror policy"],
        "route.duplicate-upgrade" => &["Duplicate upgrade"],
        "route.retry-back-off" => &["max_interval must greater than or equal to the base_interval"],
        "route.direct-response-size" => &["response body size is"],
        "regex.re2" => &[
            "invalid perl operator",
            "invalid repetition size",
            "pattern too large",
        ],
        "regex.ignore-case" => &["ignore_case has no effect for safe_regex"],
        "listener.address" => &["address is necessary"],
        "listener.filter-chains" => &["no filter chains specified"],
        "listener.duplicate-filter-chain-match" => {
            &["has the same matching rules", "overlapping matching rules"]
        }
        "listener.partial-wildcard-server-name" => &["partial wildcards are not supported"],
        "listener.unimplemented-match-fields" => &["contains unimplemented fields"],
        "listener.terminal-filter" => &["must be the last filter in a network filter chain"],
        "hcm.terminal-http-filter" => &[
            "must be the last filter in a http filter chain",
            "is the last filter in a http filter chain",
        ],
        "hcm.strip-port" => &["Only one of `strip_matching_host_port` or `strip_any_host_port`"],
        "hcm.duplicate-upgrade" => &["multiple upgrade configs with the same name"],
        "cluster.eds-config" => &[
            "eds_cluster_config set in a non-EDS cluster",
            "cannot create an EDS cluster without an EDS config",
        ],
        "cluster.ip-endpoints" | "endpoints.ip-addresses" => &["malformed IP address"],
        "cluster.logical-dns-single-host" => &["LOGICAL_DNS clusters must have a single"],
        "cluster.health-checks" => &["all health checks must have a name"],
        "cluster.per-host-thresholds" => &["Unsupported field in per_host_thresholds"],
        "cluster.hash-weight-sums" => {
            &["The sum of weights of all localities at the same priority exceeds"]
        }
        "endpoints.drop-overloads" => &["drop_overloads config"],
        "secret.certificate" => &[
            "Failed to load private key",
            "Failed to load certificate chain",
        ],
        "secret.session-ticket-keys" => &["Incorrect TLS session ticket key length"],
        "secret.validation-context" => &["Failed to load trusted CA certificates"],
        _ => &[],
    }
}

/// Families only a stream can show (`envoy --mode validate` has no EDS stream).
const STREAM_ONLY: &[&str] = &["endpoints.cluster-name"];

#[test]
fn each_rule_envoy_keeps_in_code_is_checked_and_envoy_refuses_what_it_flags() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let good = pair("a.example.com");
    let other = pair("b.example.com");

    // The same resources without a breach: Envoy takes each, Isobar flags none.
    let fine = [
        Resource::Route(table(json!([
            vhost(
                "a",
                &["*"],
                json!({"request_headers_to_add": [{"header": {"key": "x-a", "value": "%REQ(x-b)% 50%%"}, "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}]})
            ),
            vhost("b", &["a.example.com", "*.example.com"], json!({}))
        ]))),
        Resource::Listener(listener(
            10000,
            json!([
                {"filter_chain_match": {"server_names": ["a.example.com"]}, "filters": [{"name": "hcm", "typed_config": hcm(table(json!([vhost("v", &["*"], json!({}))])), router())}]},
                {"filter_chain_match": {"server_names": ["*.example.com"]}, "filters": [{"name": "hcm", "typed_config": hcm(table(json!([vhost("v", &["*"], json!({}))])), router())}]},
            ]),
        )),
        Resource::Cluster(static_cluster("x", json!([endpoint("127.0.0.1")]))),
        Resource::Endpoints(
            json!({"cluster_name": "e", "endpoints": [{"lb_endpoints": [endpoint("127.0.0.1")]}]}),
        ),
        Resource::Secret(certificate("cert", &good.cert, &good.key)),
    ];
    for (n, resource) in fine.iter().enumerate() {
        let flagged = resource.families();
        assert!(flagged.is_empty(), "fine case {n} flagged: {flagged:?}");
        let (taken, said) = envoy_takes(&bootstrap(resource, &good), dir.path(), 1000 + n);
        assert!(taken, "Envoy refused fine case {n}: {said}");
    }

    let mut covered = BTreeSet::new();
    for (n, (family, resource)) in cases(&good, &other).into_iter().enumerate() {
        let flagged = resource.families();
        assert!(
            flagged.contains(family),
            "case {n} ({family}) not flagged; flagged: {flagged:?}"
        );
        let (taken, said) = envoy_takes(&bootstrap(&resource, &good), dir.path(), n);
        assert!(!taken, "case {n} ({family}): Envoy took what Isobar flags");
        assert!(
            envoy_says(family).iter().any(|w| said.contains(w)),
            "case {n} ({family}): Envoy refused it for another reason: {said}"
        );
        assert!(!said.trim().is_empty(), "case {n}: Envoy said nothing");
        covered.insert(family);
    }
    let untested: Vec<&&str> = FAMILIES
        .iter()
        .filter(|f| !covered.contains(**f) && !STREAM_ONLY.contains(f))
        .collect();
    assert!(untested.is_empty(), "families without a case: {untested:?}");
}

/// The EDS name rule: a ClusterLoadAssignment named other than the resource asked for.
#[test]
fn endpoints_named_other_than_their_resource_are_flagged() {
    let cla = Resource::Endpoints(json!({"cluster_name": "e", "endpoints": []}));
    let (t, message, json) = cla.xds();
    let descriptor = pool()
        .unwrap_or_else(|e| panic!("{e}"))
        .get_message_by_name(message)
        .unwrap_or_else(|| panic!("no {message}"));
    let dynamic =
        DynamicMessage::deserialize(descriptor, json.clone()).unwrap_or_else(|e| panic!("{e}"));
    let bytes = prost::Message::encode_to_vec(&dynamic);
    let said = isobar::xds::semantic::check(t, "f", &bytes);
    assert!(
        said.iter()
            .any(|v| v.rule.starts_with("endpoints.cluster-name")),
        "{said:?}"
    );
    assert!(isobar::xds::semantic::check(t, "e", &bytes).is_empty());
}

/// RE2's program size, which Envoy caps (at 1,048,576 under Isobar's runtime layer), is
/// counted from below: for each pattern, Isobar's figure is no more than the size Envoy
/// reports (read with the cap at 1, so Envoy reports every size).
#[test]
fn re2_program_sizes_are_counted_from_below() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let patterns = [
        "/",
        "/api/v1",
        "^/api/v[0-9]+/users/[a-zA-Z0-9_-]+/orders/[0-9]{1,10}$",
        "/[a-z]{50}",
        "/(foo|bar|baz)[0-9]{20}",
        ".*",
        "(?i)/static/.*\\.(css|js|png)$",
        "/x{3,7}y*z+",
        "^/(?:a|b)/[^/]+/?$",
        "/\\d+/\\w+",
        "/[a-z]{99}",
        "/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}",
        "/(a(b(c)))",
        "^$",
        "/é+",
        "/[^\\n]{3}",
    ];
    for (n, pattern) in patterns.iter().enumerate() {
        let route = json!({"match": {"safe_regex": {"regex": pattern}}, "route": {"cluster": "c"}});
        let mut config = bootstrap(
            &Resource::Route(table(
                json!([{"name": "v", "domains": ["*"], "routes": [route]}]),
            )),
            &pair("a.example.com"),
        );
        config["layered_runtime"] = json!({"layers": [{"name": "s", "static_layer": {"re2.max_program_size.error_level": 1}}]});
        let (taken, said) = envoy_takes(&config, dir.path(), n);
        assert!(!taken, "{pattern}: Envoy took it with the cap at 1");
        let real: u64 = said
            .split("RE2 program size of ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{pattern}: no size in {said}"));
        let counted = isobar::xds::semantic::re2_program_size_at_least(pattern)
            .unwrap_or_else(|| panic!("{pattern} does not parse"));
        assert!(
            counted <= real,
            "{pattern}: counted {counted}, RE2's is {real}"
        );
        assert!(isobar::xds::semantic::re2(pattern).is_ok(), "{pattern}");
    }
}

/// The listener manager's rule across listeners: a second listener on an address another
/// holds (same socket type) is flagged by Isobar, the first is not, and a real Envoy
/// refuses the pair while it takes each alone and the pair on different ports or
/// socket types.
#[test]
fn a_listener_on_another_listeners_address_is_flagged_and_refused() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let good = pair("a.example.com");
    let chain = || json!([{"filters": [{"name": "hcm", "typed_config": hcm(table(json!([vhost("v", &["*"], json!({}))])), router())}]}]);
    let on = |name: &str, address: &str, port: u16, protocol: &str| {
        let mut l = listener(port, chain());
        l["name"] = json!(name);
        l["address"] = json!({"socket_address": {"address": address, "port_value": port, "protocol": protocol}});
        l
    };
    let encoded = |l: &Value| -> Vec<u8> {
        let descriptor = pool()
            .unwrap_or_else(|e| panic!("{e}"))
            .get_message_by_name("envoy.config.listener.v3.Listener")
            .unwrap_or_else(|| panic!("no Listener"));
        let dynamic =
            DynamicMessage::deserialize(descriptor, l.clone()).unwrap_or_else(|e| panic!("{e}"));
        prost::Message::encode_to_vec(&dynamic)
    };
    let run = |listeners: &[Value], n: usize| {
        let mut config = bootstrap(&Resource::Listener(listeners[0].clone()), &good);
        config["static_resources"]["listeners"] = json!(listeners);
        envoy_takes(&config, dir.path(), 2000 + n)
    };
    let flagged = |listeners: &[Value]| -> Vec<String> {
        let bytes: Vec<Vec<u8>> = listeners.iter().map(encoded).collect();
        let named: Vec<(&str, &[u8])> = listeners
            .iter()
            .zip(&bytes)
            .map(|(l, b)| (l["name"].as_str().unwrap_or_default(), &b[..]))
            .collect();
        isobar::xds::semantic::listeners_across(&named)
            .into_iter()
            .map(|(name, v)| {
                assert!(v.rule.starts_with("listener.duplicate-address"), "{v}");
                name
            })
            .collect()
    };
    let clash = [
        on("first", "127.0.0.1", 10000, "TCP"),
        on("second", "127.0.0.1", 10000, "TCP"),
    ];
    assert_eq!(flagged(&clash), ["second"]);
    let (taken, said) = run(&clash, 0);
    assert!(!taken, "Envoy took two listeners on one address");
    assert!(said.contains("has duplicate address"), "{said}");
    for (n, fine) in [
        [
            on("first", "127.0.0.1", 10000, "TCP"),
            on("second", "127.0.0.1", 10001, "TCP"),
        ],
        [
            on("first", "127.0.0.1", 10000, "TCP"),
            on("second", "127.0.0.1", 10000, "UDP"),
        ],
    ]
    .into_iter()
    .enumerate()
    {
        assert_eq!(flagged(&fine), Vec::<String>::new());
        if fine[1]["address"]["socket_address"]["protocol"] == "UDP" {
            // A UDP listener takes no HTTP filter chain; Isobar's own are udp_proxy ones.
            continue;
        }
        let (taken, said) = run(&fine, 1 + n);
        assert!(
            taken,
            "Envoy refused listeners on different addresses: {said}"
        );
    }
}
