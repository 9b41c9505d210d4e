use std::sync::Arc;

use isobar_sdk::ir::{Listener, PathMatch, Route, RouteAction, RouteMatch, WeightedCluster};
use isobar_sdk::{Object, ObjectKey};

use super::*;
use crate::xds::TlsSettings;

fn settings() -> EnvoySettings {
    EnvoySettings {
        client_certificate: None,
        tls: TlsSettings {
            min_version: ir::TlsVersion::V1_2,
            max_version: ir::TlsVersion::V1_3,
            cipher_suites: Vec::new(),
            ecdh_curves: Vec::new(),
            ja3: false,
            ja4: false,
        },
        connect_timeout: std::time::Duration::from_secs(2),
        access_log_path: String::new(),
        http: crate::xds::HttpSettings::default(),
        proxy_protocol: false,
        vhds: false,
        route_shards_from: 0,
        cluster: crate::xds::ClusterSettings::default(),
        listener: crate::xds::ListenerSettings::default(),
        runtime: crate::xds::RuntimeSettings::default(),
        metrics_tls: None,
    }
}

fn cluster(service: &str) -> ir::Cluster {
    ir::Cluster {
        name: format!("ns/{service}/80/da39a3ee5e"),
        namespace: "ns".to_string(),
        service: service.to_string(),
        port: 80,
        port_name: "http".to_string(),
        eds_name: format!("ns/{service}/http"),
        alt_stat_name: format!("ns_{service}_80"),
        options: ir::ClusterOptions::default(),
        localities: Vec::new(),
    }
}

fn objects() -> Objects {
    let mut objects = Objects::default();
    for service in ["auth", "app"] {
        let mut s = isobar_sdk::api::Service::default();
        s.metadata.namespace = Some("ns".to_string());
        s.metadata.name = Some(service.to_string());
        s.spec = Some(k8s_openapi::api::core::v1::ServiceSpec {
            ports: Some(vec![k8s_openapi::api::core::v1::ServicePort {
                name: Some("http".to_string()),
                port: 80,
                ..Default::default()
            }]),
            ..Default::default()
        });
        objects.apply(Object::new(Arc::new(s)));
    }
    objects
}

/// An IR of one HTTP listener with a route to `app` on `a.example.com`, and the
/// extension cluster of `auth`.
fn ir(with_route: bool) -> Ir {
    let mut ir = Ir::with_listeners([Listener::http("l", "127.0.0.1", 10000)]);
    ir.add_extension_cluster(cluster("auth"));
    if with_route {
        let app = cluster("app");
        let route = route_to(&app, "/");
        ir.add_cluster(app);
        ir.add_route("l", "a.example.com", route);
    }
    ir
}

/// A route of HTTPProxy `ns/p` sending `prefix` to `app`.
fn route_to(app: &ir::Cluster, prefix: &str) -> Route {
    Route {
        matcher: RouteMatch::path(PathMatch::Prefix(prefix.to_string())),
        action: RouteAction::Forward(vec![WeightedCluster {
            cluster: app.name.clone(),
            weight: 1,
            ..Default::default()
        }]),
        source: ObjectKey::new(isobar_contour::HTTP_PROXY, "ns", "p"),
        tie: None,
        policy: None,
    }
}

/// An extension cluster is served with its endpoints whether or not a route sends to
/// it, stays when the vhosts change, is replaced when it changes (its endpoints kept)
/// and goes when the IR no longer holds it.
#[test]
fn extension_clusters_are_served_for_as_long_as_the_ir_holds_them() {
    let objects = objects();
    let (resources, mut encoder) = translate_keeping(&ir(true), &objects, &settings());
    let auth = cluster("auth");
    assert!(
        resources.clusters.contains_key(&auth.name),
        "{:?}",
        resources.clusters.keys()
    );
    assert!(resources.endpoints.contains_key(&auth.eds_name));
    assert!(resources.clusters.contains_key(&cluster("app").name));
    let original = resources.clusters[&auth.name].clone();
    // The vhost goes: its cluster goes, the extension cluster stays.
    let mut snapshot = Snapshot::new(resources);
    let touched = BTreeSet::from(["a.example.com".to_string()]);
    let changes = encoder
        .replace(&ir(false), &objects, &settings(), &touched, Some(&snapshot))
        .unwrap_or_else(|_| panic!("stale"));
    let clusters = &changes.by_type[&XdsType::Cluster];
    assert_eq!(clusters.get(&cluster("app").name), Some(&None));
    assert!(!clusters.contains_key(&auth.name), "{:?}", clusters.keys());
    snapshot = snapshot.with_all_changes(changes);
    // Its options change: the cluster is sent again, its endpoints stay.
    let mut edited = ir(false);
    let balanced = edited
        .extension_clusters
        .get_mut(&auth.name)
        .unwrap_or_else(|| panic!("no extension cluster"));
    balanced.options.lb_policy = ir::LbPolicy::Random;
    assert!(encoder.same_listeners(&edited));
    let none = BTreeSet::new();
    let changes = encoder
        .replace(&edited, &objects, &settings(), &none, Some(&snapshot))
        .unwrap_or_else(|_| panic!("stale"));
    let sent = changes.by_type[&XdsType::Cluster][&auth.name]
        .clone()
        .unwrap_or_else(|| panic!("the edited extension cluster is removed"));
    assert_ne!(sent, original);
    let endpoints = changes.by_type.get(&XdsType::Endpoint);
    assert!(
        endpoints.is_none_or(|e| e.get(&auth.eds_name).is_none_or(Option::is_some)),
        "the edited extension cluster's endpoints are removed"
    );
    snapshot = snapshot.with_all_changes(changes);
    // The IR no longer holds it: it goes, with its endpoints.
    let mut without = ir(false);
    without.extension_clusters.clear();
    let changes = encoder
        .replace(&without, &objects, &settings(), &none, Some(&snapshot))
        .unwrap_or_else(|_| panic!("stale"));
    assert_eq!(
        changes.by_type[&XdsType::Cluster].get(&auth.name),
        Some(&None)
    );
    assert_eq!(
        changes.by_type[&XdsType::Endpoint].get(&auth.eds_name),
        Some(&None)
    );
}

/// An IR of one HTTP listener with `n` exact vhosts (`site-<i>.example.com`) and one
/// wildcard vhost, each with a route to `app` at `/` (vhost `moved`'s at `/moved`).
fn many_vhosts(n: usize, moved: Option<usize>) -> Ir {
    let mut ir = Ir::with_listeners([Listener::http("l", "127.0.0.1", 10000)]);
    let app = cluster("app");
    ir.add_cluster(app.clone());
    for i in 0..n {
        let prefix = if moved == Some(i) { "/moved" } else { "/" };
        ir.add_route(
            "l",
            &format!("site-{i}.example.com"),
            route_to(&app, prefix),
        );
    }
    ir.add_route("l", "*.wild.example.com", route_to(&app, "/"));
    ir
}

/// A listener with more vhosts than 64 shards keep small has more shards: every exact
/// vhost in the one its host's number names among them, the wildcard in all, the
/// listener's expression computing the same count, and a change to one vhost sends
/// only its shard.
#[test]
fn a_listener_of_many_vhosts_has_more_shards_and_a_change_sends_one() {
    use envoy_types::pb::envoy::config::route::v3::RouteConfiguration;
    use prost::Message;
    let settings = EnvoySettings {
        route_shards_from: 1000,
        ..settings()
    };
    let n = 20_000;
    let shards = crate::xds::shard::shard_count(n + 1, 0);
    assert_eq!(shards, 128);
    let objects = objects();
    let (resources, mut encoder) = translate_keeping(&many_vhosts(n, None), &objects, &settings);
    assert_eq!(resources.routes.len(), shards);
    assert_eq!(resources.scoped_routes.len(), shards);
    let listener = String::from_utf8_lossy(&resources.listeners["l"]).into_owned();
    assert!(listener.contains(&format!(") % {shards}")), "{listener}");
    let mut placed = 0;
    for k in 0..shards {
        let name = crate::xds::shard::shard_name("l", k);
        let table = RouteConfiguration::decode(&resources.routes[&name][..])
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        for vhost in &table.virtual_hosts {
            let host = &vhost.domains[0];
            if host.starts_with('*') {
                continue;
            }
            assert_eq!(crate::xds::shard::shard_of(host, shards), k, "{host}");
            placed += 1;
        }
        assert!(
            table
                .virtual_hosts
                .iter()
                .any(|v| v.domains[0] == "*.wild.example.com"),
            "{name} lacks the wildcard vhost"
        );
    }
    assert_eq!(placed, n);
    assert_eq!(encoder.sharded_listeners()["l"], shards);
    // One vhost's route changes: its shard alone is sent again.
    let snapshot = Snapshot::new(resources);
    let fqdn = "site-4321.example.com".to_string();
    // A scoped build's IR holds the vhosts it touched.
    let mut edited = many_vhosts(n, Some(4321));
    if let Some(vhosts) = edited.virtual_hosts_mut("l") {
        vhosts.retain(|f, _| *f == fqdn);
    }
    assert!(encoder.keeps_shards(&edited, &BTreeSet::from([fqdn.clone()]), &settings));
    let changes = encoder
        .replace(
            &edited,
            &objects,
            &settings,
            &BTreeSet::from([fqdn.clone()]),
            Some(&snapshot),
        )
        .unwrap_or_else(|_| panic!("stale"));
    let sent: Vec<&String> = changes.by_type[&XdsType::Route].keys().collect();
    let name = crate::xds::shard::shard_name("l", crate::xds::shard::shard_of(&fqdn, shards));
    assert_eq!(sent, [&name]);
    // Assembled from its own vhosts, it is the shard a full build makes.
    let full = translate(&many_vhosts(n, Some(4321)), &objects, &settings);
    assert!(
        changes.by_type[&XdsType::Route][&name].as_ref() == Some(&full.routes[&name]),
        "{name} differs from a full build's"
    );
}
