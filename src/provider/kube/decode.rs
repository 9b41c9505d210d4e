//! A watched object read into a typed one: what is never read dropped first, a kind of a
//! dynamic group placed in its namespace, an object that does not decode reported.

use isobar_sdk::status::Writes;
use isobar_sdk::{Kind, ObjectKey};
use kube::api::DynamicObject;
use kube::runtime::watcher;

use crate::metrics::Metrics;
use crate::provider::{Event, manifest};

/// An object of a kind of a dynamic group, placed in the namespace its kind names (see
/// `DynamicKinds`).
pub(super) fn place(
    event: watcher::Event<DynamicObject>,
    kind: &str,
) -> watcher::Event<DynamicObject> {
    let placed = |mut object: DynamicObject| {
        object.metadata.namespace = Some(kind.to_string());
        object
    };
    match event {
        watcher::Event::InitApply(o) => watcher::Event::InitApply(placed(o)),
        watcher::Event::Apply(o) => watcher::Event::Apply(placed(o)),
        watcher::Event::Delete(o) => watcher::Event::Delete(placed(o)),
        other => other,
    }
}

pub(super) fn object_key(kind: Kind, object: &DynamicObject) -> ObjectKey {
    ObjectKey::new(
        kind,
        kind.namespace_of(object.metadata.namespace.as_deref()),
        object.metadata.name.as_deref().unwrap_or_default(),
    )
}

/// The event for a watched object: `Apply`, or `Unreadable` (with a warning naming it)
/// when it does not decode.
pub(super) fn event_for(
    kind: Kind,
    api_version: &str,
    dynamic_kind: Option<&str>,
    object: DynamicObject,
    metrics: &Metrics,
) -> Option<Event> {
    let key = object_key(kind, &object);
    let decoded = match dynamic_kind {
        Some(name) => decode_as(kind, name, api_version, object, metrics),
        None => decode(kind, api_version, object, metrics),
    };
    match decoded {
        Ok(object) => Some(Event::Apply(object)),
        Err(Some(error)) => Some(Event::Unreadable(key, error)),
        Err(None) => None,
    }
}

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The typed object; `Err(Some(why))` when it does not decode (logged with its name).
pub(super) fn decode(
    kind: Kind,
    api_version: &str,
    object: DynamicObject,
    metrics: &Metrics,
) -> Result<isobar_sdk::Object, Option<String>> {
    decode_as(kind, kind.as_str(), api_version, object, metrics)
}

/// [`decode`], for an object whose `kind` reads `name` (a kind of a dynamic group,
/// stored as `kind`).
fn decode_as(
    kind: Kind,
    name: &str,
    api_version: &str,
    mut object: DynamicObject,
    metrics: &Metrics,
) -> Result<isobar_sdk::Object, Option<String>> {
    object.metadata.managed_fields = None;
    // `kubectl apply`'s copy of the whole object as last applied: never read.
    if let Some(annotations) = object.metadata.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
    // Neither moves routing: without them, Isobar's own status writes (which change
    // both) leave the stored object equal, and so rebuild nothing.
    object.metadata.resource_version = None;
    // A cluster-scoped object has no namespace, whatever a response says.
    if !kind.namespaced() {
        object.metadata.namespace = None;
    }
    // A kind whose status Isobar writes is read without it: Isobar's own writes then
    // leave the stored object equal, and rebuild nothing.
    if kind
        .info()
        .is_some_and(|i| i.status.writes() != Writes::Nothing)
        && let Some(fields) = object.data.as_object_mut()
    {
        fields.remove("status");
    }
    // The object's fields move into the value handed to the decoder (no copy of a
    // Secret's data); only the metadata is serialised.
    let metadata = match serde_json::to_value(&object.metadata) {
        Ok(value) => value,
        Err(error) => {
            tracing::warn!(kind = kind.as_str(), %error, "an object could not be read");
            return Err(None);
        }
    };
    let mut fields = match std::mem::take(&mut object.data) {
        serde_json::Value::Object(fields) => fields,
        _ => serde_json::Map::new(),
    };
    fields.insert("metadata".into(), metadata);
    // List items carry no apiVersion/kind; the watch says what they are.
    fields.insert("apiVersion".into(), api_version.into());
    fields.insert("kind".into(), name.into());
    let value = serde_json::Value::Object(fields);
    match manifest::decode(kind, value) {
        Ok(object) => Ok(object),
        Err(error) => {
            metrics.decode_error(kind.as_str());
            tracing::warn!(
                kind = kind.as_str(),
                namespace = object.metadata.namespace.as_deref().unwrap_or_default(),
                name = object.metadata.name.as_deref().unwrap_or_default(),
                %error,
                "skipping an object that does not decode; its last good version (if any) stays"
            );
            Err(Some(error))
        }
    }
}
