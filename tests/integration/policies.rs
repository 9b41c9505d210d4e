//! The shipped Rego policies, evaluated by the `opa` processor against inventories, and
//! the OPA wasm path (opa-wasm) with a module implementing OPA's wasm ABI.

use std::path::{Path, PathBuf};

use serde_json::json;

use isobar::config::Config;
use isobar::provider::manifest::parse_file;
use isobar::runner::pipeline::Pipeline;
use isobar_plugin_opa::{Inventory, Opa, OpaConfig, input_for};
use isobar_sdk::condition::Reason;
use isobar_sdk::{Kind, Object, ObjectKey, Objects};

fn policy(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("policies")
        .join(name)
        .display()
        .to_string()
}

fn objects(yaml: &str) -> Objects {
    let mut objects = Objects::default();
    for o in parse_file(Path::new("t.yaml"), yaml).unwrap_or_else(|e| panic!("{e}")) {
        objects.apply(o);
    }
    objects
}

fn object(yaml: &str) -> Object {
    parse_file(Path::new("t.yaml"), yaml)
        .unwrap_or_else(|e| panic!("{e}"))
        .remove(0)
}

fn proxy(ns: &str, name: &str, fqdn: &str, tls: bool) -> String {
    let tls = if tls { ", tls: {secretName: cert}" } else { "" };
    format!(
        "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  virtualhost: {{fqdn: '{fqdn}'{tls}}}\n  routes: [{{services: [{{name: web, port: 80}}]}}]\n"
    )
}

fn ingress(ns: &str, name: &str, host: &str, tls: bool) -> String {
    let tls = if tls {
        format!("  tls: [{{hosts: ['{host}'], secretName: cert}}]\n")
    } else {
        String::new()
    };
    format!(
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n{tls}  rules: [{{host: '{host}', http: {{paths: [{{path: /, pathType: Prefix, backend: {{service: {{name: web, port: {{number: 80}}}}}}}}]}}}}]\n"
    )
}

/// The deny messages `policies` give `candidate`, with `existing` (plus the candidate)
/// as the inventory.
fn deny(files: &[String], data: serde_json::Value, existing: &str, candidate: &str) -> Vec<String> {
    let opa = Opa::load(&OpaConfig {
        policies: files.to_vec(),
        data,
        ..OpaConfig::default()
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let mut store = objects(existing);
    let candidate = object(candidate);
    store.apply(candidate.clone());
    let inventory = Inventory::of(&store, true, None);
    let verdicts = opa.judge(&inventory, &[(candidate.key(), input_for(&candidate))]);
    verdicts
        .into_iter()
        .flat_map(|(_, v)| v.unwrap_or_else(|e| panic!("{e}")).deny)
        .collect()
}

#[test]
fn unique_fqdn_compares_hosts_across_kinds_and_ignores_the_object_itself() {
    let files = [policy("unique-fqdn.rego")];
    let existing = format!(
        "{}---\n{}",
        proxy("a", "site", "site.example.com", false),
        ingress("b", "legacy", "legacy.example.com", false)
    );
    let none = json!({});
    // The object alone (an update of itself) is fine.
    assert!(
        deny(
            &files,
            none.clone(),
            &existing,
            &proxy("a", "site", "site.example.com", true)
        )
        .is_empty()
    );
    // Case and trailing dot do not make a host different.
    let d = deny(
        &files,
        none.clone(),
        &existing,
        &proxy("c", "copy", "SITE.Example.com.", false),
    );
    assert_eq!(
        d,
        vec!["host \"site.example.com\" is already claimed by HTTPProxy a/site".to_string()]
    );
    // An HTTPProxy taking an Ingress's host, and the other way round.
    assert_eq!(
        deny(
            &files,
            none.clone(),
            &existing,
            &proxy("c", "p", "legacy.example.com", false)
        )
        .len(),
        1
    );
    assert_eq!(
        deny(
            &files,
            none.clone(),
            &existing,
            &ingress("c", "i", "site.example.com", false)
        )
        .len(),
        1
    );
    // Ingresses may share a host.
    assert!(
        deny(
            &files,
            none,
            &existing,
            &ingress("c", "i2", "legacy.example.com", false)
        )
        .is_empty()
    );
}

#[test]
fn allowed_domains_per_namespace() {
    let files = [policy("allowed-domains.rego")];
    let data = json!({"allowed-domains": {"team-a": ["team-a.example.com"], "*": ["shared.example.com."]}});
    let ok = |ns: &str, host: &str| {
        deny(&files, data.clone(), "", &proxy(ns, "p", host, false)).is_empty()
    };
    assert!(ok("team-a", "team-a.example.com"));
    assert!(ok("team-a", "www.Team-A.example.com"));
    assert!(ok("team-b", "shared.example.com"));
    assert!(!ok("team-a", "team-b.example.com"));
    assert!(!ok("team-a", "evilteam-a.example.com"));
    assert!(!ok("team-b", "team-a.example.com"));
    let d = deny(
        &files,
        data.clone(),
        "",
        &ingress("team-c", "i", "x.example.org", false),
    );
    assert_eq!(d.len(), 1);
    assert!(
        d[0].contains("\"x.example.org\" is not in a domain namespace \"team-c\" may use"),
        "{d:?}"
    );
}

#[test]
fn tls_required_for_proxies_and_ingresses_unless_exempt() {
    let files = [policy("tls-required.rego")];
    let none = json!({});
    assert!(
        deny(
            &files,
            none.clone(),
            "",
            &proxy("a", "p", "a.example.com", true)
        )
        .is_empty()
    );
    assert_eq!(
        deny(
            &files,
            none.clone(),
            "",
            &proxy("a", "p", "a.example.com", false)
        )
        .len(),
        1
    );
    assert!(
        deny(
            &files,
            none.clone(),
            "",
            &ingress("a", "i", "a.example.com", true)
        )
        .is_empty()
    );
    assert_eq!(
        deny(&files, none, "", &ingress("a", "i", "a.example.com", false)).len(),
        1
    );
    let exempt = json!({"tls-required": {"exempt-namespaces": ["a"]}});
    assert!(deny(&files, exempt, "", &proxy("a", "p", "a.example.com", false)).is_empty());
}

#[test]
fn no_wildcard_hosts() {
    let files = [policy("no-wildcard-hosts.rego")];
    let none = json!({});
    assert_eq!(
        deny(
            &files,
            none.clone(),
            "",
            &proxy("a", "p", "*.example.com", false)
        ),
        vec!["wildcard host \"*.example.com\" is not allowed".to_string()]
    );
    assert!(
        deny(
            &files,
            none.clone(),
            "",
            &proxy("a", "p", "www.example.com", false)
        )
        .is_empty()
    );
    assert_eq!(
        deny(&files, none, "", &ingress("a", "i", "*.example.com", false)).len(),
        1
    );
}

/// A boolean `deny` (OPA's `deny if { … }`) denies when true, naming the rule; it does not
/// fail open as an unreadable answer.
#[test]
fn a_boolean_deny_rule_denies() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let file = dir.path().join("flag.rego");
    std::fs::write(
        &file,
        "package flag

import rego.v1

deny if input.object.metadata.name == \"bad\"
",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let files = [file.display().to_string()];
    let bad = deny(
        &files,
        json!({}),
        "",
        &proxy("team-a", "bad", "bad.example.com", false),
    );
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(bad[0].starts_with("data.flag.deny is true"), "{bad:?}");
    let good = deny(
        &files,
        json!({}),
        "",
        &proxy("team-a", "good", "good.example.com", false),
    );
    assert!(good.is_empty(), "{good:?}");
}

#[test]
fn a_policy_that_does_not_parse_stops_start_up_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let file = dir.path().join("broken.rego");
    std::fs::write(
        &file,
        "package broken\n\nimport rego.v1\n\ndeny contains msg if {\n  msg := \n}\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let mut config = Config::default();
    config.pipeline.processors.push("opa".into());
    config.plugins.insert(
        "opa".into(),
        json!({"policies": [file.display().to_string()]}),
    );
    let error = Pipeline::for_config(&config)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(error.starts_with("plugins.opa: policies: "), "{error}");
    assert!(error.contains("broken.rego:6:7: expecting `}`"), "{error}");
}

#[test]
fn denied_objects_are_invalid_in_the_controller_and_others_still_serve() {
    let mut config = Config::default();
    config.pipeline.processors.push("opa".into());
    config.plugins.insert(
        "opa".into(),
        json!({"policies": [policy("no-wildcard-hosts.rego"), policy("tls-required.rego")],
               "data": {"tls-required": {"exempt-namespaces": ["a"]}}}),
    );
    let pipeline = Pipeline::for_config(&config).unwrap_or_else(|e| panic!("{e}"));
    let store = objects(&format!(
        "{}---\n{}---\n{}---\n{}---\n{}",
        crate::support::service_yaml("a", "web", 8080),
        crate::support::service_yaml("b", "web", 8080),
        proxy("a", "ok", "ok.example.com", false),
        proxy("a", "wild", "*.example.com", false),
        proxy("b", "plain", "plain.example.com", false),
    ));
    let out = pipeline.build(&store);
    let reasons = |ns: &str, name: &str| -> Vec<Reason> {
        out.status
            .get(&ObjectKey::new(isobar_contour::HTTP_PROXY, ns, name))
            .map(|s| s.errors.iter().map(|e| e.reason).collect())
            .unwrap_or_default()
    };
    assert!(reasons("a", "ok").is_empty());
    assert_eq!(reasons("a", "wild"), vec![Reason::PolicyDenied]);
    assert_eq!(reasons("b", "plain"), vec![Reason::PolicyDenied]);
    assert!(
        out.ir
            .virtual_hosts(isobar_sdk::ir::HTTP_LISTENER)
            .contains_key("ok.example.com")
    );
    assert!(
        !out.ir
            .virtual_hosts(isobar_sdk::ir::HTTP_LISTENER)
            .contains_key("*.example.com")
    );
    assert!(
        !out.ir
            .virtual_hosts(isobar_sdk::ir::HTTP_LISTENER)
            .contains_key("plain.example.com")
    );
}

/// The fixture implements OPA's wasm ABI by hand (no `opa build` here); wasmtime reads
/// the text format, so it is copied under a `.wasm` name for the loader.
fn opa_wasm_fixture(dir: &Path) -> PathBuf {
    let wat =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/opa-abi/no-wildcard-hosts.wat");
    let path = dir.join("no-wildcard-hosts.wasm");
    std::fs::copy(&wat, &path).unwrap_or_else(|e| panic!("{e}"));
    path
}

#[test]
fn opa_wasm_policies_run_through_opa_wasm() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let file = opa_wasm_fixture(dir.path()).display().to_string();
    let files = [file];
    let d = deny(
        &files,
        json!({}),
        "",
        &proxy("a", "p", "*.example.com", false),
    );
    assert_eq!(d, vec!["wildcard hosts are not allowed".to_string()]);
    assert!(
        deny(
            &files,
            json!({}),
            "",
            &proxy("a", "p", "www.example.com", false)
        )
        .is_empty()
    );
    // Many evaluations on one prepared policy (the heap is reset each time).
    let opa = Opa::load(&OpaConfig {
        policies: files.to_vec(),
        ..OpaConfig::default()
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let store = objects("");
    let inputs: Vec<_> = (0..300)
        .map(|i| {
            let o = object(&proxy(
                "a",
                &format!("p{i}"),
                if i % 2 == 0 { "*.x.com" } else { "x.com" },
                false,
            ));
            (o.key(), input_for(&o))
        })
        .collect();
    let verdicts = opa.judge(&Inventory::of(&store, true, None), &inputs);
    let denied = verdicts
        .iter()
        .filter(|(_, v)| v.as_ref().is_ok_and(|v| !v.deny.is_empty()))
        .count();
    assert_eq!(denied, 150);

    // A module that is not an OPA policy stops start-up.
    let bogus = dir.path().join("bogus.wasm");
    std::fs::write(&bogus, "(module (memory (export \"memory\") 1))")
        .unwrap_or_else(|e| panic!("{e}"));
    let error = Opa::load(&OpaConfig {
        policies: vec![bogus.display().to_string()],
        ..OpaConfig::default()
    })
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(
        error.contains("bogus.wasm") && error.contains("not an OPA wasm policy"),
        "{error}"
    );
}

/// An OPA wasm policy's memory is bounded (`max-memory-mb`): an object whose input does
/// not fit fails to evaluate, where the default bound judges it.
#[test]
fn opa_wasm_policies_have_a_memory_limit() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let files = vec![opa_wasm_fixture(dir.path()).display().to_string()];
    // A 3 MB annotation: the input alone needs more than 2 MiB of the policy's memory.
    let big = proxy("a", "big", "*.example.com", false).replacen(
        "metadata: {",
        &format!(
            "metadata: {{annotations: {{note: {}}}, ",
            "n".repeat(3 << 20)
        ),
        1,
    );
    let o = object(&big);
    let inputs = vec![(o.key(), input_for(&o))];
    let store = objects("");
    let judge = |max_memory_mb: u32| {
        let opa = Opa::load(&OpaConfig {
            policies: files.clone(),
            max_memory_mb,
            ..OpaConfig::default()
        })
        .unwrap_or_else(|e| panic!("{e}"));
        opa.judge(&Inventory::of(&store, true, None), &inputs)
            .into_iter()
            .next()
            .map(|(_, verdict)| verdict)
            .unwrap_or_else(|| panic!("no verdict"))
    };
    let bounded = judge(2);
    assert!(bounded.is_err(), "judged within 2 MiB: {bounded:?}");
    let judged = judge(OpaConfig::default().max_memory_mb);
    assert_eq!(
        judged.map(|v| v.deny),
        Ok(vec!["wildcard hosts are not allowed".to_string()])
    );
}

#[test]
fn the_policies_example_denies_two_proxies_and_serves_the_third() {
    let (ok, out, err) = crate::support::isobar(
        &[
            "translate",
            "-c",
            "examples/policies/contour.yaml",
            "--manifests",
            "examples/policies/manifests",
        ],
        &[],
    );
    assert!(ok, "{err}");
    assert_eq!(out.matches("reason: PolicyDenied").count(), 2, "{out}");
    assert!(out.contains("key: x-served-by"), "{out}");
}

fn httproute(ns: &str, name: &str, host: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  parentRefs: [{{name: gw, namespace: default}}]\n  hostnames: ['{host}']\n  rules: [{{backendRefs: [{{name: web, port: 80}}]}}]\n"
    )
}

/// Gateway API routes are judged like proxies: a denied route is not served and its
/// parent entry says why; another namespace's route on the same Gateway still serves.
#[test]
fn policies_judge_gateway_api_routes_and_their_status_says_why() {
    let mut config = Config {
        gateway: Some(json!({"controllerName": "projectcontour.io/gateway-controller"})),
        ..Config::default()
    };
    config.pipeline.processors.push("opa".into());
    config.plugins.insert(
        "opa".into(),
        json!({"policies": [policy("allowed-domains.rego")],
               "data": {"allowed-domains": {"team-a": ["a.example.com"], "team-b": ["b.example.com"]}}}),
    );
    let pipeline = Pipeline::for_config(&config).unwrap_or_else(|e| panic!("{e}"));
    let gateway = "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {name: isobar}\nspec: {controllerName: projectcontour.io/gateway-controller}\n---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: gw, namespace: default}\nspec:\n  gatewayClassName: isobar\n  listeners: [{name: http, protocol: HTTP, port: 80, allowedRoutes: {namespaces: {from: All}}}]\n";
    let store = objects(&format!(
        "{gateway}---\n{}---\n{}---\n{}---\n{}",
        crate::support::service_yaml("team-a", "web", 8080),
        crate::support::service_yaml("team-b", "web", 8080),
        httproute("team-a", "mine", "www.a.example.com"),
        httproute("team-b", "theirs", "www.a.example.com"),
    ));
    let out = pipeline.build(&store);
    let vhosts = out.ir.virtual_hosts(isobar_sdk::ir::HTTP_LISTENER);
    let served: Vec<&ObjectKey> = vhosts["www.a.example.com"]
        .routes
        .values()
        .map(|r| &r.source)
        .collect();
    let route = |ns: &str, name: &str| {
        ObjectKey::new(
            Kind::from_type("gateway.networking.k8s.io/v1", "HTTPRoute")
                .unwrap_or_else(|| panic!("HTTPRoute is not a registered kind")),
            ns,
            name,
        )
    };
    assert_eq!(served, vec![&route("team-a", "mine")]);
    let theirs = out
        .status
        .get(&route("team-b", "theirs"))
        .and_then(|s| s.gateway.as_deref())
        .unwrap_or_else(|| panic!("no Gateway API status for the denied route"));
    let accepted = &theirs.parents[0].conditions[0];
    assert_eq!(
        (accepted.type_.as_str(), accepted.reason.as_str()),
        ("Accepted", "PolicyDenied")
    );
    assert_eq!(
        accepted.message,
        "host \"www.a.example.com\" is not in a domain namespace \"team-b\" may use (allowed: b.example.com)"
    );
}

/// unique-fqdn: routes may share a host with routes (Gateway API merges them), not with
/// an HTTPProxy.
#[test]
fn unique_fqdn_lets_routes_share_hosts_with_routes_only() {
    let files = [policy("unique-fqdn.rego")];
    let route = httproute("b", "r2", "www.example.com");
    assert!(
        deny(
            &files,
            json!({}),
            &httproute("a", "r1", "www.example.com"),
            &route
        )
        .is_empty()
    );
    assert_eq!(
        deny(
            &files,
            json!({}),
            &proxy("a", "p", "www.example.com", false),
            &route
        ),
        vec!["host \"www.example.com\" is already claimed by HTTPProxy a/p".to_string()]
    );
}

/// A policy file that cannot judge an object (here: it runs past `eval-timeout`) leaves
/// the object as `failure-policy` says: served with a `PolicyNotEvaluated` warning
/// (`Ignore`, the default), or not served with a `PolicyNotEvaluated` error (`Fail`);
/// with `enforcement: warn` nothing is refused. The object the policy judges in time is
/// served either way.
#[test]
fn a_policy_file_that_cannot_judge_fails_open_or_closed_as_its_failure_policy_says() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let file = dir.path().join("slow.rego");
    // Objects in namespace "slow" take millions of steps; the others none.
    std::fs::write(
        &file,
        "package slow\n\ndeny contains msg if {\n  input.object.metadata.namespace == \"slow\"\n  some i, j\n  numbers.range(1, 4000)[i]\n  numbers.range(1, 4000)[j]\n  i == j + 100000\n  msg := \"unreachable\"\n}\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let store = objects(&format!(
        "{}---\n{}---\n{}---\n{}",
        crate::support::service_yaml("slow", "web", 8080),
        crate::support::service_yaml("fast", "web", 8080),
        proxy("slow", "p", "slow.example.com", false),
        proxy("fast", "p", "fast.example.com", false),
    ));
    let build = |settings: serde_json::Value| {
        let mut config = Config::default();
        config.pipeline.processors.push("opa".into());
        let mut section = json!({"policies": [file.display().to_string()], "eval-timeout": "20ms"});
        for (k, v) in settings.as_object().into_iter().flatten() {
            section[k] = v.clone();
        }
        config.plugins.insert("opa".into(), section);
        let pipeline = Pipeline::for_config(&config).unwrap_or_else(|e| panic!("{e}"));
        let out = pipeline.build(&store);
        let served = |host: &str| {
            out.ir
                .virtual_hosts(isobar_sdk::ir::HTTP_LISTENER)
                .contains_key(host)
        };
        let slow = out
            .status
            .get(&ObjectKey::new(isobar_contour::HTTP_PROXY, "slow", "p"))
            .cloned()
            .unwrap_or_default();
        let reasons =
            |conditions: &[isobar_sdk::condition::SubCondition]| -> Vec<(Reason, String)> {
                conditions
                    .iter()
                    .map(|c| (c.reason, c.message.clone()))
                    .collect()
            };
        assert!(served("fast.example.com"), "the judged proxy is served");
        (
            served("slow.example.com"),
            reasons(&slow.errors),
            reasons(&slow.warnings),
        )
    };

    let (served, errors, warnings) = build(json!({}));
    assert!(served && errors.is_empty(), "{errors:?}");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].0, Reason::PolicyNotEvaluated);
    assert!(
        warnings[0].1.contains("slow.rego") && warnings[0].1.contains("failure policy Ignore"),
        "{warnings:?}"
    );

    let (served, errors, _) = build(json!({"failure-policy": "Fail"}));
    assert!(!served, "an unjudged proxy is not served under Fail");
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].0, Reason::PolicyNotEvaluated);
    assert!(errors[0].1.contains("failure policy Fail"), "{errors:?}");

    let (served, errors, warnings) =
        build(json!({"failure-policy": "Fail", "enforcement": "warn"}));
    assert!(served && errors.is_empty(), "{errors:?}");
    assert_eq!(warnings[0].0, Reason::PolicyNotEvaluated);

    let counted = isobar_sdk::telemetry::totals()
        .into_iter()
        .filter(|((plugin, event), _)| plugin == "opa" && event.ends_with("slow.rego"))
        .map(|((_, event), n)| (event.split(':').next().unwrap_or_default().to_string(), n))
        .collect::<std::collections::BTreeMap<_, _>>();
    assert!(
        counted.get("failed-open").is_some_and(|n| *n >= 2)
            && counted.get("failed-closed").is_some_and(|n| *n >= 1),
        "{counted:?}"
    );
}
