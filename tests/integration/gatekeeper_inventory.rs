//! Gatekeeper templates that read `data.inventory`: those whose reads are joins on a
//! value (unique ingress host and its kin) are answered from an index and say what the
//! walk over the whole inventory says; verdicts follow the other objects; the others
//! are walked within the build's budget.

use isobar_plugin_opa::gatekeeper::{Cache, ConstraintTemplate};
use isobar_sdk::condition::Reason;
use isobar_sdk::{Kind, ObjectKey, Objects};

use crate::gatekeeper::{conditions, constraint_status, ingress, objects, pipeline, repo};
use crate::support::service_yaml;

/// A template (`kind`, `package`) around a violation body, in Rego v0 or v1, with
/// `libs`, and its Constraint selecting Ingresses.
fn template(kind: &str, package: &str, body: &str, v1: bool, libs: &[&str]) -> String {
    let indent = |text: &str, by: &str| -> String {
        text.lines()
            .map(|l| format!("{by}{l}\n"))
            .collect::<String>()
    };
    let head = if v1 {
        "violation contains {\"msg\": msg} if {"
    } else {
        "violation[{\"msg\": msg}] {"
    };
    let rego = format!("package {package}\n\n{head}\n{}}}\n", indent(body, "  "));
    let libs: String = libs
        .iter()
        .map(|lib| format!("            - |\n{}", indent(lib, "                ")))
        .collect();
    let libs = if libs.is_empty() {
        String::new()
    } else {
        format!("          libs:\n{libs}")
    };
    let version = if v1 { "v1" } else { "v0" };
    format!(
        "apiVersion: templates.gatekeeper.sh/v1\nkind: ConstraintTemplate\nmetadata:\n  name: {lower}\nspec:\n  crd:\n    spec:\n      names:\n        kind: {kind}\n  targets:\n    - target: admission.k8s.gatekeeper.sh\n      code:\n      - engine: Rego\n        source:\n          version: {version}\n          rego: |\n{rego_indented}{libs}\n---\napiVersion: constraints.gatekeeper.sh/v1beta1\nkind: {kind}\nmetadata:\n  name: {lower}\nspec:\n  match:\n    kinds:\n      - apiGroups: [networking.k8s.io]\n        kinds: [Ingress]\n",
        lower = kind.to_ascii_lowercase(),
        rego_indented = indent(&rego, "            "),
    )
}

/// The unique ingress host template as shipped, and three of its kin: Rego v1 with a
/// case-insensitive comparison, a lib function over the other object, and `=`.
fn joins() -> Vec<(&'static str, String)> {
    let shipped = std::fs::read_to_string(repo("policies/gatekeeper/unique-ingress-host.yaml"))
        .unwrap_or_else(|e| panic!("{e}"));
    vec![
        ("shipped", shipped),
        (
            "v1, lower()",
            template(
                "K8sUniqueHostV1",
                "uniquehostv1",
                "input.review.kind.kind == \"Ingress\"\nsome rule in input.review.object.spec.rules\nhost := lower(rule.host)\nother := data.inventory.namespace[ns][_][\"Ingress\"][name]\nlower(other.spec.rules[_].host) == host\nnot same(other, input.review.object)\nmsg := sprintf(\"host %v is also claimed by %v/%v\", [host, ns, name])",
                true,
                &[],
            )
            .replace(
                "  }\n",
                "  }\n\n            same(a, b) if {\n              a.metadata.namespace == b.metadata.namespace\n              a.metadata.name == b.metadata.name\n            }\n",
            ),
        ),
        (
            "lib",
            template(
                "K8sUniqueHostLib",
                "uniquehostlib",
                "host := input.review.object.spec.rules[_].host\nother := data.inventory.namespace[ns][_][\"Ingress\"][name]\nother_hosts := data.lib.hosts.of(other)\nother_hosts[_] == host\nnot ns == input.review.object.metadata.namespace\nmsg := sprintf(\"host %v is also claimed in namespace %v\", [host, ns])",
                false,
                &["package lib.hosts\n\nof(obj) = hosts {\n  hosts := [h | h := obj.spec.rules[_].host]\n}"],
            ),
        ),
        (
            "unification",
            template(
                "K8sUniqueHostEq",
                "uniquehosteq",
                "input.review.object.spec.rules[_].host = host\nother := data.inventory.namespace[_][_][\"Ingress\"][name]\nhost = other.spec.rules[_].host\nname != input.review.object.metadata.name\nmsg := sprintf(\"%v: %v\", [host, name])",
                false,
                &[],
            ),
        ),
    ]
}

/// The same template made to walk the whole inventory: a statement, always true, that
/// reads the inventory otherwise than by a join.
fn walked(template: &str) -> String {
    let (line, at) = template
        .lines()
        .find_map(|l| l.find("other := data.inventory").map(|at| (l, at)))
        .unwrap_or_else(|| panic!("no iteration in {template}"));
    let indent = &line[..at];
    template.replacen(
        line,
        &format!("{indent}count(data.inventory.namespace) >= 0\n{line}"),
        1,
    )
}

/// Whether the template in `yaml` is answered from an index, and why not.
fn compiled_indexed(yaml: &str) -> (bool, String) {
    let store = objects(yaml);
    let template = store
        .of_kind(isobar_plugin_opa::gatekeeper::CONSTRAINT_TEMPLATE)
        .values()
        .next()
        .and_then(|o| o.get::<ConstraintTemplate>().cloned())
        .unwrap_or_else(|| panic!("no template in {yaml}"));
    let (_, compiled) = Cache::default().compiled(&template);
    match compiled.as_ref() {
        Ok(c) => (
            c.indexed(),
            c.walked_because().unwrap_or_default().to_string(),
        ),
        Err(e) => panic!("{e}"),
    }
}

/// 48 Ingresses in four namespaces over ten hosts, some with two rules.
fn ingresses() -> String {
    let mut out = vec![
        service_yaml("a", "web", 8080),
        service_yaml("b", "web", 8080),
        service_yaml("c", "web", 8080),
        service_yaml("d", "web", 8080),
    ];
    for i in 0..48 {
        let ns = ["a", "b", "c", "d"][i % 4];
        let host = format!("h{}.example.com", (i * 7) % 10);
        let mut yaml = ingress(ns, &format!("i{i}"), Some(&host), false);
        if i % 5 == 0 {
            yaml = yaml.replace(
                "  rules: [{",
                &format!(
                    "  rules: [{{host: 'extra{}.example.com', http: {{paths: [{{path: /, pathType: Prefix, backend: {{service: {{name: web, port: {{number: 80}}}}}}}}]}}}}, {{",
                    i % 3
                ),
            );
        }
        out.push(yaml);
    }
    out.join("\n---\n")
}

/// Every Ingress's policy conditions, and the Constraint's violation count.
fn verdicts(store: &Objects, pipeline: &isobar::runner::pipeline::Pipeline) -> (Vec<String>, u64) {
    let out = pipeline.build(store);
    let mut lines = Vec::new();
    for key in store.of_kind(Kind::Ingress).keys() {
        let (ns, name) = (key.0.as_str(), key.1.as_str());
        for (reason, message) in conditions(&out.status, Kind::Ingress, ns, name) {
            lines.push(format!("{ns}/{name}: {reason:?} {message}"));
        }
    }
    let total = store
        .of_kind(isobar_plugin_opa::gatekeeper::CONSTRAINT)
        .values()
        .map(|c| {
            let key = c.key();
            constraint_status(&out.status, &key.namespace, &key.name)["totalViolations"]
                .as_u64()
                .unwrap_or_else(|| panic!("no totalViolations for {key:?}"))
        })
        .sum();
    (lines, total)
}

/// Templates whose inventory reads are joins on a value are answered from an index, and
/// deny exactly what walking the whole inventory denies; with a statement reading the
/// inventory otherwise, the same template is walked.
#[test]
fn inventory_joins_answered_from_an_index_deny_what_the_whole_inventory_denies() {
    for (name, template) in joins() {
        let (indexed, why) = compiled_indexed(&template);
        assert!(indexed, "{name}: not indexed: {why}");
        let slow = walked(&template);
        let (indexed, why) = compiled_indexed(&slow);
        assert!(!indexed, "{name}: the walked variant is indexed");
        assert!(why.contains("otherwise than by iterating"), "{name}: {why}");
        let indexed = verdicts(
            &objects(&format!("{template}\n---\n{}", ingresses())),
            &pipeline(&[]),
        );
        let whole = verdicts(
            &objects(&format!("{slow}\n---\n{}", ingresses())),
            &pipeline(&[]),
        );
        assert!(indexed.1 > 0, "{name}: no violation at all: {indexed:?}");
        assert_eq!(indexed, whole, "{name}");
    }
}

/// A verdict against the inventory follows the other objects: a second Ingress on a
/// host makes both violate, and when it goes, the first is clean again, though the
/// first did not change (indexed, and walked).
#[test]
fn verdicts_against_the_inventory_follow_the_other_objects() {
    let shipped = joins().remove(0).1;
    for template in [shipped.clone(), walked(&shipped)] {
        let pipeline = pipeline(&[]);
        let mut store = objects(&format!(
            "{template}\n---\n{}\n---\n{}\n---\n{}",
            service_yaml("a", "web", 8080),
            ingress("a", "first", Some("shared.example.com"), false),
            ingress("a", "other", Some("other.example.com"), false),
        ));
        let denied = |store: &Objects| {
            let out = pipeline.build(store);
            ["first", "second", "other"]
                .into_iter()
                .filter(|name| {
                    conditions(&out.status, Kind::Ingress, "a", name)
                        .iter()
                        .any(|(reason, _)| *reason == Reason::PolicyDenied)
                })
                .collect::<Vec<_>>()
        };
        assert!(denied(&store).is_empty());
        for o in objects(&ingress("a", "second", Some("shared.example.com"), false))
            .of_kind(Kind::Ingress)
            .values()
        {
            store.apply(o.clone());
        }
        assert_eq!(denied(&store), ["first", "second"]);
        assert!(store.delete(&ObjectKey::new(Kind::Ingress, "a", "second")));
        assert!(denied(&store).is_empty(), "the verdict on first is stale");
    }
}

/// At 2,000 Ingresses (every one on a host of its own but pairs), unique ingress host
/// judges every Ingress in the first build, within the default budget that walking the
/// inventory ran out of after a few dozen.
#[test]
fn unique_ingress_host_judges_two_thousand_ingresses_in_one_build() {
    let shipped = joins().remove(0).1;
    let mut yaml = vec![shipped, service_yaml("a", "web", 8080)];
    for i in 0..2000 {
        yaml.push(ingress(
            "a",
            &format!("i{i}"),
            Some(&format!(
                "h{}.example.com",
                i / 2 * 2 + usize::from(i == 1999)
            )),
            false,
        ));
    }
    let store = objects(&yaml.join("\n---\n"));
    let started = std::time::Instant::now();
    let out = pipeline(&[]).build(&store);
    let took = started.elapsed();
    let status = constraint_status(&out.status, "K8sUniqueIngressHost", "unique-ingress-host");
    assert_eq!(status["byPod"][0]["enforced"], true, "{status}");
    // Pairs i0/i1 … i1996/i1997 share a host; i1998 and i1999 do not.
    assert_eq!(status["totalViolations"], 1998, "{status}");
    assert!(
        conditions(&out.status, Kind::Ingress, "a", "i1999").is_empty()
            && !conditions(&out.status, Kind::Ingress, "a", "i1996").is_empty()
    );
    eprintln!("2,000 Ingresses judged in {took:?}");
}
