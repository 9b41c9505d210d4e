use super::*;

const ROUTE: isobar_sdk::KindId = isobar_sdk::KindId::new("test.isobar.dev", "Route");

inventory::submit! {
    isobar_sdk::KindInfo {
        kind: Kind::new(&ROUTE),
        versions: &["v1"],
        plural: "routes",
        namespaced: true,
        decode: |_| Err("not decoded in this test".to_string()),
        status: &isobar_sdk::status::Route,
    }
}

const GATEWAY: isobar_sdk::KindId = isobar_sdk::KindId::new("test.isobar.dev", "Gateway");

inventory::submit! {
    isobar_sdk::KindInfo {
        kind: Kind::new(&GATEWAY),
        versions: &["v1"],
        plural: "gateways",
        namespaced: true,
        decode: |_| Err("not decoded in this test".to_string()),
        status: &isobar_sdk::status::Gateway,
    }
}

const GAUGE: isobar_sdk::KindId = isobar_sdk::KindId::new("test.isobar.dev", "Gauge");

/// A status shape of a plugin's own: `status.healthy` from whether the build found
/// errors, `status.servedBy` where Envoy is; other fields stay as the object has them.
#[derive(Debug)]
struct Healthy;

impl StatusShape for Healthy {
    fn render(&self, report: &StatusReport, key: &ObjectKey, _: &str) -> Option<Value> {
        Some(json!({"healthy": report.is_valid(key)}))
    }

    fn serve_at(&self, status: &mut Value, load_balancer: &Value) {
        status["servedBy"] = load_balancer["ingress"][0]["ip"].clone();
    }

    fn merge(&self, current: &Value, desired: &Value, _: &str, _: &dyn Fn() -> Value) -> Value {
        let mut out = current.clone();
        out["healthy"] = desired["healthy"].clone();
        out["servedBy"] = desired["servedBy"].clone();
        out
    }
}

inventory::submit! {
    isobar_sdk::KindInfo {
        kind: Kind::new(&GAUGE),
        versions: &["v1"],
        plural: "gauges",
        namespaced: true,
        decode: |_| Err("not decoded in this test".to_string()),
        status: &Healthy,
    }
}

/// A kind whose status shape its plugin defines is rendered, placed and merged by that
/// shape.
#[test]
fn a_kind_writes_the_status_shape_its_plugin_defines() {
    let kind = Kind::new(&GAUGE);
    let key = ObjectKey::new(kind, "default", "g");
    let mut report = StatusReport::default();
    report.error(
        &key,
        isobar_sdk::ConditionType::SpecError,
        isobar_sdk::Reason::NothingDefined,
        "broken".to_string(),
    );
    let rendered = shape(kind).render(&report, &key, CONTROLLER_NAME);
    let rendered = rendered.unwrap_or_else(|| panic!("no status rendered"));
    let desired = desired_status(
        kind,
        &rendered.to_string(),
        Some(2),
        &json!({"ingress": [{"ip": "10.0.0.9"}]}),
    );
    let current = json!({"healthy": true, "note": "kept"});
    let merged = merge(kind, &current, &desired, CONTROLLER_NAME);
    assert_eq!(
        merged,
        json!({"healthy": false, "servedBy": "10.0.0.9", "note": "kept"})
    );
}

/// A Gateway's conditions and each listener's keep their transition times while
/// their status holds; its addresses (rendered empty: it has none of its own) come
/// from the load balancer.
#[test]
fn gateway_listeners_keep_their_transition_times() {
    let current = json!({
        "conditions": [condition("Accepted", "True", "t1")],
        "listeners": [{"name": "http", "attachedRoutes": 1, "supportedKinds": [],
            "conditions": [condition("Programmed", "True", "t1")]}]});
    let desired = desired_status(
        Kind::new(&GATEWAY),
        &json!({"conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted", "message": ""}],
            "addresses": [],
            "listeners": [
                {"name": "http", "attachedRoutes": 2, "supportedKinds": [],
                 "conditions": [{"type": "Programmed", "status": "True", "reason": "Programmed", "message": ""}]},
                {"name": "https", "attachedRoutes": 0, "supportedKinds": [],
                 "conditions": [{"type": "Programmed", "status": "False", "reason": "Invalid", "message": ""}]}]})
        .to_string(),
        Some(4),
        &json!({"ingress": [{"ip": "10.0.0.1"}, {"hostname": "lb.example.com"}]}),
    );
    let merged = merge(Kind::new(&GATEWAY), &current, &desired, CONTROLLER_NAME);
    assert_eq!(merged["conditions"][0]["lastTransitionTime"], "t1");
    assert_eq!(merged["conditions"][0]["observedGeneration"], 4);
    assert_eq!(merged["listeners"][0]["attachedRoutes"], 2);
    assert_eq!(
        merged["listeners"][0]["conditions"][0]["lastTransitionTime"],
        "t1"
    );
    assert_eq!(
        merged["listeners"][1]["conditions"][0]["observedGeneration"],
        4
    );
    assert_eq!(merged["listeners"][1]["name"], "https");
    assert_eq!(
        merged["addresses"],
        json!([{"type": "IPAddress", "value": "10.0.0.1"}, {"type": "Hostname", "value": "lb.example.com"}])
    );
}

fn condition(type_: &str, status: &str, time: &str) -> Value {
    json!({"type": type_, "status": status, "reason": type_, "message": "", "lastTransitionTime": time})
}

/// A route's parents of other controllers stay; this controller's are replaced, each
/// condition keeping its transition time while its status holds.
#[test]
fn route_parents_of_other_controllers_are_kept() {
    let theirs = json!({"parentRef": {"name": "gw"}, "controllerName": "example.com/other",
        "conditions": [condition("Accepted", "True", "t0")]});
    let current = json!({"parents": [
        {"parentRef": {"name": "gw"}, "controllerName": CONTROLLER_NAME,
         "conditions": [condition("Accepted", "True", "t1"), condition("ResolvedRefs", "True", "t1")]},
        {"parentRef": {"name": "old"}, "controllerName": CONTROLLER_NAME,
         "conditions": [condition("Accepted", "True", "t1")]},
        theirs.clone(),
    ]});
    let desired = desired_status(
        Kind::new(&ROUTE),
        &json!({"parents": [{"parentRef": {"name": "gw"}, "controllerName": CONTROLLER_NAME,
            "conditions": [
                {"type": "Accepted", "status": "True", "reason": "Accepted", "message": ""},
                {"type": "ResolvedRefs", "status": "False", "reason": "BackendNotFound", "message": ""}]}]})
        .to_string(),
        Some(3),
        &json!({}),
    );
    let merged = merge(Kind::new(&ROUTE), &current, &desired, CONTROLLER_NAME);
    let parents = merged["parents"].as_array().cloned().unwrap_or_default();
    assert_eq!(parents.len(), 2, "{merged}");
    let conditions = &parents[0]["conditions"];
    assert_eq!(conditions[0]["lastTransitionTime"], "t1", "{merged}");
    assert_eq!(conditions[0]["observedGeneration"], 3);
    assert_eq!(conditions[1]["status"], "False");
    assert_ne!(conditions[1]["lastTransitionTime"], "t1", "{merged}");
    assert_eq!(parents[1], theirs);
    // Merging what was written again changes nothing.
    assert_eq!(
        merge(Kind::new(&ROUTE), &merged, &desired, CONTROLLER_NAME),
        merged
    );
}

/// A Gateway condition that holds only at times (`DefaultGateway`) goes once not
/// reported; another writer's condition stays.
#[test]
fn gateway_conditions_that_no_longer_hold_go() {
    let current = json!({"conditions": [condition("Accepted", "True", "t1"),
        condition("DefaultGateway", "True", "t1"), condition("Other", "True", "t0")]});
    let desired = desired_status(
        Kind::new(&GATEWAY),
        &json!({"conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted", "message": ""}]})
            .to_string(),
        Some(2),
        &json!({}),
    );
    let merged = merge(Kind::new(&GATEWAY), &current, &desired, CONTROLLER_NAME);
    let types: Vec<&Value> = merged["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| &c["type"])
        .collect();
    assert_eq!(types, [&json!("Accepted"), &json!("Other")], "{merged}");
}

/// A route reported with no parent of this controller's loses the entries this
/// controller wrote; one it never wrote to is left as it is.
#[test]
fn route_parents_no_longer_named_go() {
    let theirs = json!({"parentRef": {"name": "gw"}, "controllerName": "example.com/other",
        "conditions": [condition("Accepted", "True", "t0")]});
    let desired = desired_status(
        Kind::new(&ROUTE),
        &json!({"parents": []}).to_string(),
        Some(2),
        &json!({}),
    );
    let current = json!({"parents": [
        {"parentRef": {"name": "old"}, "controllerName": CONTROLLER_NAME,
         "conditions": [condition("Accepted", "True", "t1")]},
        theirs.clone()]});
    let merged = merge(Kind::new(&ROUTE), &current, &desired, CONTROLLER_NAME);
    assert_eq!(merged["parents"], json!([theirs]));
    let untouched = json!({"other": 1});
    assert_eq!(
        merge(Kind::new(&ROUTE), &untouched, &desired, CONTROLLER_NAME),
        untouched
    );
}

/// An HTTPProxy's `Valid` condition keeps its transition time while its status holds,
/// conditions of other types stay, and the load balancer is written.
#[test]
fn contour_conditions_keep_their_transition_time() {
    let current =
        json!({"conditions": [condition("Valid", "True", "t1"), condition("Other", "True", "t0")]});
    let desired = desired_status(
        isobar_contour::HTTP_PROXY,
        &json!({"currentStatus": "valid", "description": "Valid HTTPProxy",
            "conditions": [{"type": "Valid", "status": "True", "reason": "Valid", "message": "Valid HTTPProxy"}]})
        .to_string(),
        Some(2),
        &json!({"ingress": [{"ip": "10.0.0.1"}]}),
    );
    let merged = merge(
        isobar_contour::HTTP_PROXY,
        &current,
        &desired,
        CONTROLLER_NAME,
    );
    assert_eq!(merged["conditions"][0]["lastTransitionTime"], "t1");
    assert_eq!(merged["conditions"][0]["observedGeneration"], 2);
    assert_eq!(merged["conditions"][1]["type"], "Other");
    assert_eq!(merged["loadBalancer"]["ingress"][0]["ip"], "10.0.0.1");
    assert_eq!(merged["currentStatus"], "valid");
}
