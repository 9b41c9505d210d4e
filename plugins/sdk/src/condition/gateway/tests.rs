use super::*;

/// Conditions are kept one per type, per parent and per listener, in the order first
/// set, and render in Gateway API's layout.
#[test]
fn conditions_are_one_per_type_per_parent_and_listener() {
    let mut status = GatewayStatus::default();
    let a = ParentRef {
        name: "a".to_string(),
        ..ParentRef::default()
    };
    let b = ParentRef {
        name: "b".to_string(),
        section_name: Some("http".to_string()),
        ..ParentRef::default()
    };
    status.set_parent(&a, Condition::new("Accepted", true, "Accepted", "ok"));
    status.set_parent(
        &b,
        Condition::new("Accepted", false, "NoMatchingParent", "no"),
    );
    status.set_parent(&a, Condition::new("Accepted", false, "NotAllowed", "later"));
    status.set_parent(&a, Condition::new("ResolvedRefs", true, "ResolvedRefs", ""));
    let route = status.render_route("example.com/controller");
    assert_eq!(route["parents"].as_array().map(Vec::len), Some(2));
    assert_eq!(
        route["parents"][0]["parentRef"],
        serde_json::json!({"name": "a"})
    );
    assert_eq!(route["parents"][0]["conditions"][0]["reason"], "NotAllowed");
    assert_eq!(route["parents"][0]["conditions"][0]["status"], "False");
    assert_eq!(route["parents"][0]["conditions"][1]["type"], "ResolvedRefs");
    assert_eq!(route["parents"][1]["parentRef"]["sectionName"], "http");
    assert_eq!(
        route["parents"][1]["controllerName"],
        "example.com/controller"
    );

    let mut gateway = GatewayStatus::default();
    gateway.set(Condition::new("Accepted", true, "Accepted", ""));
    gateway.set(Condition::new("Programmed", false, "Invalid", "x"));
    gateway.set(Condition::new("Accepted", false, "Invalid", "y"));
    gateway.listener("http").attached_routes = 2;
    gateway.set_listener("http", Condition::new("Programmed", true, "Programmed", ""));
    let rendered = gateway.render_object();
    assert_eq!(rendered["conditions"].as_array().map(Vec::len), Some(2));
    assert_eq!(rendered["conditions"][0]["message"], "y");
    assert_eq!(rendered["listeners"][0]["attachedRoutes"], 2);
    assert_eq!(
        rendered["listeners"][0]["supportedKinds"],
        serde_json::json!([])
    );
}
