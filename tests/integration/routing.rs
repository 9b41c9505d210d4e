//! HTTPProxy routing: path, header and query conditions, and inclusion across namespaces.

use std::path::Path;

use isobar::config::Config;
use isobar::provider::manifest::parse_file;
use isobar::runner::pipeline::{BuildOutput, Pipeline};
use isobar_sdk::condition::{CurrentStatus, Reason};
use isobar_sdk::ir::{HeaderMatch, PathMatch, QueryMatch, RouteAction, StringMatch};
use isobar_sdk::{ObjectKey, Objects};

use crate::support::service_yaml;

fn build(yaml: &str) -> BuildOutput {
    build_with(&Config::default(), yaml)
}

fn build_with(config: &Config, yaml: &str) -> BuildOutput {
    let pipeline = Pipeline::for_config(config).unwrap_or_else(|e| panic!("{e}"));
    let mut objects = Objects::default();
    for object in parse_file(Path::new("test.yaml"), yaml).unwrap_or_else(|e| panic!("{e}")) {
        objects.apply(object);
    }
    pipeline.build(&objects)
}

fn proxy(ns: &str, name: &str, spec: &str) -> String {
    format!(
        "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n{spec}"
    )
}

fn key(ns: &str, name: &str) -> ObjectKey {
    ObjectKey::new(isobar_contour::HTTP_PROXY, ns, name)
}

fn errors(out: &BuildOutput, ns: &str, name: &str) -> Vec<(Reason, String)> {
    out.status
        .get(&key(ns, name))
        .map(|s| {
            s.errors
                .iter()
                .map(|e| (e.reason, e.message.clone()))
                .collect()
        })
        .unwrap_or_default()
}

fn current(out: &BuildOutput, ns: &str, name: &str) -> Option<CurrentStatus> {
    out.status.get(&key(ns, name)).map(|s| s.current())
}

/// (path, action status or first cluster's service) of every route on `fqdn`.
fn routes(out: &BuildOutput, fqdn: &str) -> Vec<(PathMatch, String)> {
    out.ir
        .virtual_hosts(isobar_sdk::ir::HTTP_LISTENER)
        .get(fqdn)
        .map(|v| {
            v.routes
                .values()
                .map(|r| {
                    let to = match &r.action {
                        RouteAction::Forward(c) => c
                            .iter()
                            .map(|w| w.cluster.split('/').nth(1).unwrap_or_default())
                            .collect::<Vec<_>>()
                            .join("+"),
                        RouteAction::DirectResponse { status, .. } => status.to_string(),
                        RouteAction::Redirect(r) => format!("redirect {}", r.status),
                    };
                    (r.matcher.path.clone(), to)
                })
                .collect()
        })
        .unwrap_or_default()
}

fn services() -> String {
    ["web", "api", "blog"]
        .iter()
        .flat_map(|s| ["default", "team"].map(|ns| service_yaml(ns, s, 9000)))
        .collect::<Vec<_>>()
        .join("---\n")
}

fn prefix(p: &str) -> PathMatch {
    PathMatch::Prefix(p.to_string())
}

#[test]
fn path_header_and_query_conditions_reach_the_ir() {
    let out = build(&format!(
        "{}---\n{}",
        services(),
        proxy(
            "default",
            "p",
            r#"  virtualhost: {fqdn: a.example.com}
  routes:
    - conditions: [{exact: /exact}]
      services: [{name: web, port: 80}]
    - conditions: [{regex: "/v[0-9]+/.*"}]
      services: [{name: api, port: 80}]
    - conditions: [{prefix: /h}, {header: {name: X-Tenant, notexact: blue, ignoreCase: true}}, {queryParameter: {name: debug, present: true}}]
      services: [{name: blog, port: 80}]
"#
        )
    ));
    assert!(
        errors(&out, "default", "p").is_empty(),
        "{:?}",
        errors(&out, "default", "p")
    );
    let vhost = &out.ir.virtual_hosts(isobar_sdk::ir::HTTP_LISTENER)["a.example.com"];
    let paths: Vec<&PathMatch> = vhost.routes.keys().map(|m| &m.path).collect();
    assert!(paths.contains(&&PathMatch::Exact("/exact".to_string())));
    assert!(paths.contains(&&PathMatch::Regex("/v[0-9]+/.*".to_string())));
    let h = vhost
        .routes
        .keys()
        .find(|m| m.path == prefix("/h"))
        .unwrap_or_else(|| panic!("no /h route"));
    assert_eq!(
        h.headers,
        vec![HeaderMatch {
            name: "x-tenant".to_string(),
            value: Some(StringMatch::Exact("blue".to_string())),
            ignore_case: true,
            invert: true,
            treat_missing_as_empty: false,
        }]
    );
    assert_eq!(
        h.query,
        vec![QueryMatch {
            name: "debug".to_string(),
            value: None,
            ignore_case: false,
        }]
    );
}

#[test]
fn bad_conditions_invalidate_their_proxy_with_contours_reasons() {
    let cases = [
        (
            "conditions: [{prefix: /a}, {prefix: /b}]",
            Reason::PathMatchConditionsNotValid,
        ),
        (
            "conditions: [{prefix: /a, exact: /a}]",
            Reason::PathMatchConditionsNotValid,
        ),
        (
            "conditions: [{exact: nope}]",
            Reason::PathMatchConditionsNotValid,
        ),
        (
            "conditions: [{regex: \"/(\"}]",
            Reason::PathMatchConditionsNotValid,
        ),
        (
            "conditions: [{regex: \"/(?=lookahead)\"}]",
            Reason::PathMatchConditionsNotValid,
        ),
        (
            "conditions: [{header: {name: x}}]",
            Reason::HeaderMatchConditionsNotValid,
        ),
        (
            "conditions: [{header: {name: x, exact: a, contains: b}}]",
            Reason::HeaderMatchConditionsNotValid,
        ),
        (
            "conditions: [{header: {name: x, exact: a}}, {header: {name: X, exact: b}}]",
            Reason::HeaderMatchConditionsNotValid,
        ),
        (
            "conditions: [{header: {name: x, exact: a}}, {header: {name: x, notexact: a}}]",
            Reason::HeaderMatchConditionsNotValid,
        ),
        (
            "conditions: [{header: {name: x, regex: \"[\"}}]",
            Reason::HeaderMatchConditionsNotValid,
        ),
        (
            "conditions: [{queryParameter: {name: q}}]",
            Reason::QueryParameterMatchConditionsNotValid,
        ),
        (
            "conditions: [{queryParameter: {name: q, exact: a, prefix: b}}]",
            Reason::QueryParameterMatchConditionsNotValid,
        ),
        (
            "conditions: [{queryParameter: {name: q, regex: \"a{2000}\"}}]",
            Reason::QueryParameterMatchConditionsNotValid,
        ),
    ];
    let good = proxy(
        "default",
        "good",
        "  virtualhost: {fqdn: good.example.com}\n  routes: [{services: [{name: web, port: 80}]}]\n",
    );
    let before = build(&format!("{}---\n{good}", services())).ir;
    for (conditions, reason) in cases {
        let bad = proxy(
            "default",
            "bad",
            &format!(
                "  virtualhost: {{fqdn: bad.example.com}}\n  routes:\n    - {conditions}\n      services: [{{name: web, port: 80}}]\n"
            ),
        );
        let out = build(&format!("{}---\n{good}---\n{bad}", services()));
        let found: Vec<Reason> = errors(&out, "default", "bad")
            .into_iter()
            .map(|e| e.0)
            .collect();
        assert_eq!(found, vec![reason], "{conditions}");
        assert_eq!(out.ir, before, "{conditions} changed other vhosts");
    }
}

#[test]
fn includes_delegate_across_namespaces_with_concatenated_conditions() {
    let out = build(&format!(
        "{}---\n{}---\n{}---\n{}",
        services(),
        proxy(
            "default",
            "root",
            "  virtualhost: {fqdn: site.example.com}\n  routes: [{services: [{name: web, port: 80}]}]\n  includes:\n    - {name: blog, namespace: team, conditions: [{prefix: /blog}]}\n    - {name: api, namespace: team, conditions: [{prefix: /api/}, {header: {name: x-api, present: true}}]}\n"
        ),
        proxy(
            "team",
            "blog",
            "  routes:\n    - services: [{name: blog, port: 80}]\n    - conditions: [{prefix: /admin}]\n      services: [{name: web, port: 80}]\n"
        ),
        proxy(
            "team",
            "api",
            "  routes:\n    - conditions: [{prefix: /v1}]\n      services: [{name: api, port: 80}]\n"
        ),
    ));
    let mut got = routes(&out, "site.example.com");
    got.sort();
    assert_eq!(
        got,
        vec![
            (prefix("/"), "web".to_string()),
            (prefix("/api/v1"), "api".to_string()),
            (prefix("/blog"), "blog".to_string()),
            (prefix("/blog/admin"), "web".to_string()),
        ]
    );
    let api = out.ir.virtual_hosts(isobar_sdk::ir::HTTP_LISTENER)["site.example.com"]
        .routes
        .keys()
        .find(|m| m.path == prefix("/api/v1"))
        .map(|m| m.headers.len());
    assert_eq!(
        api,
        Some(1),
        "include header conditions carry down the chain"
    );
    for (ns, name) in [("default", "root"), ("team", "blog"), ("team", "api")] {
        assert_eq!(
            current(&out, ns, name),
            Some(CurrentStatus::Valid),
            "{ns}/{name}"
        );
    }
    // Services of an included proxy resolve in its own namespace.
    assert!(
        out.ir
            .clusters
            .keys()
            .any(|c| c.starts_with("team/blog/80/"))
    );
}

#[test]
fn include_failures_answer_502_report_cycles_and_orphans() {
    let out = build(&format!(
        "{}---\n{}---\n{}---\n{}---\n{}---\n{}",
        services(),
        proxy(
            "default",
            "root",
            "  virtualhost: {fqdn: site.example.com}\n  routes: [{services: [{name: web, port: 80}]}]\n  includes:\n    - {name: missing, conditions: [{prefix: /missing}]}\n    - {name: other-root, conditions: [{prefix: /root}]}\n    - {name: a, conditions: [{prefix: /a}]}\n"
        ),
        proxy(
            "default",
            "other-root",
            "  virtualhost: {fqdn: other.example.com}\n  routes: [{services: [{name: web, port: 80}]}]\n"
        ),
        proxy(
            "default",
            "a",
            "  routes: [{services: [{name: api, port: 80}]}]\n  includes: [{name: b, conditions: [{prefix: /b}]}]\n"
        ),
        proxy(
            "default",
            "b",
            "  routes: [{services: [{name: blog, port: 80}]}]\n  includes: [{name: a, conditions: [{prefix: /again}]}]\n"
        ),
        proxy(
            "default",
            "lonely",
            "  routes: [{services: [{name: web, port: 80}]}]\n"
        ),
    ));
    let mut got = routes(&out, "site.example.com");
    got.sort();
    assert_eq!(
        got,
        vec![
            (prefix("/"), "web".to_string()),
            (prefix("/a"), "api".to_string()),
            (prefix("/a/b"), "blog".to_string()),
            (prefix("/missing"), "502".to_string()),
            (prefix("/root"), "502".to_string()),
        ]
    );
    let root: Vec<Reason> = errors(&out, "default", "root")
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(
        root,
        vec![Reason::IncludeNotFound, Reason::RootIncludesRoot]
    );
    let b = errors(&out, "default", "b");
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].0, Reason::IncludeCreatesCycle);
    assert!(
        b[0].1.contains("default/a -> default/b -> default/a"),
        "{}",
        b[0].1
    );
    assert_eq!(
        current(&out, "default", "lonely"),
        Some(CurrentStatus::Orphaned)
    );
    // The other root keeps its own site.
    assert_eq!(
        routes(&out, "other.example.com"),
        vec![(prefix("/"), "web".to_string())]
    );
}

#[test]
fn duplicate_include_conditions_are_rejected_and_others_still_served() {
    let out = build(&format!(
        "{}---\n{}---\n{}---\n{}",
        services(),
        proxy(
            "default",
            "root",
            "  virtualhost: {fqdn: site.example.com}\n  includes:\n    - {name: a, conditions: [{prefix: /x}]}\n    - {name: b, conditions: [{prefix: /x}]}\n"
        ),
        proxy(
            "default",
            "a",
            "  routes: [{services: [{name: api, port: 80}]}]\n"
        ),
        proxy(
            "default",
            "b",
            "  routes: [{services: [{name: blog, port: 80}]}]\n"
        ),
    ));
    let root: Vec<Reason> = errors(&out, "default", "root")
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(root, vec![Reason::DuplicateMatchConditions]);
    assert_eq!(
        routes(&out, "site.example.com"),
        vec![(prefix("/x"), "api".to_string())]
    );
    assert_eq!(current(&out, "default", "b"), Some(CurrentStatus::Orphaned));
}

#[test]
fn an_invalid_child_does_not_take_down_its_root() {
    let out = build(&format!(
        "{}---\n{}---\n{}",
        services(),
        proxy(
            "default",
            "root",
            "  virtualhost: {fqdn: site.example.com}\n  routes: [{services: [{name: web, port: 80}]}]\n  includes: [{name: child, namespace: team, conditions: [{prefix: /c}]}]\n"
        ),
        proxy(
            "team",
            "child",
            "  routes:\n    - conditions: [{regex: \"(\"}]\n      services: [{name: api, port: 80}]\n"
        ),
    ));
    assert_eq!(current(&out, "team", "child"), Some(CurrentStatus::Invalid));
    assert_eq!(current(&out, "default", "root"), Some(CurrentStatus::Valid));
    assert_eq!(
        routes(&out, "site.example.com"),
        vec![(prefix("/"), "web".to_string())]
    );
}

#[test]
fn root_proxies_outside_the_root_namespaces_are_refused() {
    let mut config = Config::default();
    config.plugins.insert(
        "root-namespaces".to_string(),
        serde_json::json!({"namespaces": ["team"]}),
    );
    let out = build_with(
        &config,
        &format!(
            "{}---\n{}---\n{}---\n{}",
            services(),
            proxy(
                "default",
                "outside",
                "  virtualhost: {fqdn: out.example.com}\n  routes: [{services: [{name: web, port: 80}]}]\n"
            ),
            proxy(
                "team",
                "inside",
                "  virtualhost: {fqdn: in.example.com}\n  includes: [{name: child, namespace: default}]\n"
            ),
            proxy(
                "default",
                "child",
                "  routes: [{services: [{name: web, port: 80}]}]\n"
            ),
        ),
    );
    assert_eq!(
        errors(&out, "default", "outside"),
        vec![(
            Reason::RootProxyNotAllowedInNamespace,
            "root HTTPProxy cannot be defined in this namespace".to_string()
        )]
    );
    assert!(
        !out.ir
            .virtual_hosts(isobar_sdk::ir::HTTP_LISTENER)
            .contains_key("out.example.com")
    );
    assert_eq!(
        routes(&out, "in.example.com"),
        vec![(prefix("/"), "web".to_string())]
    );
    assert_eq!(
        current(&out, "default", "child"),
        Some(CurrentStatus::Valid)
    );
}

#[test]
fn only_objects_of_the_configured_ingress_class_are_served() {
    let objects = |class: &str| {
        let meta = match class {
            "" => String::new(),
            c => format!(", annotations: {{projectcontour.io/ingress.class: {c}}}"),
        };
        format!(
            "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: p-{n}, namespace: default{meta}}}\nspec:\n  virtualhost: {{fqdn: p-{n}.example.com}}\n  routes: [{{services: [{{name: web, port: 80}}]}}]\n---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: i-{n}, namespace: default}}\nspec:\n  ingressClassName: {spec}\n  rules: [{{host: i-{n}.example.com, http: {{paths: [{{path: /, pathType: Prefix, backend: {{service: {{name: web, port: {{number: 80}}}}}}}}]}}}}]\n",
            n = if class.is_empty() { "none" } else { class },
            spec = if class.is_empty() { "null" } else { class },
        )
    };
    let yaml = format!(
        "{}---\n{}---\n{}---\n{}",
        services(),
        objects(""),
        objects("contour"),
        objects("internal")
    );
    let hosts = |out: &BuildOutput| {
        out.ir
            .virtual_hosts(isobar_sdk::ir::HTTP_LISTENER)
            .keys()
            .cloned()
            .collect::<Vec<_>>()
    };

    let out = build(&yaml);
    assert_eq!(
        hosts(&out),
        [
            "i-contour.example.com",
            "i-none.example.com",
            "p-contour.example.com",
            "p-none.example.com"
        ]
    );
    assert!(
        out.status.get(&key("default", "p-internal")).is_none(),
        "another class's object gets no status"
    );

    let mut config = Config::default();
    config.plugins.insert(
        "ingress-class".to_string(),
        serde_json::json!({"names": ["internal"]}),
    );
    let out = build_with(&config, &yaml);
    assert_eq!(
        hosts(&out),
        ["i-internal.example.com", "p-internal.example.com"]
    );
}

#[test]
fn duplicate_fqdns_follow_the_conflicts_mode() {
    let claim = |ns: &str, name: &str, fqdn: &str, created: &str, service: &str| {
        format!(
            "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: {name}, namespace: {ns}, creationTimestamp: \"{created}\"}}\nspec:\n  virtualhost: {{fqdn: {fqdn}}}\n  routes: [{{services: [{{name: {service}, port: 80}}]}}]\n"
        )
    };
    let yaml = format!(
        "{}---\n{}---\n{}---\n{}",
        services(),
        claim(
            "team",
            "newcomer",
            "Site.Example.com.",
            "2026-02-01T00:00:00Z",
            "api"
        ),
        claim(
            "default",
            "original",
            "site.example.com",
            "2025-01-01T00:00:00Z",
            "web"
        ),
        claim(
            "default",
            "other",
            "other.example.com",
            "2026-03-01T00:00:00Z",
            "blog"
        ),
    );

    let out = build(&yaml);
    assert!(
        !out.ir
            .virtual_hosts(isobar_sdk::ir::HTTP_LISTENER)
            .contains_key("site.example.com"),
        "Contour: nobody serves it"
    );
    for (ns, name) in [("team", "newcomer"), ("default", "original")] {
        let found: Vec<Reason> = errors(&out, ns, name).into_iter().map(|e| e.0).collect();
        assert_eq!(found, vec![Reason::DuplicateVhost], "{ns}/{name}");
    }
    assert_eq!(
        routes(&out, "other.example.com"),
        vec![(prefix("/"), "blog".to_string())]
    );

    let mut config = Config::default();
    config.plugins.insert(
        "conflicts".to_string(),
        serde_json::json!({"mode": "oldest-wins"}),
    );
    let out = build_with(&config, &yaml);
    assert_eq!(
        routes(&out, "site.example.com"),
        vec![(prefix("/"), "web".to_string())]
    );
    assert_eq!(
        current(&out, "default", "original"),
        Some(CurrentStatus::Valid)
    );
    let lost = errors(&out, "team", "newcomer");
    assert_eq!(lost.len(), 1);
    assert!(lost[0].1.contains("default/original"), "{}", lost[0].1);
}
