//! Objects → IR, conditions and xDS, in process.

use std::path::Path;

use isobar::cli::serve::envoy_settings;
use isobar::config::Config;
use isobar::provider::manifest::parse_file;
use isobar::runner::pipeline::{BuildOutput, Pipeline};
use isobar::xds::{Resources, translate};
use isobar_sdk::condition::{CurrentStatus, Reason};
use isobar_sdk::ir::{PathMatch, RouteAction};
use isobar_sdk::{Kind, ObjectKey, Objects};

use crate::support::service_yaml;

fn objects(yaml: &str) -> Objects {
    let mut objects = Objects::default();
    for object in parse_file(Path::new("test.yaml"), yaml).unwrap_or_else(|e| panic!("{e}")) {
        objects.apply(object);
    }
    objects
}

fn build(yaml: &str) -> (BuildOutput, Resources) {
    let config = Config::default();
    let pipeline = Pipeline::for_config(&config).unwrap_or_else(|e| panic!("{e}"));
    let objects = objects(yaml);
    let output = pipeline.build(&objects);
    let resources = translate(&output.ir, &objects, &envoy_settings(&config));
    (output, resources)
}

fn proxy(ns: &str, name: &str, fqdn: &str, prefix: &str, service: &str) -> String {
    format!(
        r#"apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {{name: {name}, namespace: {ns}}}
spec:
  virtualhost: {{fqdn: {fqdn}}}
  routes:
    - conditions: [{{prefix: {prefix}}}]
      services: [{{name: {service}, port: 80}}]
"#
    )
}

fn key(kind: Kind, ns: &str, name: &str) -> ObjectKey {
    ObjectKey::new(kind, ns, name)
}

/// The message of `key`'s first error.
fn first_error(out: &BuildOutput, key: &ObjectKey) -> String {
    out.status
        .get(key)
        .and_then(|s| s.errors.first())
        .map(|e| e.message.clone())
        .unwrap_or_default()
}

fn reasons(out: &BuildOutput, key: &ObjectKey) -> Vec<Reason> {
    out.status
        .get(key)
        .map(|s| s.errors.iter().map(|e| e.reason).collect())
        .unwrap_or_default()
}

#[test]
fn route_whose_services_are_all_missing_answers_503() {
    let (out, _) = build(&proxy("default", "p", "a.example.com", "/", "missing"));
    let vhost = &out.ir.virtual_hosts(isobar_sdk::ir::HTTP_LISTENER)["a.example.com"];
    let route = vhost
        .routes
        .values()
        .next()
        .unwrap_or_else(|| panic!("no route"));
    assert_eq!(
        route.action,
        RouteAction::DirectResponse {
            status: 503,
            body: None
        }
    );
    let k = key(isobar_contour::HTTP_PROXY, "default", "p");
    assert_eq!(reasons(&out, &k), vec![Reason::ServiceUnresolvedReference]);
    assert_eq!(
        out.status.get(&k).map(|s| s.current()),
        Some(CurrentStatus::Invalid)
    );
}

#[test]
fn services_resolve_only_in_the_proxys_namespace() {
    let yaml = format!(
        "{}---\n{}",
        service_yaml("other", "web", 9000),
        proxy("default", "p", "a.example.com", "/", "web")
    );
    let (out, _) = build(&yaml);
    assert_eq!(
        reasons(&out, &key(isobar_contour::HTTP_PROXY, "default", "p")),
        vec![Reason::ServiceUnresolvedReference]
    );
}

/// A port number a Service gives twice (UDP and TCP, as DNS does) routes to the TCP
/// one; a port that is only UDP is an unresolved reference saying so.
#[test]
fn a_port_number_resolves_to_its_tcp_port() {
    let yaml = format!(
        r#"apiVersion: v1
kind: Service
metadata: {{name: dns, namespace: default}}
spec: {{ports: [{{name: dns-udp, port: 80, protocol: UDP}}, {{name: dns-tcp, port: 80, protocol: TCP}}]}}
---
apiVersion: v1
kind: Service
metadata: {{name: udp-only, namespace: default}}
spec: {{ports: [{{name: syslog, port: 80, protocol: UDP}}]}}
---
{}---
{}"#,
        proxy("default", "both", "both.example.com", "/", "dns"),
        proxy("default", "udp", "udp.example.com", "/", "udp-only")
    );
    let (out, _) = build(&yaml);
    let clusters: Vec<_> = out.ir.clusters.values().collect();
    assert_eq!(clusters.len(), 1, "{clusters:?}");
    assert_eq!(
        (clusters[0].service.as_str(), clusters[0].port_name.as_str()),
        ("dns", "dns-tcp")
    );
    assert_eq!(
        reasons(&out, &key(isobar_contour::HTTP_PROXY, "default", "both")),
        vec![]
    );
    let k = key(isobar_contour::HTTP_PROXY, "default", "udp");
    assert_eq!(reasons(&out, &k), vec![Reason::ServiceUnresolvedReference]);
    let message = first_error(&out, &k);
    assert!(message.contains("is UDP"), "{message}");
}

/// An ExternalName Service is not routed to (Contour's default): the route answers 503
/// and the proxy says why.
#[test]
fn an_external_name_service_is_an_unresolved_reference() {
    let yaml = format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: outside, namespace: default}}\nspec: {{type: ExternalName, externalName: api.example.net, ports: [{{port: 80}}]}}\n---\n{}",
        proxy("default", "p", "a.example.com", "/", "outside")
    );
    let (out, _) = build(&yaml);
    assert!(out.ir.clusters.is_empty(), "{:?}", out.ir.clusters);
    let k = key(isobar_contour::HTTP_PROXY, "default", "p");
    assert_eq!(reasons(&out, &k), vec![Reason::ServiceUnresolvedReference]);
    let message = first_error(&out, &k);
    assert!(
        message.contains("ExternalName") && message.contains("api.example.net"),
        "{message}"
    );
}

#[test]
fn duplicate_fqdn_invalidates_every_claimant_and_nothing_else() {
    let yaml = [
        service_yaml("a", "web", 9000),
        service_yaml("b", "web", 9001),
        service_yaml("c", "web", 9002),
        proxy("a", "first", "Shared.example.com", "/", "web"),
        proxy("b", "second", "shared.example.com.", "/", "web"),
        proxy("c", "bystander", "other.example.com", "/", "web"),
    ]
    .join("---\n");
    let (out, _) = build(&yaml);
    assert!(
        !out.ir
            .virtual_hosts(isobar_sdk::ir::HTTP_LISTENER)
            .contains_key("shared.example.com")
    );
    assert!(
        out.ir
            .virtual_hosts(isobar_sdk::ir::HTTP_LISTENER)
            .contains_key("other.example.com")
    );
    for (ns, name) in [("a", "first"), ("b", "second")] {
        assert_eq!(
            reasons(&out, &key(isobar_contour::HTTP_PROXY, ns, name)),
            vec![Reason::DuplicateVhost]
        );
    }
    let message = first_error(&out, &key(isobar_contour::HTTP_PROXY, "a", "first"));
    assert!(
        message.contains("a/first") && message.contains("b/second"),
        "{message}"
    );
    assert!(
        out.status
            .is_valid(&key(isobar_contour::HTTP_PROXY, "c", "bystander"))
    );
}

#[test]
fn an_invalid_proxy_leaves_other_resources_byte_identical() {
    let valid = [
        service_yaml("default", "web", 9000),
        proxy("default", "good", "good.example.com", "/", "web"),
    ]
    .join("---\n");
    let (_, before) = build(&valid);
    let bad_proxies = [
        proxy("default", "bad", "bad.example.com", "no-slash", "web"),
        proxy("default", "bad", "", "/", "web"),
        proxy("default", "bad", "bad host.example.com", "/", "web"),
        "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {name: bad, namespace: default}\nspec:\n  virtualhost: {fqdn: bad.example.com}\n".to_string(),
        "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {name: bad, namespace: default}\nspec:\n  virtualhost: {fqdn: bad.example.com, tls: {secretName: s}}\n  routes: [{services: [{name: web, port: 80}]}]\n".to_string(),
        "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {name: bad, namespace: default}\nspec:\n  virtualhost: {fqdn: bad.example.com}\n  routes: [{services: [{name: web, port: 70000}]}]\n".to_string(),
    ];
    for bad in bad_proxies {
        let (out, after) = build(&format!("{valid}---\n{bad}"));
        let k = key(isobar_contour::HTTP_PROXY, "default", "bad");
        assert_eq!(
            out.status.get(&k).map(|s| s.current()),
            Some(CurrentStatus::Invalid),
            "{bad}"
        );
        assert_eq!(
            before, after,
            "an invalid proxy changed the served resources:\n{bad}"
        );
    }
}

#[test]
fn unsupported_restricting_fields_fail_closed_and_others_warn() {
    let yaml = format!(
        "{}---\napiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: p, namespace: default}}\nspec:\n  virtualhost: {{fqdn: a.example.com}}\n  routes:\n    - jwtVerificationPolicy: {{require: provider}}\n      services: [{{name: web, port: 80}}]\n---\napiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: q, namespace: default}}\nspec:\n  virtualhost: {{fqdn: b.example.com}}\n  routes:\n    - services: [{{name: web, port: 80}}]\n      futureRoutingFeature: {{enabled: true}}\n",
        service_yaml("default", "web", 9000)
    );
    let (out, _) = build(&yaml);
    assert!(
        !out.ir
            .virtual_hosts(isobar_sdk::ir::HTTP_LISTENER)
            .contains_key("a.example.com")
    );
    assert_eq!(
        reasons(&out, &key(isobar_contour::HTTP_PROXY, "default", "p")),
        vec![Reason::JWTProviderNotDefined]
    );
    assert!(
        out.ir
            .virtual_hosts(isobar_sdk::ir::HTTP_LISTENER)
            .contains_key("b.example.com")
    );
    let q = out
        .status
        .get(&key(isobar_contour::HTTP_PROXY, "default", "q"))
        .cloned()
        .unwrap_or_default();
    assert!(q.errors.is_empty());
    assert_eq!(
        q.warnings.first().map(|w| w.reason),
        Some(Reason::IgnoredField)
    );
}

#[test]
fn non_root_proxies_are_orphaned() {
    let yaml = "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {name: child, namespace: default}\nspec:\n  routes: [{services: [{name: web, port: 80}]}]\n";
    let (out, _) = build(yaml);
    let status = out
        .status
        .get(&key(isobar_contour::HTTP_PROXY, "default", "child"))
        .map(|s| s.current());
    assert_eq!(status, Some(CurrentStatus::Orphaned));
}

#[test]
fn weights_follow_contour() {
    let yaml = format!(
        "{}---\n{}---\napiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: p, namespace: default}}\nspec:\n  virtualhost: {{fqdn: a.example.com}}\n  routes:\n    - conditions: [{{prefix: /even}}]\n      services: [{{name: a, port: 80}}, {{name: b, port: 80}}]\n    - conditions: [{{prefix: /zero}}]\n      services: [{{name: a, port: 80, weight: 100}}, {{name: b, port: 80, weight: 0}}]\n    - conditions: [{{prefix: /huge}}]\n      services: [{{name: a, port: 80, weight: 4294967295}}, {{name: b, port: 80, weight: 2147483648}}, {{name: a, port: 80, weight: 1}}]\n",
        service_yaml("default", "a", 9000),
        service_yaml("default", "b", 9001)
    );
    let (out, _) = build(&yaml);
    let routes = &out.ir.virtual_hosts(isobar_sdk::ir::HTTP_LISTENER)["a.example.com"].routes;
    let weights = |prefix: &str| -> Vec<u32> {
        routes
            .values()
            .find(|r| r.matcher.path == PathMatch::Prefix(prefix.into()))
            .map(|r| match &r.action {
                RouteAction::Forward(w) => w.iter().map(|c| c.weight).collect(),
                _ => Vec::new(),
            })
            .unwrap_or_default()
    };
    assert_eq!(weights("/even"), vec![1, 1]);
    assert_eq!(weights("/zero"), vec![100]);
    // Envoy refuses weights adding up to more than u32::MAX: divided down, same split.
    let huge = weights("/huge");
    let total: u64 = huge.iter().map(|w| u64::from(*w)).sum();
    assert!(total <= u64::from(u32::MAX), "{huge:?}");
    assert_eq!(huge.len(), 3);
    assert_eq!(huge[0] / huge[1], 1, "{huge:?}");
    assert!(huge[0] / 2 <= huge[1] + 1 && huge[2] == 1, "{huge:?}");
}

#[test]
fn ingress_paths_map_to_contours_match_types() {
    let yaml = format!(
        r#"{}---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {{name: i, namespace: default}}
spec:
  defaultBackend: {{service: {{name: web, port: {{number: 80}}}}}}
  rules:
    - host: "*.wild.example.com"
      http:
        paths:
          - {{path: /exact, pathType: Exact, backend: {{service: {{name: web, port: {{name: http}}}}}}}}
          - {{path: /seg/, pathType: Prefix, backend: {{service: {{name: web, port: {{number: 80}}}}}}}}
          - {{path: /, pathType: Prefix, backend: {{service: {{name: web, port: {{number: 80}}}}}}}}
          - {{path: /str, pathType: ImplementationSpecific, backend: {{service: {{name: web, port: {{number: 80}}}}}}}}
          - {{path: "/re[0-9]+", pathType: ImplementationSpecific, backend: {{service: {{name: web, port: {{number: 80}}}}}}}}
"#,
        service_yaml("default", "web", 9000)
    );
    let (out, _) = build(&yaml);
    let vhost = &out.ir.virtual_hosts(isobar_sdk::ir::HTTP_LISTENER)["*.wild.example.com"];
    let paths: Vec<&PathMatch> = vhost.routes.keys().map(|m| &m.path).collect();
    assert_eq!(
        paths,
        vec![
            &PathMatch::Prefix("/".into()),
            &PathMatch::Prefix("/str".into()),
            &PathMatch::SegmentPrefix("/seg".into()),
            &PathMatch::Exact("/exact".into()),
            &PathMatch::Regex("/re[0-9]+".into()),
        ]
    );
    assert!(vhost.routes.keys().all(|m| m.authority_regex.is_some()));
    assert!(
        out.ir.virtual_hosts(isobar_sdk::ir::HTTP_LISTENER)["*"]
            .routes
            .keys()
            .any(|m| m.path == PathMatch::Prefix("/".into()))
    );
    assert!(out.status.is_valid(&key(Kind::Ingress, "default", "i")));
}

#[test]
fn httpproxy_overrides_ingress_on_the_same_host_and_match() {
    let yaml = format!(
        "{}---\n{}---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: i, namespace: default}}\nspec:\n  rules:\n    - host: a.example.com\n      http: {{paths: [{{path: /, pathType: ImplementationSpecific, backend: {{service: {{name: a, port: {{number: 80}}}}}}}}, {{path: /only-ingress, pathType: Exact, backend: {{service: {{name: a, port: {{number: 80}}}}}}}}]}}\n---\n{}",
        service_yaml("default", "a", 9000),
        service_yaml("default", "b", 9001),
        proxy("default", "p", "a.example.com", "/", "b")
    );
    let (out, _) = build(&yaml);
    let routes = &out.ir.virtual_hosts(isobar_sdk::ir::HTTP_LISTENER)["a.example.com"].routes;
    assert_eq!(routes.len(), 2);
    let root = routes
        .values()
        .find(|r| r.matcher.path == PathMatch::Prefix("/".into()));
    assert_eq!(
        root.map(|r| r.source.kind),
        Some(isobar_contour::HTTP_PROXY)
    );
}

#[test]
fn endpoints_are_ready_addresses_matched_by_port_name() {
    let yaml = r#"apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec: {ports: [{name: http, port: 80}, {name: admin, port: 81}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-x, namespace: default, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{name: http, port: 8080}, {name: admin, port: 9090}]
endpoints:
  - {addresses: [10.0.0.1]}
  - {addresses: [10.0.0.2], conditions: {ready: false}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-y, namespace: default, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{name: http, port: 5353, protocol: UDP}, {name: http, port: 8080}]
endpoints:
  - {addresses: [10.0.0.3, 10.0.0.9], conditions: {ready: true}}
  - {addresses: [10.0.0.1]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-z, namespace: default, labels: {kubernetes.io/service-name: web}}
addressType: FQDN
ports: [{name: http, port: 8080}]
endpoints:
  - {addresses: [web.example.com]}
"#;
    let objects = objects(yaml);
    let endpoints = isobar_sdk::resolve::ready_endpoints(&objects, "default", "web", "http");
    assert_eq!(
        endpoints,
        vec![
            ("10.0.0.1".to_string(), 8080),
            ("10.0.0.3".to_string(), 8080)
        ]
    );
}

#[test]
fn same_objects_give_byte_identical_resources() {
    let yaml = std::fs::read_to_string("examples/quickstart/httpproxy.yaml").unwrap_or_default()
        + "---\n"
        + &std::fs::read_to_string("examples/quickstart/services.yaml").unwrap_or_default();
    assert_eq!(build(&yaml).1, build(&yaml).1);
}

/// The store keeps a Secret's data only until it is no longer needed: a Secret in use keeps
/// its computed check (served the same), an unused one only its name and digest; equal
/// re-deliveries change nothing, new content is taken, and an elided one is wanted back.
#[test]
fn the_store_drops_secret_data_it_no_longer_needs() {
    let tls = |name: &str, cn: &str| {
        let params =
            rcgen::CertificateParams::new(vec![cn.to_string()]).unwrap_or_else(|e| panic!("{e}"));
        let key = rcgen::KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
        let cert = params.self_signed(&key).unwrap_or_else(|e| panic!("{e}"));
        let indent = |t: String| -> String { t.lines().map(|l| format!("    {l}\n")).collect() };
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: ns}}\ntype: kubernetes.io/tls\nstringData:\n  tls.crt: |\n{}  tls.key: |\n{}",
            indent(cert.pem()),
            indent(key.serialize_pem())
        )
    };
    let used = tls("used", "a.example.com");
    let unused = tls("unused", "b.example.com");
    let mut store = objects(&format!("{used}---\n{unused}"));
    let fingerprint = |store: &Objects| {
        store
            .secret_check("ns", "used")
            .and_then(|c| c.certificate.as_ref().ok().map(|c| c.fingerprint.clone()))
    };
    let before = fingerprint(&store);
    assert!(before.is_some());
    let requested = store.take_requested();
    store.elide_unrequested_secrets(&requested);
    assert_eq!(
        fingerprint(&store),
        before,
        "the check of a secret in use survives"
    );
    assert!(store.secret_check("ns", "unused").is_none());
    let wanted = store.take_requested();
    assert_eq!(
        store.elided_among(&wanted),
        vec![("ns".to_string(), "unused".to_string())]
    );
    // The same content again changes nothing; other content is taken.
    for text in [&used, &unused] {
        for object in parse_file(Path::new("again.yaml"), text).unwrap_or_else(|e| panic!("{e}")) {
            assert!(
                !store.apply(object),
                "an equal re-delivery changed the store"
            );
        }
    }
    let rotated = tls("used", "a.example.com");
    for object in parse_file(Path::new("new.yaml"), &rotated).unwrap_or_else(|e| panic!("{e}")) {
        assert!(store.apply(object));
    }
    assert!(fingerprint(&store).is_some_and(|f| Some(&f) != before.as_ref()));
    // An elided secret fetched again is usable again.
    for object in parse_file(Path::new("fetched.yaml"), &unused).unwrap_or_else(|e| panic!("{e}")) {
        assert!(store.restore(object));
    }
    assert!(store.secret_check("ns", "unused").is_some());
    // Both in use now: kept as their checks, still counted, and deleted as Secrets are.
    let requested = store.take_requested();
    store.elide_unrequested_secrets(&requested);
    assert!(store.secret_check("ns", "used").is_some());
    assert_eq!(store.counts()[&Kind::Secret], 2);
    assert!(store.delete(&key(Kind::Secret, "ns", "used")));
    assert!(store.secret_check("ns", "used").is_none());
    assert_eq!(store.counts()[&Kind::Secret], 1);
}

/// Secrets wait for their first check in one shared buffer: through additions,
/// replacements and deletions (enough to reclaim the buffer's dead bytes), each stored
/// Secret is checked as the Secret that arrived would be: type, `data` and `stringData`
/// merged, certificates, CA bundles and what is wrong with the rest.
#[test]
fn stored_secrets_are_checked_as_they_arrived() {
    use isobar_sdk::Object;
    use isobar_sdk::secret::SecretCheck;
    let key = rcgen::KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
    let indent = |t: &str| -> String { t.lines().map(|l| format!("    {l}\n")).collect() };
    let secret = |name: &str, version: usize| -> String {
        let cn = format!("v{version}.{name}.example.com");
        let params = rcgen::CertificateParams::new(vec![cn]).unwrap_or_else(|e| panic!("{e}"));
        let cert = params.self_signed(&key).unwrap_or_else(|e| panic!("{e}"));
        let body = match name.len() % 4 {
            // A TLS secret, its key under `data` (base64) and its chain under `stringData`.
            0 => format!(
                "type: kubernetes.io/tls\ndata:\n  tls.key: {}\nstringData:\n  tls.crt: |\n{}",
                base64_of(key.serialize_pem().as_bytes()),
                indent(&cert.pem())
            ),
            // No type, a CA bundle only.
            1 => format!("stringData:\n  ca.crt: |\n{}", indent(&cert.pem())),
            // A type Isobar does not serve: its data is not kept.
            2 => format!(
                "type: kubernetes.io/basic-auth\nstringData:\n  username: u\n  ca.crt: not pem {version}\n"
            ),
            // Opaque, with a chain that is not PEM and an empty CRL.
            _ => format!(
                "type: Opaque\nstringData:\n  tls.crt: not pem {version}\n  crl.pem: \"\"\n  username: u\n  tls.key: |\n{}",
                indent(&key.serialize_pem())
            ),
        };
        format!("apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: ns}}\n{body}")
    };
    let parse = |text: &str| -> Object {
        let mut objects = parse_file(Path::new("s.yaml"), text).unwrap_or_else(|e| panic!("{e}"));
        objects
            .pop()
            .unwrap_or_else(|| panic!("no object in {text}"))
    };
    let expected = |object: &Object| -> SecretCheck {
        match object.get::<isobar_sdk::api::Secret>() {
            Some(s) => SecretCheck::of(s),
            None => panic!("not a secret: {object:?}"),
        }
    };
    let mut store = Objects::default();
    let mut want = std::collections::BTreeMap::new();
    let names: Vec<String> = (0..120)
        .map(|i| format!("s{i}{}", "x".repeat(i % 4)))
        .collect();
    for round in 0..3 {
        for (i, name) in names.iter().enumerate() {
            if round > 0 && i % 3 == round {
                assert!(store.delete(&key_of(name)));
                want.remove(name);
                continue;
            }
            if round > 0 && i % 2 == 0 {
                continue;
            }
            let object = parse(&secret(name, round));
            // Of a type Isobar does not serve, only the type is kept: a new version of
            // its data changes nothing.
            let changes = !want.contains_key(name) || name.len() % 4 != 2;
            want.insert(name.clone(), expected(&object));
            assert_eq!(
                store.apply(object),
                changes,
                "{name} round {round}: whether a new version changes the store"
            );
        }
    }
    assert_eq!(store.counts()[&Kind::Secret], want.len());
    for name in &names {
        assert_eq!(store.secret_check("ns", name), want.get(name), "{name}");
    }
    // A new version that changes only what Isobar does not read changes nothing.
    let kept = want
        .keys()
        .find(|n| n.len() % 4 == 3)
        .cloned()
        .unwrap_or_default();
    assert!(store.apply(parse(&secret(&kept, 7))));
    let relabelled = secret(&kept, 7)
        .replace("username: u\n", "username: other\n")
        .replace("namespace: ns}", "namespace: ns, labels: {a: b}}");
    assert!(!store.apply(parse(&relabelled)), "{kept}: {relabelled}");
    assert_eq!(
        store.secret_check("ns", &kept),
        Some(&expected(&parse(&secret(&kept, 7))))
    );

    fn key_of(name: &str) -> ObjectKey {
        ObjectKey::new(Kind::Secret, "ns", name)
    }
    fn base64_of(bytes: &[u8]) -> String {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }
}

/// Contour's static mode: with `gateway.gatewayRef`, that one Gateway is served whatever
/// its class, and no other (not even one of this controller's classes); a Gateway
/// listener port P lands on Contour's container port, P + 8000 wrapped past 65535 and
/// kept clear of 1-1023.
#[test]
fn gateway_ref_serves_one_gateway_on_contours_container_ports() {
    let yaml = r#"apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: ours}
spec: {controllerName: projectcontour.io/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: provisioned}
spec: {controllerName: example.com/provisioner}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: static, namespace: projectcontour}
spec:
  gatewayClassName: provisioned
  listeners:
    - {name: high, protocol: HTTP, port: 60000}
    - {name: wraps-low, protocol: HTTP, port: 57600}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: other, namespace: default}
spec:
  gatewayClassName: ours
  listeners: [{name: http, protocol: HTTP, port: 10081}]
"#;
    let config = Config {
        gateway: Some(
            serde_json::json!({"gatewayRef": {"namespace": "projectcontour", "name": "static"}}),
        ),
        ..Config::default()
    };
    let pipeline = Pipeline::for_config(&config).unwrap_or_else(|e| panic!("{e}"));
    let out = pipeline.build(&objects(yaml));
    let ports: Vec<(String, u16)> = out
        .ir
        .listeners
        .values()
        .filter(|l| l.name.starts_with("http-"))
        .map(|l| (l.name.clone(), l.port))
        .collect();
    // 60000 + 8000 - 65535 = 2465; 57600 + 8000 - 65535 = 65, moved past 1023 to 1088.
    assert_eq!(
        ports,
        vec![
            ("http-57600".to_string(), 1088),
            ("http-60000".to_string(), 2465)
        ]
    );
    let gateway = |ns: &str, name: &str| {
        out.status
            .get(&key(isobar_plugin_gateway_api::kinds::GATEWAY, ns, name))
            .and_then(|s| s.gateway.as_ref())
            .map(|g| {
                g.conditions
                    .iter()
                    .map(|c| c.type_.clone())
                    .collect::<Vec<_>>()
            })
    };
    assert_eq!(
        gateway("projectcontour", "static"),
        Some(vec!["Accepted".to_string(), "Programmed".to_string()])
    );
    assert_eq!(gateway("default", "other"), None);
}

/// With `enableExternalNameService`, an ExternalName Service is a DNS cluster of its
/// name; one naming this host (a localhost name, a loopback or link-local address) is
/// still an unresolved reference, whatever the setting.
#[test]
fn external_names_resolve_by_dns_when_enabled_but_never_to_this_host() {
    let mut yaml = String::new();
    for (name, external) in [
        ("db", "db.example.net"),
        ("local", "localhost"),
        ("loop", "127.0.0.2"),
        ("meta", "169.254.169.254"),
        ("six", "::1"),
    ] {
        yaml.push_str(&format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: ns}}\nspec: {{type: ExternalName, externalName: \"{external}\", ports: [{{port: 443}}]}}\n---\n{}---\n",
            proxy("ns", name, &format!("{name}.example.com"), "/", name)
                .replace("port: 80", "port: 443")
        ));
    }
    let config = Config {
        enable_external_name_service: true,
        ..Config::default()
    };
    let pipeline = Pipeline::for_config(&config).unwrap_or_else(|e| panic!("{e}"));
    let objects = objects(&yaml);
    let out = pipeline.build(&objects);
    let db = out
        .ir
        .clusters
        .values()
        .find(|c| c.service == "db")
        .unwrap_or_else(|| panic!("no cluster for db"));
    assert_eq!(db.options.external_name.as_deref(), Some("db.example.net"));
    let resources = translate(&out.ir, &objects, &envoy_settings(&config));
    assert!(
        !resources.endpoints.keys().any(|k| k.contains("/db/")),
        "an ExternalName cluster has no endpoint set"
    );
    for name in ["local", "loop", "meta", "six"] {
        let error = first_error(&out, &key(isobar_contour::HTTP_PROXY, "ns", name));
        assert!(
            error.contains(
                "is an ExternalName service that points to localhost or a link-local address"
            ),
            "{name}: {error}"
        );
    }
}

/// An include chain 3,000 proxies long (any tenant may write one) is followed to
/// `MAX_INCLUDE_DEPTH` on a thread with a Tokio worker's stack (2 MiB): the proxy whose
/// include goes past it gets `IncludeTooDeep`, its conditions answer 502, and a plain
/// `tcpproxy` chain stops the same way.
#[test]
fn include_chains_past_the_depth_limit_are_an_error_not_a_crash() {
    let depth = 3000;
    let mut yaml = service_yaml("default", "web", 18100);
    yaml.push_str("---\napiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {name: d0, namespace: default}\nspec:\n  virtualhost: {fqdn: deep.example.com}\n  includes: [{name: d1, conditions: [{prefix: /a}]}]\n");
    for i in 1..depth {
        let body = if i + 1 < depth {
            format!("  includes: [{{name: d{}}}]\n", i + 1)
        } else {
            "  routes: [{services: [{name: web, port: 80}]}]\n".to_string()
        };
        yaml.push_str(&format!(
            "---\napiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: d{i}, namespace: default}}\nspec:\n{body}"
        ));
    }
    yaml.push_str("---\napiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {name: t0, namespace: default}\nspec:\n  virtualhost: {fqdn: tcp.example.com, tls: {passthrough: true}}\n  tcpproxy: {include: {name: t1}}\n");
    for i in 1..depth {
        let tcp = if i + 1 < depth {
            format!("{{include: {{name: t{}}}}}", i + 1)
        } else {
            "{services: [{name: web, port: 80}]}".to_string()
        };
        yaml.push_str(&format!(
            "---\napiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: t{i}, namespace: default}}\nspec:\n  tcpproxy: {tcp}\n"
        ));
    }
    let built = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || build(&yaml))
        .unwrap_or_else(|e| panic!("{e}"))
        .join();
    let (mut out, _) = built.unwrap_or_else(|_| panic!("the build panicked"));
    let last = isobar_plugin_httpproxy::MAX_INCLUDE_DEPTH - 1;
    let at = |name: &str| key(isobar_contour::HTTP_PROXY, "default", name);
    assert_eq!(
        reasons(&out, &at(&format!("d{last}"))),
        vec![Reason::IncludeTooDeep]
    );
    assert_eq!(
        reasons(&out, &at(&format!("t{last}"))),
        vec![Reason::IncludeTooDeep]
    );
    let vhost = out
        .ir
        .virtual_hosts_of_mut("deep.example.com")
        .next()
        .unwrap_or_else(|| panic!("deep.example.com is not served"));
    assert!(
        vhost
            .routes
            .values()
            .any(|r| matches!(r.action, RouteAction::DirectResponse { status: 502, .. })),
        "no 502 route on deep.example.com"
    );
}

/// Contour's top-level keys of contour.yaml reach the plugins that read them, each as its
/// registration says: `gateway` enables the Gateway API source under its controller name,
/// `globalExtAuth` the ExtensionService source.
#[test]
fn contours_top_level_keys_configure_and_enable_the_plugins_that_read_them() {
    let mut config = Config::default();
    config.pipeline.sources = vec!["httpproxy".into()];
    let plain = Pipeline::for_config(&config).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(plain.routing_kinds(), [isobar_contour::HTTP_PROXY].into());
    assert_eq!(
        plain.controller_name(),
        "projectcontour.io/gateway-controller"
    );

    config.gateway = Some(serde_json::json!({"controllerName": "example.com/gateways"}));
    config.global_ext_auth = Some(
        serde_json::from_value(serde_json::json!({"extensionService": "auth/authz"}))
            .unwrap_or_else(|e| panic!("{e}")),
    );
    let configured = Pipeline::for_config(&config).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(configured.controller_name(), "example.com/gateways");
    let kinds = configured.routing_kinds();
    assert!(
        kinds.contains(&isobar_contour::EXTENSION_SERVICE),
        "{kinds:?}"
    );
    assert!(
        kinds.contains(&isobar_plugin_gateway_api::kinds::HTTP_ROUTE),
        "{kinds:?}"
    );
}
