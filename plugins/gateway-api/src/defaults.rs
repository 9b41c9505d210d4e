//! Default Gateways (experimental, GEP-3793): a Gateway of `defaultScope: All` takes
//! every route of `useDefaultGateways: All` as if the route named it in `parentRefs`
//! (subject to its listeners' `allowedRoutes`, as any route); the route's `parentRefs`
//! are left as written and its status names the Gateway. Every default Gateway takes
//! such routes (several may be default at once, so that one can replace another), and
//! says so with a `DefaultGateway` condition.

use isobar_sdk::condition::Condition;
use isobar_sdk::{ObjectKey, Objects, ParentRef, StatusReport};

use crate::kinds::{GROUP, Gateway};

/// Whether a `useDefaultGateways` or `defaultScope` value (any kind's enum) is `All`.
pub fn is_all<T: serde::Serialize>(scope: Option<&T>) -> bool {
    scope
        .and_then(|s| serde_json::to_value(s).ok())
        .is_some_and(|v| v == "All")
}

/// A route's parents: `own` and, when it asks for default Gateways (`wants`), each
/// Gateway of `defaultScope: All` it does not name already.
pub fn parents(objects: &Objects, mut own: Vec<ParentRef>, wants: bool) -> Vec<ParentRef> {
    if !wants {
        return own;
    }
    for ((namespace, name), gateway) in objects.all::<Gateway>() {
        if !is_all(gateway.spec.default_scope.as_ref()) {
            continue;
        }
        let named = own.iter().any(|p| {
            p.kind.as_deref() == Some("Gateway")
                && p.group.as_deref() == Some(GROUP)
                && p.name == *name
                && p.namespace.as_deref() == Some(namespace.as_str())
        });
        if !named {
            own.push(ParentRef {
                group: Some(GROUP.to_string()),
                kind: Some("Gateway".to_string()),
                namespace: Some(namespace.clone()),
                name: name.clone(),
                section_name: None,
                port: None,
            });
        }
    }
    own
}

/// Says on a default Gateway (`key`) that it is one.
pub fn report(key: &ObjectKey, gateway: &Gateway, status: &mut StatusReport) {
    if is_all(gateway.spec.default_scope.as_ref()) {
        status.gateway(key).set(Condition::new(
            "DefaultGateway",
            true,
            "DefaultGateway",
            "Gateway has default scope All",
        ));
    }
}
