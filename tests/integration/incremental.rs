//! A change built alone and spliced into the last build gives exactly what a full build
//! of the same objects gives. Every golden case goes through the runner; each of its
//! routing objects is deleted, put back and edited one at a time, and after each build
//! the published snapshot is compared with a full build of the same objects.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use isobar::cli::serve::envoy_settings;
use isobar::config;
use isobar::metrics::Metrics;
use isobar::provider::Event;
use isobar::provider::manifest::parse_file;
use isobar::runner::pipeline::Pipeline;
use isobar::runner::status::{Desired, load_balancer};
use isobar::runner::{Runner, StatusOutput};
use isobar::xds::{EnvoySettings, Snapshot, XdsType, translate};
use isobar_sdk::api::Service;
use isobar_sdk::{Kind, Object, Objects};
use tokio::sync::{mpsc, watch};

use crate::golden::{cases, manifests};

fn objects_in(dir: &Path) -> Vec<Object> {
    let mut out = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        out.extend(parse_file(&path, &text).unwrap_or_default());
    }
    out
}

/// A full build's snapshot and the statuses it would write.
fn full(pipeline: &Pipeline, settings: &EnvoySettings, objects: &[Object]) -> (Snapshot, Desired) {
    let mut store = Objects::default();
    for o in objects {
        store.apply(o.clone());
    }
    let output = pipeline.build(&store);
    let desired = Desired::from_build(
        &output.status,
        &store,
        load_balancer("", None),
        isobar::runner::status::CONTROLLER_NAME,
    );
    (
        Snapshot::new(translate(&output.ir, &store, settings)),
        desired,
    )
}

/// The Secrets a full build of `objects` asks for.
fn asked_for(
    pipeline: &Pipeline,
    objects: &[Object],
) -> std::collections::BTreeSet<(String, String)> {
    let mut store = Objects::default();
    for o in objects {
        store.apply(o.clone());
    }
    store.take_requested();
    let _ = pipeline.build(&store);
    store.take_requested()
}

/// The resources two snapshots disagree on, by type and name.
fn differences(a: &Snapshot, b: &Snapshot) -> Vec<String> {
    let mut out = Vec::new();
    for t in XdsType::ORDER {
        let (x, y) = (&a.get(t).digests, &b.get(t).digests);
        for name in x.keys().chain(y.keys()) {
            if x.get(name) != y.get(name) {
                out.push(format!("{t:?} {name}"));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// An edit that changes what a routing object routes: another prefix on its first
/// route or rule, a new FQDN, a Gateway API route's first hostname, an HTTPRoute's
/// first rule's match, a TCPRoute's first backend's weight, an ExtensionService's
/// balancing and timeout.
fn edited(object: &Object) -> Option<Object> {
    if object.kind() == Kind::Secret || object.kind() == Kind::Service {
        return None;
    }
    let mut value = object.to_json();
    let extension_service = object.kind() == isobar_contour::EXTENSION_SERVICE;
    let http_route = object.kind().to_string() == "HTTPRoute";
    let edit = |v: &mut serde_json::Value| -> Option<()> {
        // An ExtensionService: its cluster's balancing and the checks' timeout.
        if extension_service {
            let spec = v.get_mut("spec")?.as_object_mut()?;
            spec.insert(
                "loadBalancerPolicy".to_string(),
                serde_json::json!({"strategy": "Random"}),
            );
            spec.insert(
                "timeoutPolicy".to_string(),
                serde_json::json!({"response": "750ms"}),
            );
            return Some(());
        }
        // An HTTPRoute: its first hostname moved, or its first rule's path.
        if let Some(host) = v.pointer_mut("/spec/hostnames/0") {
            *host = format!("edited.{}", host.as_str()?).into();
            return Some(());
        }
        if let Some(rule) = v.pointer_mut("/spec/rules/0")
            && rule.get("backendRefs").is_some()
        {
            if http_route {
                rule["matches"] = serde_json::json!([{"path": {"value": "/edited"}}]);
            } else {
                // A TCPRoute: its first backend's weight.
                rule["backendRefs"][0]["weight"] = serde_json::json!(7);
            }
            return Some(());
        }
        if let Some(fqdn) = v.pointer_mut("/spec/virtualhost/fqdn") {
            *fqdn = format!("edited.{}", fqdn.as_str()?).into();
            return Some(());
        }
        if let Some(prefix) = v.pointer_mut("/spec/routes/0/conditions/0/prefix") {
            *prefix = format!("{}/edited", prefix.as_str()?.trim_end_matches('/')).into();
            return Some(());
        }
        let path = v.pointer_mut("/spec/rules/0/http/paths/0/path")?;
        *path = format!("{}/edited", path.as_str()?.trim_end_matches('/')).into();
        Some(())
    };
    edit(&mut value)?;
    object.kind().info().and_then(|i| (i.decode)(value).ok())
}

/// An ExtensionService whose balancing and circuit breakers changed: what only its
/// cluster reads (the proxies calling it are not rebuilt).
fn rebalanced(object: &Object) -> Option<Object> {
    if object.kind() != isobar_contour::EXTENSION_SERVICE {
        return None;
    }
    let mut value = object.to_json();
    let spec = value.get_mut("spec")?.as_object_mut()?;
    spec.insert(
        "loadBalancerPolicy".to_string(),
        serde_json::json!({"strategy": "WeightedLeastRequest"}),
    );
    spec.insert(
        "circuitBreakerPolicy".to_string(),
        serde_json::json!({"maxConnections": 9, "maxRequests": 3}),
    );
    object.kind().info().and_then(|i| (i.decode)(value).ok())
}

/// A Service whose first port is annotated as speaking h2c: its clusters change.
fn edited_service(object: &Object) -> Option<Object> {
    let mut service = object.get::<Service>()?.clone();
    let port = service.spec.as_ref()?.ports.as_ref()?.first()?.port;
    service.metadata.annotations.get_or_insert_default().insert(
        "projectcontour.io/upstream-protocol.h2c".to_string(),
        port.to_string(),
    );
    Some(Object::new(Arc::new(service)))
}

/// The same Service with its first port renamed: its clusters keep their names (number
/// and options), their endpoint set changes.
fn renamed_port(object: &Object) -> Option<Object> {
    let mut service = object.get::<Service>()?.clone();
    let port = service.spec.as_mut()?.ports.as_mut()?.first_mut()?;
    port.name = Some(format!(
        "{}-renamed",
        port.name.as_deref().unwrap_or("port")
    ));
    Some(Object::new(Arc::new(service)))
}

#[test]
fn a_change_spliced_into_the_last_build_equals_a_full_build() {
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/contour.yaml");
    let load = |flags: serde_json::Value| {
        let mut config = config::load(Some(&golden), flags)
            .unwrap_or_else(|e| panic!("golden contour.yaml: {e}"));
        // The WebAssembly processor sees the whole IR, so it makes every build a full one.
        config.pipeline.processors.retain(|p| p != "wasm");
        config
    };
    let pipeline = |config: &config::Config| {
        Pipeline::for_config(config)
            .unwrap_or_else(|e| panic!("pipeline: {e}"))
            .with_fallback_certificate(config.tls.fallback())
    };
    let config = load(serde_json::json!({}));
    assert!(
        pipeline(&config).local(),
        "the default plugins must be local"
    );
    // Every way of serving `ingress_http`: its vhosts in it, each on its own (VHDS),
    // and split into shards.
    let mut variants: Vec<(&str, config::Config, EnvoySettings)> =
        [("", 0, false), (" (vhds)", 0, true), (" (shards)", 1, true)]
            .map(|(label, shards_from, vhds)| {
                let settings = EnvoySettings {
                    vhds,
                    route_shards_from: shards_from,
                    ..envoy_settings(&config)
                };
                (label, config.clone(), settings)
            })
            .into();
    // Contour's `globalExtAuth`, over the cases that have its ExtensionService: a change
    // to it reaches every proxy.
    let global = load(serde_json::json!({"globalExtAuth": {"extensionService": "default/authz"}}));
    variants.push((" (globalExtAuth)", global.clone(), envoy_settings(&global)));
    // Gatekeeper's constraints whose templates judge each object alone (not
    // `data.inventory`), over every case: a Constraint's totals count every object.
    let mut gatekeeper = config.clone();
    gatekeeper.pipeline.processors.push("opa".to_string());
    variants.push((
        " (gatekeeper)",
        gatekeeper.clone(),
        envoy_settings(&gatekeeper),
    ));
    // The shipped Rego policies that judge each object alone or by the hosts it claims
    // (`data.isobar.hosts`), over every case: a spliced build denies what a full one does.
    let mut rego = config.clone();
    rego.pipeline.processors.push("opa".to_string());
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("policies");
    let shipped = [
        "unique-fqdn.rego",
        "no-wildcard-hosts.rego",
        "tls-required.rego",
    ]
    .map(|file| shipped.join(file).display().to_string());
    rego.plugins
        .insert("opa".into(), serde_json::json!({"policies": shipped}));
    variants.push((" (policies)", rego.clone(), envoy_settings(&rego)));
    let policies = Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/gatekeeper");
    let local_policies = [
        "https-only",
        "allowed-host-suffixes",
        "block-wildcard-ingress",
    ];
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    let (mut changes, mut spliced, mut skipped) = (0u64, 0u64, 0u64);
    // (changes, spliced) by variant.
    let mut by_variant: std::collections::BTreeMap<&str, (u64, u64)> = Default::default();
    let mut mismatches = Vec::new();
    let mut built_whole = Vec::new();
    for ((label, config, settings), (case, path)) in variants
        .iter()
        .flat_map(|v| cases().into_iter().map(move |c| (v, c)))
    {
        let case = format!("{case}{label}");
        let dir = manifests(&path, &[]);
        if label.contains("gatekeeper") {
            for name in local_policies {
                let from = policies.join(format!("{name}.yaml"));
                std::fs::copy(&from, dir.path().join(format!("gatekeeper-{name}.yaml")))
                    .unwrap_or_else(|e| panic!("{}: {e}", from.display()));
            }
        }
        let (changes_before, spliced_before) = (changes, spliced);
        let all = objects_in(dir.path());
        let global_ext_auth = label.contains("globalExtAuth");
        if global_ext_auth
            && !all
                .iter()
                .any(|o| o.kind() == isobar_contour::EXTENSION_SERVICE)
        {
            continue;
        }
        let reference = pipeline(config);
        let metrics = Arc::new(Metrics::default());
        let (snapshot_tx, snapshots) = watch::channel(None);
        let (desired_tx, desired) = watch::channel(None);
        let runner = Runner {
            pipeline: pipeline(config),
            settings: settings.clone(),
            holdoff: Duration::ZERO,
            holdoff_max: Duration::ZERO,
            metrics: metrics.clone(),
            snapshots: snapshot_tx,
            statuses: Some(StatusOutput {
                desired: desired_tx,
                fixed_address: String::new(),
                envoy_service: ("projectcontour".to_string(), "envoy".to_string()),
            }),
            debug: None,
            admission: None,
            hydrate: None,
            rejections: None,
            withheld: Default::default(),
            sharded: Default::default(),
        };
        let (events, rx) = mpsc::channel(1024);
        runtime.block_on(async {
            let task = tokio::spawn(runner.run(rx));
            // Sends one event and waits for the build it causes.
            let step = |event: Event| {
                let events = events.clone();
                let metrics = metrics.clone();
                async move {
                    let before = metrics.builds.get();
                    events
                        .send(event)
                        .await
                        .unwrap_or_else(|e| panic!("send: {e}"));
                    let started = Instant::now();
                    while metrics.builds.get() == before {
                        assert!(
                            started.elapsed() < Duration::from_secs(10),
                            "no build after a change"
                        );
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }
            };
            // Sends events that must build nothing, and checks that none followed.
            let quiet = |sent: Vec<Event>, why: String| {
                let events = events.clone();
                let metrics = metrics.clone();
                async move {
                    let before = metrics.builds.get();
                    for event in sent {
                        events
                            .send(event)
                            .await
                            .unwrap_or_else(|e| panic!("send: {e}"));
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    assert_eq!(metrics.builds.get(), before, "{why}");
                }
            };
            for o in &all {
                let _ = events.send(Event::Apply(o.clone())).await;
            }
            step(Event::Synced).await;
            let mut current: Vec<Object> = all.clone();
            let mut check = |what: String, current: &[Object]| {
                let (expected, statuses) = full(&reference, settings, current);
                let got = snapshots.borrow().as_deref().cloned().unwrap_or_default();
                if got != expected {
                    mismatches.push(format!(
                        "{case}: {what}: {:?}",
                        differences(&got, &expected)
                    ));
                }
                let written = desired.borrow().as_deref().cloned().unwrap_or_default();
                if written != statuses {
                    mismatches.push(format!(
                        "{case}: {what}: statuses differ: {:?} vs {:?}",
                        written.proxies, statuses.proxies
                    ));
                }
            };
            check("initial build".to_string(), &current);
            let kinds = reference.routing_kinds();
            let routing: Vec<usize> = (0..all.len())
                .filter(|i| kinds.contains(&all[*i].kind()))
                .collect();
            // Secrets: a build must follow a change to one a full build asks for; a
            // change to any other must not change what a full build gives.
            let secrets: Vec<Object> = all
                .iter()
                .filter(|o| o.kind() == Kind::Secret)
                .cloned()
                .collect();
            for secret in secrets {
                let key = secret.key();
                let label = format!("Secret/{}/{}", key.namespace, key.name);
                for (what, event) in [
                    ("deleted", Event::Delete(key.clone())),
                    ("put back", Event::Apply(secret.clone())),
                ] {
                    let used = asked_for(&reference, &current)
                        .contains(&(key.namespace.clone(), key.name.clone()));
                    current.retain(|o| o.key() != key);
                    if what == "put back" {
                        current.push(secret.clone());
                    }
                    if used {
                        step(event).await;
                    } else {
                        let why = format!("{case}: {label} {what}: a build for a secret nothing uses");
                        quiet(vec![event], why).await;
                        skipped += 1;
                    }
                    check(format!("{label} {what}"), &current);
                }
            }
            // Services: one a route names is rebuilt with those routes alone; one nothing
            // names builds nothing.
            let unnamed = parse_file(
                Path::new("unnamed.yaml"),
                "apiVersion: v1\nkind: Service\nmetadata: {name: nothing-names-this, namespace: default}\nspec: {ports: [{name: http, port: 80}]}\n",
            )
            .unwrap_or_else(|e| panic!("{e}"));
            let sent = unnamed
                .into_iter()
                .flat_map(|o| [Event::Apply(o.clone()), Event::Delete(o.key())])
                .collect();
            quiet(sent, format!("{case}: a build for a Service no route names")).await;
            skipped += 1;
            check("an unnamed Service added and deleted".to_string(), &current);
            let services: Vec<Object> = all
                .iter()
                .filter(|o| o.kind() == Kind::Service)
                .cloned()
                .collect();
            for service in services {
                let key = service.key();
                let label = format!("Service/{}/{}", key.namespace, key.name);
                let without: Vec<Object> =
                    current.iter().filter(|o| o.key() != key).cloned().collect();
                if full(&reference, settings, &without) == full(&reference, settings, &current) {
                    // No output uses it (a route may still name it, and be rebuilt).
                    continue;
                }
                let before = metrics.spliced_builds.get();
                let edit = edited_service(&service).unwrap_or_else(|| panic!("{label}: no port"));
                let renamed = renamed_port(&service).unwrap_or_else(|| panic!("{label}: no port"));
                for (what, now) in [
                    ("deleted", None),
                    ("put back", Some(service.clone())),
                    ("edited", Some(edit)),
                    ("restored", Some(service.clone())),
                    ("port renamed", Some(renamed)),
                    ("restored", Some(service.clone())),
                ] {
                    current.retain(|o| o.key() != key);
                    current.extend(now.clone());
                    step(now.map_or(Event::Delete(key.clone()), Event::Apply)).await;
                    check(format!("{label} {what}"), &current);
                    changes += 1;
                }
                spliced += metrics.spliced_builds.get() - before;
            }
            for i in routing {
                let object = all[i].clone();
                let key = object.key();
                let label = format!("{}/{}/{}", key.kind, key.namespace, key.name);
                let before = metrics.spliced_builds.get();
                current.retain(|o| o.key() != key);
                step(Event::Delete(key.clone())).await;
                check(format!("{label} deleted"), &current);
                current.push(object.clone());
                step(Event::Apply(object.clone())).await;
                check(format!("{label} put back"), &current);
                changes += 2;
                let edits = edited(&object).into_iter().chain(rebalanced(&object));
                for edit in edits.collect::<Vec<_>>() {
                    current.retain(|o| o.key() != key);
                    current.push(edit.clone());
                    step(Event::Apply(edit)).await;
                    check(format!("{label} edited"), &current);
                    current.retain(|o| o.key() != key);
                    current.push(object.clone());
                    step(Event::Apply(object.clone())).await;
                    check(format!("{label} restored"), &current);
                    changes += 2;
                }
                let alone = metrics.spliced_builds.get() - before;
                if key.kind == isobar_contour::EXTENSION_SERVICE && !global_ext_auth && alone < 4 {
                    built_whole.push(format!(
                        "{case}: {label}: {alone} of its changes built alone (an ExtensionService reaches only the proxies naming it)"
                    ));
                }
                spliced += alone;
            }
            drop(events);
            task.abort();
        });
        let variant = by_variant.entry(label).or_default();
        variant.0 += changes - changes_before;
        variant.1 += spliced - spliced_before;
    }
    assert!(
        mismatches.is_empty(),
        "spliced builds differ from full builds:\n{}",
        mismatches.join("\n")
    );
    assert!(built_whole.is_empty(), "{}", built_whole.join("\n"));
    // Nearly every change must have been spliced, or this test proves nothing.
    // (Under `globalExtAuth`, a change to its ExtensionService changes every HTTP
    // listener's filters: a full build.)
    for (label, (changes, spliced)) in &by_variant {
        if label.contains("globalExtAuth") {
            continue;
        }
        assert!(
            spliced * 10 >= changes * 9,
            "only {spliced} of {changes} changes were spliced{label}"
        );
    }
    assert!(
        skipped > 0,
        "no change to an unused Secret or unnamed Service was tried"
    );
    println!(
        "{spliced} of {changes} routing and Service changes spliced ({by_variant:?}: changes, spliced), {skipped} changes to unused Secrets and unnamed Services built nothing; each equal to a full build"
    );
}

/// The hold-off, with the defaults (100 ms, at most 500 ms): a change after a quiet
/// moment (no change and no build for 25 ms, or no build for the max hold-off) is built
/// at once; a burst (changes 5 ms apart) is still batched, its builds bounded by the max
/// hold-off.
#[test]
fn a_change_after_a_quiet_period_is_built_at_once_and_bursts_are_batched() {
    let config = config::Config::default();
    let pipeline = Pipeline::for_config(&config).unwrap_or_else(|e| panic!("{e}"));
    let metrics = Arc::new(Metrics::default());
    let (snapshot_tx, _snapshots) = watch::channel(None);
    let runner = Runner {
        pipeline,
        settings: envoy_settings(&config),
        holdoff: config.pipeline.holdoff_delay.0,
        holdoff_max: config.pipeline.holdoff_max_delay.0,
        metrics: metrics.clone(),
        snapshots: snapshot_tx,
        statuses: None,
        debug: None,
        admission: None,
        hydrate: None,
        rejections: None,
        withheld: Default::default(),
        sharded: Default::default(),
    };
    assert_eq!(runner.holdoff, Duration::from_millis(100));
    let proxy = |i: usize, prefix: &str| {
        parse_file(
            Path::new("p.yaml"),
            &format!(
                "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: p{i}, namespace: default}}\nspec:\n  virtualhost: {{fqdn: p{i}.example.com}}\n  routes: [{{conditions: [{{prefix: {prefix}}}], services: [{{name: web, port: 80}}]}}]\n"
            ),
        )
        .unwrap_or_else(|e| panic!("{e}"))
        .remove(0)
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    runtime.block_on(async {
        let (events, rx) = mpsc::channel(1024);
        tokio::spawn(runner.run(rx));
        let built = |n: u64| {
            let metrics = metrics.clone();
            async move {
                let started = Instant::now();
                while metrics.builds.get() < n {
                    assert!(started.elapsed() < Duration::from_secs(10), "no build");
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                started.elapsed()
            }
        };
        let _ = events.send(Event::Apply(proxy(0, "/"))).await;
        let _ = events.send(Event::Synced).await;
        built(1).await;
        // Quiet for longer than the max hold-off, or than the hold-off (changes a user
        // makes one after another): the next change is built at once.
        for (round, quiet) in [600, 600, 150, 150, 40, 40, 40].into_iter().enumerate() {
            tokio::time::sleep(Duration::from_millis(quiet)).await;
            let before = metrics.builds.get();
            let sent = Instant::now();
            let _ = events
                .send(Event::Apply(proxy(0, &format!("/q{round}"))))
                .await;
            built(before + 1).await;
            let took = sent.elapsed();
            assert!(
                took < Duration::from_millis(60),
                "a change after a quiet period waited {took:?} (the hold-off is 100 ms)"
            );
        }
        // A burst: 100 changes 5 ms apart (0.5 s): batched, a build at most every
        // max hold-off, plus the one at the start.
        tokio::time::sleep(Duration::from_millis(600)).await;
        let before = metrics.builds.get();
        for i in 0..100 {
            let _ = events
                .send(Event::Apply(proxy(i % 10, &format!("/b{i}"))))
                .await;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(700)).await;
        let builds = metrics.builds.get() - before;
        assert!(
            (2..=5).contains(&builds),
            "100 changes in 0.5 s took {builds} builds"
        );
    });
}
