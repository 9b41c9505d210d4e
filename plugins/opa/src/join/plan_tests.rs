//! The plan's tests: what is planned, and what is not and why.

use super::*;

/// The plan for one Rego v0 module (`package t`), or why there is none.
fn plan_of(rego: &str) -> Result<Option<Plan>, String> {
    let mut engine = regorus::Engine::new();
    engine.set_rego_v0(true);
    engine
        .add_policy("t.rego".into(), rego.into())
        .map_err(|e| e.to_string())?;
    let modules = engine.get_modules().clone();
    plan(&modules, "t", false)
}

const UNIQUE: &str = r#"package t

same_object(other, review) {
  other.metadata.namespace == review.object.metadata.namespace
  other.metadata.name == review.object.metadata.name
}

violation[{"msg": msg}] {
  input.review.kind.kind == "Ingress"
  re_match("^(extensions|networking.k8s.io)$", input.review.kind.group)
  host := input.review.object.spec.rules[_].host
  other := data.inventory.namespace[_][version]["Ingress"][_]
  re_match("^(extensions|networking.k8s.io)/.+$", version)
  other.spec.rules[_].host == host
  not same_object(other, input.review)
  msg := sprintf("%v", [host])
}
"#;

#[test]
fn a_join_on_a_value_is_planned_from_the_templates_statements() {
    let plan = plan_of(UNIQUE).unwrap_or_else(|e| panic!("{e}"));
    let plan = plan.unwrap_or_else(|| panic!("no plan"));
    assert_eq!(plan.joins, 1);
    assert!(
        plan.source
            .contains("__isobar_k := other.spec.rules[_].host"),
        "{}",
        plan.source
    );
    assert!(
        plan.source.contains("__isobar_k := host"),
        "{}",
        plan.source
    );
    assert!(!plan.source.contains("same_object"), "{}", plan.source);
    let mut engine = regorus::Engine::new();
    engine.set_rego_v0(true);
    engine
        .add_policy("t.rego".into(), UNIQUE.into())
        .unwrap_or_else(|e| panic!("{e}"));
    engine
        .add_policy("join.rego".into(), plan.source.clone())
        .unwrap_or_else(|e| panic!("{e}\n{}", plan.source));
}

/// Reads of the inventory that an index cannot answer leave the template walked,
/// with the reason.
#[test]
fn other_reads_of_the_inventory_are_not_planned() {
    let body = |b: &str| format!("package t\n\nviolation[{{\"msg\": msg}}] {{\n{b}\n}}\n");
    for (case, rego, why) in [
        (
            "a count",
            body("count(data.inventory.namespace) > 3\nmsg := \"x\""),
            "otherwise than by iterating",
        ),
        (
            "a comprehension",
            body("xs := [o | o := data.inventory.namespace[_][_][\"Ingress\"][_]]\nmsg := \"x\""),
            "otherwise than by iterating",
        ),
        (
            "no comparison",
            body(
                "other := data.inventory.namespace[_][_][\"Ingress\"][_]\nmsg := other.metadata.name",
            ),
            "no comparison",
        ),
        (
            "a comparison with the iterated object only",
            body(
                "other := data.inventory.namespace[_][_][\"Ingress\"][_]\nother.metadata.name == other.metadata.namespace\nmsg := \"x\"",
            ),
            "no comparison",
        ),
        (
            "data whole",
            body(
                "d := data\nother := data.inventory.namespace[_][_][\"Ingress\"][_]\nother.metadata.name == input.review.object.metadata.name\nmsg := \"x\"",
            ),
            "reads `data`",
        ),
        (
            "the object side reading input",
            format!(
                "{}\nf(o) = x {{\n  x := concat(\"/\", [o.metadata.name, input.review.name])\n}}\n",
                body(
                    "host := input.review.object.metadata.name\nother := data.inventory.namespace[_][_][\"Ingress\"][_]\nf(other) == host\nmsg := \"x\""
                )
            ),
            "no comparison",
        ),
        (
            "a read in a function",
            format!(
                "{}\nothers(n) = o {{\n  o := data.inventory.namespace[_][_][\"Ingress\"][n]\n}}\n",
                body("x := others(input.review.object.metadata.name)\nmsg := \"x\"")
            ),
            "rule others reads the inventory",
        ),
        (
            "with",
            body(
                "host := input.review.object.metadata.name\nother := data.inventory.namespace[_][_][\"Ingress\"][_]\nother.metadata.name == host with input as {}\nmsg := \"x\"",
            ),
            "with",
        ),
    ] {
        match plan_of(&rego) {
            Err(e) => assert!(e.contains(why), "{case}: {e}"),
            Ok(p) => panic!("{case}: planned {p:?}"),
        }
    }
    let none = plan_of(
        "package t\n\nviolation[{\"msg\": \"x\"}] {\n  input.review.object.metadata.name == \"a\"\n}\n",
    );
    assert!(matches!(none, Ok(None)), "{none:?}");
}
