//! The configuration layers, the plugin registry and the `isobar` command line, as a user
//! meets them.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use isobar::config::Config;
use isobar::runner::pipeline::{Pipeline, registered_plugins};
use serde::Deserialize;

use crate::support::{envoy_bin, isobar, service_yaml, write};

const REPO: &str = env!("CARGO_MANIFEST_DIR");

fn quickstart() -> String {
    format!("{REPO}/examples/quickstart")
}

fn config_file(dir: &Path, text: &str) -> String {
    write(dir, "contour.yaml", text);
    dir.join("contour.yaml").to_string_lossy().into_owned()
}

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"))
}

const BUILTIN: [&str; 10] = [
    "conflicts",
    "extension-service",
    "gateway-api",
    "httpproxy",
    "ingress",
    "ingress-class",
    "opa",
    "root-namespaces",
    "tls-delegation",
    "wasm",
];

/// The `isobar` binary registers exactly the built-in plugins and prints each with its
/// settings at their defaults and their schema; this test binary also links the test
/// plugin (tests/plugin), which registers itself the same way.
#[test]
fn the_registry_holds_exactly_the_builtin_plugins() {
    let names: BTreeSet<&str> = registered_plugins().iter().map(|p| p.name).collect();
    let mut expected = BTreeSet::from(BUILTIN);
    expected.insert(isobar_test_plugin::NAME);
    assert_eq!(names, expected);
    assert_eq!(
        BTreeSet::from_iter(isobar::runner::pipeline::BUILTIN_PLUGINS.iter().copied()),
        BTreeSet::from(BUILTIN)
    );
    let (ok, out, _) = isobar(&["plugins"], &[]);
    assert!(ok);
    let listed: BTreeSet<&str> = out
        .lines()
        .filter(|l| !l.starts_with(' '))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(listed, BTreeSet::from(BUILTIN), "{out}");
    assert!(out.contains("settings: {\"mode\":\"contour\"}"), "{out}");
    let (ok, out, _) = isobar(&["plugins", "--schema"], &[]);
    assert!(ok);
    let schemas: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let modes = &schemas["conflicts"]["$defs"]["Mode"];
    assert!(modes.to_string().contains("oldest-wins"), "{schemas}");
    assert!(
        schemas["opa"]["properties"]["eval-timeout"].is_object(),
        "{schemas}"
    );
    assert!(
        schemas["httpproxy"]["properties"]["default-headers"].is_object(),
        "{schemas}"
    );
}

#[test]
fn unknown_plugins_and_bad_settings_stop_startup_naming_key_and_choices() {
    let config = Config::default();
    let mut pipeline = config.pipeline.clone();
    pipeline.sources.push("gateways".to_string());
    let err = Pipeline::from_config(&pipeline, &config.plugins)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("pipeline.sources[3]")
            && err.contains("valid sources: extension-service, gateway-api, httpproxy, ingress"),
        "{err}"
    );

    let dir = tempdir();
    let cases = [
        (
            "plugins:\n  nope: {}\n",
            "plugins.nope",
            "httpproxy, ingress",
        ),
        (
            "plugins:\n  ingress: {colour: blue}\n",
            "plugins.ingress",
            "colour",
        ),
        (
            "pipeline:\n  filters: [ingress]\n",
            "pipeline.filters[0]",
            "unknown filter",
        ),
        // Contour's sections, checked as Contour checks them.
        ("cluster:\n  max-request: 2\n", "cluster", "max-request"),
        // A client rate so slow its window overflows (it once panicked at start).
        (
            "kubernetesClientQPS: 1e-30\n",
            "kubernetesClientQPS",
            "the slowest rate allowed",
        ),
        // A holdoff past Instant's range once panicked the runner.
        (
            "pipeline:\n  holdoff-delay: 300000000000y\n",
            "pipeline.holdoff-delay",
            "longer than",
        ),
        // An empty listener address was a listener Envoy refused (found by fuzzing).
        (
            "envoy:\n  metrics: {address: ''}\n",
            "envoy.metrics.address",
            "not an IP address",
        ),
        (
            "envoy:\n  http: {address: localhost}\n",
            "envoy.http.address",
            "not an IP address",
        ),
        (
            "cluster:\n  dns-lookup-family: v5\n",
            "cluster.dns-lookup-family",
            "v5",
        ),
        (
            "cluster:\n  upstream-tls: {minimum-protocol-version: \"1.1\"}\n",
            "cluster.upstream-tls.minimum-protocol-version",
            "1.1",
        ),
        (
            "listener:\n  connection-balancer: random\n",
            "listener.connection-balancer",
            "exact",
        ),
        (
            "listener:\n  socket-options: {tos: 300}\n",
            "listener.socket-options.tos",
            "0-255",
        ),
        (
            "listener:\n  max-requests-per-connection: 0\n",
            "listener.max-requests-per-connection",
            "minimum is 1",
        ),
        (
            "policy:\n  request-headers: {set: {\"bad header\": x}}\n",
            "policy.request-headers",
            "bad header",
        ),
        (
            "compression:\n  algorithm: lz4\n",
            "compression.algorithm",
            "lz4",
        ),
        (
            "tracing:\n  extensionService: otel\n",
            "tracing.extensionService",
            "namespace/name",
        ),
        (
            "rateLimitService:\n  extensionService: a/b\n  domian: x\n",
            "rateLimitService",
            "domian",
        ),
        (
            "server:\n  xds-server-type: envoy\n",
            "server",
            "xds-server-type",
        ),
    ];
    for (text, key, detail) in cases {
        let path = config_file(dir.path(), text);
        let (ok, _, err) = isobar(
            &["translate", "--manifests", &quickstart(), "-c", &path],
            &[],
        );
        assert!(!ok, "{text} was accepted");
        assert!(err.contains(key) && err.contains(detail), "{text}: {err}");
    }
}

#[test]
fn the_shipped_contour_yaml_is_exactly_the_defaults() {
    let text = std::fs::read_to_string(format!("{REPO}/config/contour.yaml"))
        .unwrap_or_else(|e| panic!("config/contour.yaml: {e}"));
    let shipped: serde_yaml::Value = serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
    // The `isobar` binary's defaults: this test binary also links the test plugin, whose
    // section the binary does not have.
    let mut config = Config::default();
    config.plugins.remove(isobar_test_plugin::NAME);
    let defaults = serde_yaml::to_value(&config).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        shipped, defaults,
        "config/contour.yaml and Config::default() differ"
    );
    let loaded = isobar::config::load(
        Some(Path::new(&format!("{REPO}/config/contour.yaml"))),
        serde_json::json!({}),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(loaded, Config::default());
}

#[test]
fn unknown_keys_name_the_file_and_the_key() {
    let dir = tempdir();
    let path = config_file(dir.path(), "envoy:\n  htp:\n    port: 1\n");
    let (ok, _, err) = isobar(
        &["translate", "--manifests", &quickstart(), "-c", &path],
        &[],
    );
    assert!(!ok);
    assert!(err.contains(&path) && err.contains("envoy.htp"), "{err}");

    let (ok, _, err) = isobar(
        &[
            "translate",
            "--manifests",
            &quickstart(),
            "-c",
            "/nonexistent/contour.yaml",
        ],
        &[],
    );
    assert!(!ok);
    assert!(err.contains("/nonexistent/contour.yaml"), "{err}");
}

/// The port of the `ingress_http` listener in `isobar translate -o json` output.
fn http_port(args: &[&str], env: &[(&str, &str)]) -> u64 {
    let mut all = vec!["translate", "-o", "json"];
    all.extend_from_slice(args);
    let (ok, out, err) = isobar(&all, env);
    assert!(ok, "{err}");
    let doc: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let listeners = doc["resources"]["listeners"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let listener = listeners
        .iter()
        .find(|l| l["name"] == "ingress_http")
        .unwrap_or_else(|| panic!("no ingress_http in {out}"));
    listener["address"]["socket_address"]["port_value"]
        .as_u64()
        .unwrap_or_default()
}

/// The build's own options (build.rs) are not configuration: a shell that built Isobar
/// with them exported still runs it, and the configuration around them still applies.
#[test]
fn build_options_in_the_environment_are_not_configuration() {
    let qs = quickstart();
    let building = [
        ("ISOBAR_ENVOY__HTTP__PORT", "9100"),
        ("ISOBAR_BUILD_RELR", "0"),
        ("ISOBAR_BUILD_SYMBOL_ORDER", "0"),
    ];
    assert_eq!(http_port(&["--manifests", qs.as_str()], &building), 9100);
}

#[test]
fn flags_beat_environment_beat_file_beat_defaults() {
    let dir = tempdir();
    let path = config_file(dir.path(), "envoy:\n  http:\n    port: 9000\n");
    let qs = quickstart();
    let base = ["--manifests", qs.as_str()];
    assert_eq!(http_port(&base, &[]), 8080);
    let with_file = ["--manifests", qs.as_str(), "-c", path.as_str()];
    assert_eq!(http_port(&with_file, &[]), 9000);
    let env = [("ISOBAR_ENVOY__HTTP__PORT", "9100")];
    assert_eq!(http_port(&with_file, &env), 9100);
    let with_flag = [
        "--manifests",
        qs.as_str(),
        "-c",
        path.as_str(),
        "--envoy-service-http-port",
        "9200",
    ];
    assert_eq!(http_port(&with_flag, &env), 9200);
}

/// Every reason Isobar writes into an HTTPProxy's, Ingress's or ExtensionService's
/// status is listed in `docs/status.md`, for users to look up.
#[test]
fn every_status_reason_is_documented() {
    let readme = std::fs::read_to_string(format!("{REPO}/docs/status.md"))
        .unwrap_or_else(|e| panic!("docs/status.md: {e}"));
    let source = std::fs::read_to_string(format!("{REPO}/plugins/sdk/src/condition/mod.rs"))
        .unwrap_or_else(|e| panic!("{e}"));
    let names = source
        .split("impl Reason {")
        .nth(1)
        .and_then(|rest| rest.split("\n}\n").next())
        .unwrap_or_else(|| panic!("no impl Reason in condition/mod.rs"));
    let reasons: Vec<&str> = names
        .split("=> \"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .collect();
    assert!(reasons.len() > 60, "{reasons:?}");
    let missing: Vec<&&str> = reasons
        .iter()
        .filter(|r| !readme.contains(&format!("`{r}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "reasons not in docs/status.md: {missing:?}"
    );
}

/// `isobar translate` of an example directory (its `manifests/` and `contour.yaml`) as
/// JSON: the text and the document; it must succeed.
fn translate_example(dir: &str) -> (String, serde_json::Value) {
    let (ok, out, err) = isobar(
        &[
            "translate",
            "--manifests",
            &format!("{dir}/manifests"),
            "-c",
            &format!("{dir}/contour.yaml"),
            "-o",
            "json",
        ],
        &[],
    );
    assert!(ok, "{err}");
    let doc = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}"));
    (out, doc)
}

/// The extensions example translates with both ExtensionServices and the HTTPProxy
/// valid, Envoy given the ext_authz and rate limit filters and their clusters.
#[test]
fn the_extensions_example_is_valid_whole() {
    let dir = format!("{REPO}/examples/extensions");
    let (out, doc) = translate_example(&dir);
    let statuses = doc["status"].as_array().cloned().unwrap_or_default();
    let named = |kind: &str, name: &str| {
        statuses
            .iter()
            .find(|s| s["kind"] == kind && s["name"] == name)
            .map(|s| s["status"].to_string())
            .unwrap_or_else(|| panic!("no status for {kind} {name}: {out}"))
    };
    for name in ["authz", "ratelimit"] {
        let status = named("ExtensionService", name);
        assert!(
            status.contains(r#""reason":"Valid""#) && status.contains(r#""status":"True""#),
            "{status}"
        );
    }
    assert!(
        named("HTTPProxy", "app").contains(r#""currentStatus":"valid""#),
        "{out}"
    );
    for needed in [
        "envoy.filters.http.ext_authz",
        "envoy.filters.http.ratelimit",
        "extension/default/authz",
        "extension/default/ratelimit",
    ] {
        assert!(out.contains(needed), "{needed} missing: {out}");
    }
}

/// The Gateway API quick start's objects translate with every route accepted and every
/// reference resolved, the Gateway programmed.
#[test]
fn the_gateway_api_example_is_accepted_whole() {
    let dir = format!("{REPO}/examples/gateway-api");
    let (out, doc) = translate_example(&dir);
    let statuses = doc["status"].as_array().cloned().unwrap_or_default();
    let of_kind = |kind: &str| {
        statuses
            .iter()
            .filter(|s| s["kind"] == kind)
            .cloned()
            .collect::<Vec<_>>()
    };
    let routes = of_kind("HTTPRoute");
    assert!(!routes.is_empty(), "{out}");
    for route in &routes {
        let parents = route["status"]["parents"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(!parents.is_empty(), "{route}");
        for parent in parents {
            for c in parent["conditions"].as_array().into_iter().flatten() {
                if c["type"] == "Accepted" || c["type"] == "ResolvedRefs" {
                    assert_eq!(c["status"], "True", "{route}");
                }
            }
        }
    }
    for gateway in of_kind("Gateway") {
        let conditions = gateway["status"]["conditions"].to_string();
        assert!(
            conditions.contains(r#""reason":"Programmed""#)
                && !conditions.contains("ListenersNotValid"),
            "{gateway}"
        );
    }
}

#[test]
fn translate_prints_resources_and_conditions() {
    let (ok, out, err) = isobar(&["translate", "--manifests", &quickstart()], &[]);
    assert!(ok, "{err}");
    let doc: serde_yaml::Value = serde_yaml::from_str(&out).unwrap_or_else(|e| panic!("{e}"));
    let text = serde_json::to_string(&doc).unwrap_or_default();
    for expected in [
        "ingress_http",
        "demo.example.com",
        "shop.example.com",
        "default/echo-a/80/",
        "default/echo-b/http",
        "ingress_https",
        "https/secure.example.com",
        "default/secure-cert/",
    ] {
        assert!(
            text.contains(expected),
            "{expected} missing from translate output"
        );
    }
    assert!(out.contains("status:"), "{out}");
    // Secret material never leaves through translate: names and fingerprints only.
    let key = std::fs::read_to_string(format!("{}/tls.yaml", quickstart()))
        .unwrap_or_else(|e| panic!("{e}"));
    let key_line = key
        .lines()
        .skip_while(|l| !l.contains("BEGIN PRIVATE KEY"))
        .nth(1)
        .unwrap_or_else(|| panic!("no key in the example"))
        .trim();
    assert!(!out.contains(key_line), "a private key line was printed");
    assert!(!out.contains("PRIVATE KEY"), "{out}");
    assert!(out.contains("[redacted]"), "{out}");

    let (ok, out, _) = isobar(
        &["translate", "--manifests", &quickstart(), "-o", "json"],
        &[],
    );
    assert!(ok);
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}"));
    let statuses = doc["status"].to_string();
    assert!(statuses.contains("valid"), "{statuses}");
}

/// `translate DIR` reads the directory given as its argument; `--strict` makes an invalid
/// object (here an HTTPProxy whose Service is missing) fail the run, naming it, while the
/// same directory without `--strict` prints it as it prints valid ones.
#[test]
fn translate_strict_fails_on_invalid_objects_and_takes_a_positional_directory() {
    let dir = tempdir();
    let path = dir.path().to_string_lossy().to_string();
    write(dir.path(), "svc.yaml", &service_yaml("default", "s", 8080));
    write(
        dir.path(),
        "ok.yaml",
        "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {name: ok, namespace: default}\nspec:\n  virtualhost: {fqdn: ok.example.com}\n  routes: [{services: [{name: s, port: 80}]}]\n",
    );
    let (ok, out, err) = isobar(&["translate", &path, "--strict"], &[]);
    assert!(ok, "{err}");
    assert!(out.contains("ok.example.com"), "{out}");

    write(
        dir.path(),
        "bad.yaml",
        "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {name: bad, namespace: default}\nspec:\n  virtualhost: {fqdn: bad.example.com}\n  routes: [{services: [{name: missing, port: 80}]}]\n",
    );
    let (ok, _, err) = isobar(&["translate", &path], &[]);
    assert!(
        ok,
        "without --strict an invalid object is reported in its status: {err}"
    );
    let (ok, _, err) = isobar(&["translate", &path, "--strict"], &[]);
    assert!(!ok, "--strict must fail on an invalid object");
    assert!(
        err.contains("default/bad") && !err.contains("default/ok "),
        "{err}"
    );

    let (ok, _, err) = isobar(&["translate"], &[]);
    assert!(!ok);
    assert!(err.contains("isobar translate DIR"), "{err}");
}

/// A misspelt field of an HTTPProxy is named with the field it was likely meant for; a
/// field unlike any Isobar knows keeps the plain "not supported" warning.
#[test]
fn a_typo_in_a_field_names_the_field_it_was_meant_for() {
    let dir = tempdir();
    let path = dir.path().to_string_lossy().to_string();
    write(dir.path(), "svc.yaml", &service_yaml("default", "s", 8080));
    write(
        dir.path(),
        "p.yaml",
        "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {name: p, namespace: default}\nspec:\n  virtualhost: {fqdn: p.example.com}\n  routes:\n    - servics: [{name: s, port: 80}]\n      services: [{name: s, port: 80}]\n      frobnicate: true\n",
    );
    let (ok, out, err) = isobar(&["translate", &path, "-o", "json"], &[]);
    assert!(ok, "{err}");
    assert!(
        out.contains(
            "spec.routes[0].servics: unknown field (did you mean `services`?); it is ignored"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "spec.routes[0].frobnicate is not supported by this version of Isobar and is ignored"
        ),
        "{out}"
    );
}

#[test]
fn translate_fails_on_an_unreadable_manifest_naming_file_and_line() {
    let dir = tempdir();
    write(dir.path(), "svc.yaml", &service_yaml("default", "s", 8080));
    write(
        dir.path(),
        "bad.yaml",
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: [x\n",
    );
    let (ok, _, err) = isobar(
        &["translate", "--manifests", &dir.path().to_string_lossy()],
        &[],
    );
    assert!(!ok, "a broken manifest must fail translate");
    assert!(err.contains("bad.yaml:"), "{err}");

    let (ok, _, err) = isobar(&["translate", "--manifests", "/nonexistent/dir"], &[]);
    assert!(!ok);
    assert!(err.contains("/nonexistent/dir"), "{err}");
}

#[test]
fn bootstrap_is_accepted_by_real_envoy() {
    let dir = tempdir();
    let path = dir.path().join("bootstrap.json");
    let admin = dir.path().join("admin.sock");
    let (ok, _, err) = isobar(
        &[
            "bootstrap",
            &path.to_string_lossy(),
            "--xds-address",
            "127.0.0.1",
            "--xds-port",
            "18001",
            "--admin-address",
            &admin.to_string_lossy(),
            "--namespace",
            "edge",
        ],
        &[],
    );
    assert!(ok, "{err}");
    let (ok, stdout, _) = isobar(&["bootstrap", "-", "--xds-port", "18001"], &[]);
    assert!(ok);
    let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        doc["dynamic_resources"]["ads_config"].is_object(),
        "{stdout}"
    );

    let written = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        written.contains("\"edge\""),
        "the namespace is the node cluster: {written}"
    );
    assert_envoy_takes(&path, "");
}

/// A real Envoy validates the bootstrap at `path` (`what` says which, on failure).
fn assert_envoy_takes(path: &Path, what: &str) {
    let out = Command::new(envoy_bin())
        .args(["--mode", "validate", "--use-dynamic-base-id", "-c"])
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("envoy: {e}"));
    assert!(
        out.status.success(),
        "envoy rejected the bootstrap{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `isobar bootstrap` with `flags`, written to a file Envoy is then asked to validate:
/// the document written.
fn bootstrap_taken_by_envoy(flags: &[&str]) -> serde_json::Value {
    let dir = tempdir();
    let path = dir.path().join("bootstrap.json");
    let mut args = vec!["bootstrap", path.to_str().unwrap_or_default()];
    args.extend_from_slice(flags);
    let (ok, _, err) = isobar(&args, &[]);
    assert!(ok, "{err}");
    let written = std::fs::read_to_string(&path).unwrap_or_default();
    let doc = serde_json::from_str(&written).unwrap_or_else(|e| panic!("{e}"));
    assert_envoy_takes(&path, &format!(" with {flags:?}"));
    doc
}

/// Envoy flushes its stats when its admin is asked (no sink is configured), unless
/// `--stats-flush-interval` says how often; both bootstraps are Envoy's to take, and an
/// interval Envoy refuses is refused.
#[test]
fn bootstrap_flushes_stats_on_admin_unless_an_interval_is_given() {
    for (flags, on_admin, interval) in [
        (&[][..], serde_json::json!(true), serde_json::Value::Null),
        (
            &["--stats-flush-interval", "10s"][..],
            serde_json::Value::Null,
            serde_json::json!("10s"),
        ),
    ] {
        let doc = bootstrap_taken_by_envoy(flags);
        assert_eq!(doc["stats_flush_on_admin"], on_admin, "{flags:?}");
        assert_eq!(doc["stats_flush_interval"], interval, "{flags:?}");
    }
    let (ok, _, err) = isobar(&["bootstrap", "-", "--stats-flush-interval", "10m"], &[]);
    assert!(!ok && err.contains("5 minutes"), "{err}");
}

/// A cluster's traffic stats are made on its first use unless `--eager-stats` is given;
/// Envoy takes both bootstraps.
#[test]
fn bootstrap_defers_cluster_traffic_stats_unless_eager_stats_is_given() {
    for (flags, deferred) in [
        (&[][..], serde_json::json!(true)),
        (&["--eager-stats"][..], serde_json::Value::Null),
    ] {
        let doc = bootstrap_taken_by_envoy(flags);
        assert_eq!(
            doc["deferred_stat_options"]["enable_deferred_creation_stats"], deferred,
            "{flags:?}"
        );
    }
}

#[test]
fn root_namespaces_and_ingress_class_flags_reach_the_filters() {
    let (ok, out, err) = isobar(
        &[
            "translate",
            "--manifests",
            &quickstart(),
            "--root-namespaces",
            "edge,shared",
            "-o",
            "json",
        ],
        &[],
    );
    assert!(ok, "{err}");
    assert!(out.contains("RootProxyNotAllowedInNamespace"), "{out}");
    let (ok, out, _) = isobar(
        &[
            "translate",
            "--manifests",
            &quickstart(),
            "--ingress-class-name",
            "internal",
            "-o",
            "json",
        ],
        &[],
    );
    assert!(ok);
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        doc["resources"]["routes"][0]["virtual_hosts"],
        serde_json::Value::Null,
        "{out}"
    );
}

/// `deploy/crds.yaml` is exactly what `isobar crds` prints (regenerate with
/// `UPDATE_CRDS=1 cargo test --test integration crds`), and the schemas are structural,
/// as the API server requires: typed everywhere, no references or combinators.
#[test]
fn the_crds_in_deploy_are_generated_from_the_types() {
    let (ok, out, err) = isobar(&["crds"], &[]);
    assert!(ok, "{err}");
    let path = format!("{REPO}/deploy/crds.yaml");
    if std::env::var_os("UPDATE_CRDS").is_some() {
        std::fs::write(&path, &out).unwrap_or_else(|e| panic!("{e}"));
    }
    let shipped = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        shipped == out,
        "deploy/crds.yaml differs from `isobar crds`; run UPDATE_CRDS=1 cargo test --test integration crds"
    );
    fn check(node: &serde_json::Value, path: &str, problems: &mut Vec<String>) {
        let Some(map) = node.as_object() else { return };
        for key in ["$ref", "anyOf", "oneOf", "allOf"] {
            if map.contains_key(key) {
                problems.push(format!("{path}: {key}"));
            }
        }
        let typed = map.contains_key("type")
            || map.get("x-kubernetes-preserve-unknown-fields") == Some(&serde_json::json!(true));
        if !typed {
            problems.push(format!("{path}: no type"));
        }
        if map.contains_key("properties") && map.get("additionalProperties").is_some() {
            problems.push(format!("{path}: properties with additionalProperties"));
        }
        if let Some(props) = map.get("properties").and_then(|p| p.as_object()) {
            for (name, child) in props {
                check(child, &format!("{path}.{name}"), problems);
            }
        }
        if let Some(items) = map.get("items") {
            check(items, &format!("{path}[]"), problems);
        }
    }
    let mut kinds = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&out) {
        let crd = serde_json::to_value(
            serde_yaml::Value::deserialize(doc).unwrap_or_else(|e| panic!("{e}")),
        )
        .unwrap_or_default();
        kinds.push(
            crd["spec"]["names"]["kind"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        let mut problems = Vec::new();
        check(schema, "", &mut problems);
        assert!(problems.is_empty(), "{problems:?}");
        assert!(
            schema["properties"]["spec"]["properties"].is_object(),
            "{schema}"
        );
    }
    assert_eq!(
        kinds,
        vec!["HTTPProxy", "TLSCertificateDelegation", "ExtensionService"]
    );
}

/// `deploy/rbac.yaml` grants what the code asks of the API: list/watch of every kind a
/// plugin reads, status updates where the status writer writes, and the Lease.
#[test]
fn the_rbac_in_deploy_grants_what_isobar_uses() {
    let text = std::fs::read_to_string(format!("{REPO}/deploy/rbac.yaml"))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut grants: BTreeSet<(String, String, String)> = BTreeSet::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let value = serde_yaml::Value::deserialize(doc).unwrap_or_else(|e| panic!("{e}"));
        let kind = value["kind"].as_str().unwrap_or_default();
        if kind != "ClusterRole" && kind != "Role" {
            continue;
        }
        for rule in value["rules"].as_sequence().into_iter().flatten() {
            let list = |key: &str| -> Vec<String> {
                rule[key]
                    .as_sequence()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect()
            };
            for group in list("apiGroups") {
                for resource in list("resources") {
                    for verb in list("verbs") {
                        grants.insert((group.clone(), resource.clone(), verb));
                    }
                }
            }
        }
    }
    let mut wanted = Vec::new();
    // Every kind the `isobar` binary reads (this test binary also links the test plugin's).
    let kinds = isobar_sdk::Kind::all().map(|i| i.kind);
    for kind in kinds.filter(|k| *k != isobar_test_plugin::MAPPING) {
        let mut resource = isobar::provider::kube::api_resource(kind);
        // A group of kinds defined at run time: every resource of the group.
        if let Some(dynamic) = isobar_sdk::DynamicKinds::stored_as(kind) {
            resource.group = dynamic.group.to_string();
            resource.plural = "*".to_string();
        }
        for verb in ["get", "list", "watch"] {
            wanted.push((resource.group.clone(), resource.plural.clone(), verb));
        }
    }
    // Every kind whose status Isobar writes.
    let statused = isobar_sdk::Kind::all()
        .filter(|i| i.status.writes() != isobar_sdk::status::Writes::Nothing)
        .map(|i| i.kind)
        .filter(|k| *k != isobar_test_plugin::MAPPING);
    for kind in statused {
        let mut resource = isobar::provider::kube::api_resource(kind);
        if isobar_sdk::DynamicKinds::stored_as(kind).is_some() {
            resource.plural = "*".to_string();
        }
        for verb in ["get", "update"] {
            wanted.push((
                resource.group.clone(),
                format!("{}/status", resource.plural),
                verb,
            ));
        }
    }
    for verb in ["get", "create", "update"] {
        wanted.push(("coordination.k8s.io".into(), "leases".into(), verb));
    }
    // `--contour-config-name` reads its ContourConfiguration.
    wanted.push((
        "projectcontour.io".into(),
        "contourconfigurations".into(),
        "get",
    ));
    for (group, resource, verb) in wanted {
        assert!(
            grants.contains(&(group.clone(), resource.clone(), verb.to_string())),
            "deploy/rbac.yaml does not grant {verb} on {group}/{resource}"
        );
    }
}

/// A watched manifest directory costs nothing while nothing changes. Isobar's own reads
/// of the files once woke its watcher, which read the files again, and again: a core
/// spent forever on a quiet directory of a few thousand files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_manifest_directory_costs_no_cpu() {
    use crate::support::{ISOBAR, ServePorts, cpu_seconds_of, spawn};
    let dir = tempdir();
    let manifests = dir.path().join("manifests");
    for i in 0..2_000 {
        write(
            &manifests,
            &format!("s-{i}.yaml"),
            &service_yaml(&format!("ns-{i}"), "app", 8080),
        );
    }
    let ports = ServePorts::free();
    let process = spawn(
        "isobar",
        Command::new(ISOBAR)
            .args(["serve", "--insecure", "--manifests"])
            .arg(&manifests)
            .args(ports.args())
            .envs(ports.envs()),
        &dir.path().join("isobar.log"),
    );
    let ready = format!("http://127.0.0.1:{}/readyz", ports.health);
    let started = std::time::Instant::now();
    while !reqwest::get(&ready).await.is_ok_and(|r| r.status() == 200) {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "never ready"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // Whatever the first read stirred up settles well within a second.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let stat = format!("/proc/{}/stat", process.0.id());
    let before = cpu_seconds_of(&stat);
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let used = cpu_seconds_of(&stat) - before;
    assert!(
        used < 0.15,
        "isobar used {used:.2} CPU seconds in 3 idle seconds: {}",
        std::fs::read_to_string(dir.path().join("isobar.log")).unwrap_or_default()
    );
}

/// `xds-server.vhds`: `translate` shows `ingress_http` as delta Envoys get it (without
/// vhosts, asking for them over ADS), as state-of-the-world Envoys get it (every vhost),
/// and each plain vhost as a `VirtualHost` resource of its own.
#[test]
fn translate_with_vhds_shows_each_plain_vhost_on_its_own() {
    let dir = tempdir();
    let path = config_file(dir.path(), "xds-server:\n  vhds: true\n");
    let (ok, out, err) = isobar(
        &[
            "translate",
            "-o",
            "json",
            "--manifests",
            &quickstart(),
            "-c",
            &path,
        ],
        &[],
    );
    assert!(ok, "{err}");
    let doc: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let resources = &doc["resources"];
    let http = |list: &str| {
        let routes = resources[list].as_array().cloned().unwrap_or_default();
        routes
            .into_iter()
            .find(|r| r["name"] == "ingress_http")
            .unwrap_or_else(|| panic!("no ingress_http in {list}: {out}"))
    };
    // Delta Envoys get the shell; state-of-the-world Envoys every vhost in it.
    let shell = http("vhds_routes");
    assert!(shell["virtual_hosts"].is_null(), "{shell}");
    assert!(shell["vhds"]["config_source"]["ads"].is_object(), "{shell}");
    let whole = http("routes");
    assert!(whole["vhds"].is_null(), "{whole}");
    assert_eq!(
        whole["virtual_hosts"].as_array().map(Vec::len),
        Some(3),
        "{whole}"
    );
    let vhosts: Vec<(String, String)> = resources["virtual_hosts"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|v| {
            (
                v["name"].as_str().unwrap_or_default().to_string(),
                v["domains"][0].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert!(
        vhosts.contains(&(
            "ingress_http/demo.example.com".to_string(),
            "demo.example.com".to_string()
        )),
        "{vhosts:?}"
    );
    // The HTTPS vhost keeps its own RouteConfiguration, with its vhosts in it.
    let routes = resources["routes"].as_array().cloned().unwrap_or_default();
    assert!(
        routes
            .iter()
            .any(|r| r["name"] == "https/secure.example.com"
                && r["virtual_hosts"].as_array().is_some_and(|v| !v.is_empty())),
        "{out}"
    );
}

/// Contour's example configuration (`examples/contour/01-contour-config.yaml`, the keys it
/// sets, and keys written without a value) is accepted as Contour reads it.
const CONTOUR_EXAMPLE: &str = "# gateway:\n#   namespace: projectcontour\ndisablePermitInsecure: false\ntls:\n# minimum TLS version that Contour will negotiate\n# minimum-protocol-version: \"1.2\"\n  fallback-certificate:\n#   name: fallback-secret-name\n  envoy-client-certificate:\n# ExternalName Services are disabled by default\n# enableExternalNameService: false\naccesslog-format: envoy\n# accesslog-level: info\n";

#[test]
fn contours_example_configuration_is_accepted() {
    let dir = tempdir();
    let path = config_file(dir.path(), CONTOUR_EXAMPLE);
    let (ok, _, err) = isobar(
        &["translate", "--manifests", &quickstart(), "-c", &path],
        &[],
    );
    assert!(ok, "{err}");
    assert!(!err.contains("not honoured"), "{err}");
}

/// Contour's keys change Envoy's configuration as they do Contour's; a value that does
/// not parse names its key.
#[test]
fn contour_keys_shape_every_http_connection_manager() {
    let dir = tempdir();
    let path = config_file(
        dir.path(),
        r#"accesslog-format: json
json-fields: ["@timestamp", method, "hello=%REQ(X-HELLO)%"]
accesslog-level: critical
disableMergeSlashes: true
disableAllowChunkedLength: true
serverHeaderTransformation: pass_through
timeouts:
  request-timeout: 30s
  connection-idle-timeout: infinity
  max-connection-duration: 1h
network: {num-trusted-hops: 2, strip-trailing-host-dot: true}
metrics:
  envoy: {address: 127.0.0.1, port: 9002}
rateLimitService: {extensionService: projectcontour/ratelimit, domain: contour}
tracing: {extensionService: projectcontour/otel}
"#,
    );
    let (ok, out, err) = isobar(
        &[
            "translate",
            "-o",
            "json",
            "--manifests",
            &quickstart(),
            "-c",
            &path,
        ],
        &[],
    );
    assert!(ok, "{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}"));
    let listeners = doc["resources"]["listeners"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let http = listeners
        .iter()
        .find(|l| l["name"] == "ingress_http")
        .unwrap_or_else(|| panic!("no ingress_http: {listeners:?}"));
    let hcm = &http["filter_chains"][0]["filters"][0]["typed_config"];
    // merge_slashes off: the default, left out of the JSON.
    assert!(hcm.get("merge_slashes").is_none(), "{hcm}");
    assert_eq!(hcm["xff_num_trusted_hops"], 2);
    assert_eq!(hcm["strip_trailing_host_dot"], true);
    assert_eq!(hcm["server_header_transformation"], "PASS_THROUGH");
    assert_eq!(hcm["request_timeout"], "30s");
    assert_eq!(hcm["common_http_protocol_options"]["idle_timeout"], "0s");
    assert_eq!(
        hcm["common_http_protocol_options"]["max_connection_duration"],
        "3600s"
    );
    assert!(
        hcm["http_protocol_options"]
            .get("allow_chunked_length")
            .is_none(),
        "{hcm}"
    );
    let log = &hcm["access_log"][0];
    assert_eq!(
        log["filter"]["status_code_filter"]["comparison"]["value"]["default_value"],
        500
    );
    let fields = &log["typed_config"]["log_format"]["json_format"];
    assert_eq!(fields["method"], "%REQ(:METHOD)%");
    assert_eq!(fields["hello"], "%REQ(X-HELLO)%");
    // The rate limit service and the trace collector, whose ExtensionServices do not
    // exist (yet): called through clusters without endpoints.
    let filters = hcm["http_filters"].as_array().cloned().unwrap_or_default();
    let limit = filters
        .iter()
        .find(|f| f["name"] == "envoy.filters.http.ratelimit")
        .unwrap_or_else(|| panic!("{hcm}"));
    assert_eq!(limit["typed_config"]["domain"], "contour");
    assert_eq!(
        limit["typed_config"]["rate_limit_service"]["grpc_service"]["envoy_grpc"]["cluster_name"],
        "extension/projectcontour/ratelimit"
    );
    assert_eq!(
        hcm["tracing"]["provider"]["name"],
        "envoy.tracers.opentelemetry"
    );
    assert_eq!(
        hcm["tracing"]["provider"]["typed_config"]["service_name"],
        "contour"
    );
    let clusters = doc["resources"]["clusters"].to_string();
    assert!(
        clusters.contains("extension/projectcontour/ratelimit")
            && clusters.contains("extension/projectcontour/otel"),
        "{clusters}"
    );
    // Envoy's stats moved by metrics.envoy, its readiness where it was: Contour's
    // `stats` and `health` listeners.
    let port_of = |name: &str| {
        listeners
            .iter()
            .find(|l| l["name"] == name)
            .map(|l| l["address"]["socket_address"]["port_value"].clone())
    };
    assert_eq!(port_of("stats"), Some(serde_json::json!(9002)));
    assert_eq!(port_of("health"), Some(serde_json::json!(8002)));
    assert_eq!(port_of("stats-health"), None);

    let bad = config_file(dir.path(), "timeouts:\n  request-timeout: soon\n");
    let (ok, _, err) = isobar(
        &["translate", "--manifests", &quickstart(), "-c", &bad],
        &[],
    );
    assert!(!ok && err.contains("timeouts.request-timeout"), "{err}");
    let bad = config_file(dir.path(), "accesslog-format: xml\n");
    let (ok, _, err) = isobar(
        &["translate", "--manifests", &quickstart(), "-c", &bad],
        &[],
    );
    assert!(!ok && err.contains("accesslog-format"), "{err}");
}

/// Contour's `bootstrap` flags: a real Envoy validates what they make (mutual TLS through
/// SDS files, a DNS xDS address with its lookup family, the overload manager's heap limit).
#[test]
fn contour_bootstrap_flags_make_a_bootstrap_envoy_validates() {
    let dir = tempdir();
    let out = dir.path().join("envoy.json");
    let certs = dir.path().join("certs");
    // A lifetime past the year 9999 (it once panicked) is refused, naming the flag.
    let (ok, _, err) = isobar(
        &[
            "certgen",
            "--pem",
            "--certificate-lifetime=3000000",
            &certs.display().to_string(),
        ],
        &[],
    );
    assert!(!ok && err.contains("--certificate-lifetime"), "{err}");
    // Contour's spelling: the output directory as an argument.
    let (ok, _, err) = isobar(&["certgen", "--pem", &certs.display().to_string()], &[]);
    assert!(ok, "{err}");
    let file = |name: &str| certs.join(name).display().to_string();
    let (ok, _, err) = isobar(
        &[
            "bootstrap",
            &out.display().to_string(),
            "--xds-address=contour",
            "--xds-port=8001",
            "--xds-resource-version=v3",
            "--admin-port=9001",
            "--dns-lookup-family=v4",
            "--overload-max-heap=1073741824",
            "--overload-downstream-max-conn=10000",
            &format!("--resources-dir={}", dir.path().join("resources").display()),
            &format!("--envoy-cafile={}", file("cacert.pem")),
            &format!("--envoy-cert-file={}", file("envoycert.pem")),
            &format!("--envoy-key-file={}", file("envoykey.pem")),
            &format!(
                "--admin-address={}",
                dir.path().join("admin.sock").display()
            ),
        ],
        &[],
    );
    assert!(ok, "{err}");
    let run = std::process::Command::new(crate::support::envoy_bin())
        .args(["--mode", "validate", "--use-dynamic-base-id", "-c"])
        .arg(&out)
        .output()
        .unwrap_or_else(|e| panic!("envoy: {e}"));
    assert!(
        run.status.success(),
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    let (ok, _, err) = isobar(&["bootstrap", "-", "--xds-resource-version=v2"], &[]);
    assert!(!ok && err.contains("v2"), "{err}");
}

/// `--log-format json` (Contour's global flag): every log line is a JSON object;
/// `--kubernetes-client-qps/-burst` and `--kubernetes-debug` are taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_are_json_with_log_format_json() {
    use crate::support::{ISOBAR, ServePorts, spawn};
    let dir = tempdir();
    let ports = ServePorts::free();
    let log = dir.path().join("isobar.log");
    let _process = spawn(
        "isobar",
        Command::new(ISOBAR)
            .args(["--log-format", "json", "serve", "--insecure", "--manifests"])
            .arg(quickstart())
            .args([
                "--kubernetes-client-qps",
                "5",
                "--kubernetes-client-burst",
                "10",
                "--kubernetes-debug",
                "4",
            ])
            .args(ports.args())
            .envs(ports.envs()),
        &log,
    );
    let ready = format!("http://127.0.0.1:{}/readyz", ports.health);
    let started = std::time::Instant::now();
    while !reqwest::get(&ready).await.is_ok_and(|r| r.status() == 200) {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "never ready"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!lines.is_empty(), "nothing logged");
    for line in lines {
        let parsed: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(parsed["level"].is_string(), "{line}");
    }
}

/// `isobar cli diff`: the migration check. Against a running server (here Isobar standing
/// in for Contour) serving a directory, the same directory compares equal (exit 0); with
/// a proxy's route changed, the route configuration is named as differing, with the
/// field, and the exit is non-zero; with a proxy added, its cluster is named as Isobar's
/// only.
#[test]
fn cli_diff_compares_a_running_server_with_the_translation_of_objects() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let served = dir.path().join("served");
    write(
        &served,
        "echo.yaml",
        &service_yaml("default", "echo-a", 18080),
    );
    write(
        &served,
        "echo-b.yaml",
        &service_yaml("default", "echo-b", 18081),
    );
    let proxy = |prefix: &str| {
        format!(
            "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: diff, namespace: default}}\nspec:\n  virtualhost: {{fqdn: diff.example.com}}\n  routes:\n    - conditions: [{{prefix: {prefix}}}]\n      services: [{{name: echo-a, port: 80}}]\n"
        )
    };
    write(&served, "proxy.yaml", &proxy("/app"));
    // One configuration for the server and the check (what they listen on is part of
    // what Envoy is served).
    let ports = crate::support::ServePorts::free();
    let config = dir.path().join("contour.yaml");
    let at = |port: u16| format!("{{address: 127.0.0.1, port: {port}}}");
    std::fs::write(
        &config,
        format!(
            "xds-server: {{address: 127.0.0.1, port: {}, insecure: true}}\nmetrics: {}\nhealth: {}\ndebug-http: {}\nenvoy:\n  http: {}\n  https: {}\n  metrics: {}\n  health: {}\nnetwork: {{admin-port: {}}}\n",
            ports.xds,
            at(ports.metrics),
            at(ports.health),
            at(ports.debug),
            at(ports.http),
            at(ports.https),
            at(ports.stats),
            at(ports.stats),
            ports.admin
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let config = config.display().to_string();
    let _server = crate::support::spawn(
        "isobar",
        Command::new(env!("CARGO_BIN_EXE_isobar"))
            .args(["serve", "-c", &config, "--manifests"])
            .arg(&served),
        &dir.path().join("isobar.log"),
    );
    let contour = format!("127.0.0.1:{}", ports.xds);
    let diff = |manifests: &Path| {
        let manifests = manifests.display().to_string();
        isobar(
            &[
                "cli",
                "diff",
                "--contour",
                &contour,
                "-c",
                &config,
                "--manifests",
                &manifests,
            ],
            &[],
        )
    };
    // Equal, once the server has built and serves.
    let start = std::time::Instant::now();
    loop {
        let (ok, out, err) = diff(&served);
        if ok {
            assert!(out.contains("0 differ"), "{out}");
            break;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "{out}\n{err}"
        );
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    // A route changed.
    let changed = dir.path().join("changed");
    write(
        &changed,
        "echo.yaml",
        &service_yaml("default", "echo-a", 18080),
    );
    write(
        &changed,
        "echo-b.yaml",
        &service_yaml("default", "echo-b", 18081),
    );
    write(&changed, "proxy.yaml", &proxy("/other"));
    let (ok, out, err) = diff(&changed);
    assert!(!ok, "{out}");
    assert!(out.contains("rds ingress_http: differs"), "{out}\n{err}");
    assert!(out.contains("served \"/app\", Isobar \"/other\""), "{out}");
    // A proxy added: its cluster is Isobar's only.
    write(&changed, "proxy.yaml", &proxy("/app"));
    write(
        &changed,
        "proxy-b.yaml",
        "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {name: diff-b, namespace: default}\nspec:\n  virtualhost: {fqdn: b.example.com}\n  routes:\n    - services: [{name: echo-b, port: 80}]\n",
    );
    let (ok, out, _) = diff(&changed);
    assert!(!ok, "{out}");
    assert!(
        out.lines().any(|l| l.starts_with("cds default/echo-b/80/") && l.ends_with("Isobar's, not served")),
        "{out}"
    );
}

/// `serve --help` shows the default of each flag that sets a contour.yaml key.
#[test]
fn serve_help_shows_the_defaults() {
    let (ok, out, err) = isobar(&["serve", "--help"], &[]);
    assert!(ok, "{err}");
    for shown in [
        "Port Isobar serves xDS on [default: 8001]",
        "[default: 15s]",
        "Port of Isobar's /metrics [default: 8000]",
    ] {
        assert!(out.contains(shown), "{shown:?} not in\n{out}");
    }
}

/// `serve --disable-feature` takes every value Contour's does (and any other kind a
/// CustomResourceDefinition serves, from the table of kinds), and refuses kinds
/// Kubernetes serves itself, listing the ones it takes.
#[test]
fn disable_feature_takes_the_kinds_crds_serve() {
    let parse = |value: &str| {
        isobar::cli::command().try_get_matches_from(["isobar", "serve", "--disable-feature", value])
    };
    for contour in [
        "extensionservices",
        "tlsroutes",
        "grpcroutes",
        "tcproutes",
        "udproutes",
        "backendtlspolicies",
    ] {
        assert!(parse(contour).is_ok(), "{contour}");
    }
    for more in ["xbackendtrafficpolicies", "httpproxies", "listenersets"] {
        assert!(parse(more).is_ok(), "{more}");
    }
    for built_in in [
        "services",
        "secrets",
        "ingresses",
        "endpointslices",
        "constraints",
    ] {
        let error = parse(built_in)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(error.contains("tlsroutes"), "{built_in}: {error}");
    }
}
