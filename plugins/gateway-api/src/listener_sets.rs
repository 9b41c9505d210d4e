//! ListenerSets: listeners a Gateway takes from other objects (`spec.allowedListeners`,
//! none by default). A set's listeners come after the Gateway's own, sets oldest first
//! (then by namespace/name); routes attach to them by a parent reference of kind
//! `ListenerSet`, never through the Gateway.

use std::collections::BTreeMap;

use gateway_api::apis::experimental::gateways::{
    GatewayAllowedListenersNamespacesFrom, GatewayListeners,
};
use isobar_sdk::condition::Condition;
use isobar_sdk::{BuildContext, ObjectKey, StatusReport};

use crate::kinds::{GATEWAY, GROUP, Gateway, ListenerSet, Namespace, every};

/// The ListenerSets naming each Gateway, oldest first, with their listeners read as a
/// Gateway's (the two share their fields).
pub type Sets = BTreeMap<ObjectKey, Vec<(ObjectKey, Vec<GatewayListeners>)>>;

pub fn by_gateway(ctx: &BuildContext<'_>) -> Sets {
    let mut sets: Vec<(ObjectKey, &ListenerSet)> = every::<ListenerSet>(ctx).collect();
    sets.sort_by(|(ka, a), (kb, b)| {
        a.metadata
            .creation_timestamp
            .cmp(&b.metadata.creation_timestamp)
            .then_with(|| ka.cmp(kb))
    });
    let mut out = Sets::new();
    for (key, set) in sets {
        let parent = &set.spec.parent_ref;
        if parent.group.as_deref().unwrap_or(GROUP) != GROUP
            || parent.kind.as_deref().unwrap_or("Gateway") != "Gateway"
        {
            continue;
        }
        let namespace = parent.namespace.as_deref().unwrap_or(&key.namespace);
        let gateway = ObjectKey::new(GATEWAY, namespace, &parent.name);
        let listeners = serde_json::to_value(&set.spec.listeners)
            .and_then(serde_json::from_value::<Vec<GatewayListeners>>);
        if let Ok(listeners) = listeners {
            out.entry(gateway).or_default().push((key, listeners));
        }
    }
    out
}

/// Whether `gateway` takes ListenerSets from `namespace`.
pub fn allowed(
    ctx: &BuildContext<'_>,
    gateway: &Gateway,
    key: &ObjectKey,
    namespace: &str,
) -> bool {
    let Some(namespaces) = gateway
        .spec
        .allowed_listeners
        .as_ref()
        .and_then(|a| a.namespaces.as_ref())
    else {
        return false;
    };
    match &namespaces.from {
        Some(GatewayAllowedListenersNamespacesFrom::All) => true,
        Some(GatewayAllowedListenersNamespacesFrom::Same) => namespace == key.namespace,
        Some(GatewayAllowedListenersNamespacesFrom::Selector) => {
            let selector = namespaces
                .selector
                .as_ref()
                .map(|s| label_selector!(s))
                .unwrap_or_default();
            ctx.get::<Namespace>("", namespace)
                .is_some_and(|ns| crate::gateways::selects(&selector, ns.metadata.labels.as_ref()))
        }
        Some(GatewayAllowedListenersNamespacesFrom::None) | None => false,
    }
}

/// A set its Gateway does not allow: not accepted, not programmed.
pub fn not_allowed(key: &ObjectKey, status: &mut StatusReport) {
    let message =
        "the parent Gateway's allowedListeners does not take ListenerSets from this namespace";
    let set = status.gateway(key);
    set.set(Condition::new("Accepted", false, "NotAllowed", message));
    set.set(Condition::new("Programmed", false, "NotAllowed", message));
}

/// A set's own conditions once its listeners are served (`programmed` of them);
/// whether it is accepted (it has a valid listener).
pub fn report(key: &ObjectKey, programmed: usize, status: &mut StatusReport) -> bool {
    let set = status.gateway(key);
    if programmed == 0 {
        let message = "no listener of the set is valid";
        set.set(Condition::new(
            "Accepted",
            false,
            "ListenersNotValid",
            message,
        ));
        set.set(Condition::new(
            "Programmed",
            false,
            "ListenersNotValid",
            message,
        ));
        return false;
    }
    set.set(Condition::new("Accepted", true, "Accepted", ""));
    set.set(Condition::new("Programmed", true, "Programmed", ""));
    true
}
