//! Rendering Envoy resources as Envoy's own YAML/JSON (for `isobar translate`), with
//! every object's status beside them.

use prost_reflect::{DescriptorPool, DynamicMessage, SerializeOptions};
use serde::Serialize;

use isobar_sdk::StatusReport;
use isobar_sdk::status::{NoStatus, StatusShape};

use crate::xds::{Resources, XdsType};

fn pool() -> Result<&'static DescriptorPool, String> {
    crate::xds::validate::pool()
}

/// One resource of type `t` as Envoy's JSON (field names as in Envoy's docs).
pub fn resource_json(t: XdsType, bytes: &[u8]) -> Result<serde_json::Value, String> {
    let pool = pool()?;
    let type_url = t.type_url();
    let name = type_url.rsplit('/').next().unwrap_or_default();
    let descriptor = pool
        .get_message_by_name(name)
        .ok_or_else(|| format!("no descriptor for {name}"))?;
    let message = DynamicMessage::decode(descriptor, bytes).map_err(|e| e.to_string())?;
    let options = SerializeOptions::new().use_proto_field_name(true);
    let mut value = message
        .serialize_with_options(serde_json::value::Serializer, &options)
        .map_err(|e| e.to_string())?;
    if let Some(map) = value.as_object_mut() {
        map.insert("@type".to_string(), type_url.into());
    }
    Ok(value)
}

#[derive(Serialize)]
struct Translation {
    resources: TypedResources,
    status: Vec<ObjectStatus>,
}

#[derive(Serialize)]
struct TypedResources {
    listeners: Vec<serde_json::Value>,
    routes: Vec<serde_json::Value>,
    /// SRDS: the scopes of HTTP listeners whose routes are split into shards.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    scoped_routes: Vec<serde_json::Value>,
    clusters: Vec<serde_json::Value>,
    endpoints: Vec<serde_json::Value>,
    /// VHDS (`xds-server.vhds`): the RouteConfigurations delta Envoys get instead of
    /// those of `routes` (`ingress_http`'s shell), and `ingress_http`'s vhosts.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    vhds_routes: Vec<serde_json::Value>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    virtual_hosts: Vec<serde_json::Value>,
    /// SDS secrets, by name, with the certificate replaced by its fingerprint and the key
    /// withheld: secret material is never printed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    secrets: Vec<serde_json::Value>,
    /// RTDS: the `dynamic` runtime layer.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    runtimes: Vec<serde_json::Value>,
}

/// Replaces every inline certificate and key of an SDS secret's JSON.
pub fn redact(mut value: serde_json::Value) -> serde_json::Value {
    if let Some(cert) = value.get_mut("tls_certificate") {
        if let Some(chain) = cert
            .get_mut("certificate_chain")
            .and_then(|c| c.get_mut("inline_string"))
        {
            let pem = chain.as_str().unwrap_or_default();
            let fingerprints: Vec<String> = pem::parse_many(pem)
                .unwrap_or_default()
                .iter()
                .map(|b| format!("sha256:{}", isobar_sdk::secret::fingerprint(b.contents())))
                .collect();
            *chain = serde_json::Value::String(fingerprints.join(" "));
        }
        if let Some(key) = cert.get_mut("private_key") {
            *key = serde_json::json!({"inline_string": "[redacted]"});
        }
    }
    value
}

#[derive(Serialize)]
struct ObjectStatus {
    kind: String,
    namespace: String,
    name: String,
    status: serde_json::Value,
}

/// An object's status as `translate` shows it: in its kind's style when that style
/// writes conditions, else in Contour's (what an Ingress would carry).
fn rendered(
    status: &StatusReport,
    objects: &isobar_sdk::Objects,
    key: &isobar_sdk::ObjectKey,
    controller: &str,
) -> serde_json::Value {
    let shape = key
        .kind
        .info()
        .map_or(&NoStatus as &dyn StatusShape, |i| i.status);
    match shape.render(status, key, controller) {
        Some(rendered) => {
            let generation = objects.object(key).and_then(|o| o.metadata().generation);
            crate::runner::status::as_written(key.kind, &rendered, generation)
        }
        None => serde_json::to_value(status.render(key)).unwrap_or_default(),
    }
}

/// The full `translate` document.
/// Route-style statuses are rendered under `controller`.
pub fn translation(
    resources: &Resources,
    status: &StatusReport,
    objects: &isobar_sdk::Objects,
    controller: &str,
) -> Result<serde_json::Value, String> {
    let all = |t: XdsType| {
        resources
            .of(t)
            .values()
            .map(|bytes| resource_json(t, bytes))
            .collect::<Result<Vec<_>, _>>()
    };
    let doc = Translation {
        resources: TypedResources {
            listeners: all(XdsType::Listener)?,
            routes: all(XdsType::Route)?,
            scoped_routes: all(XdsType::ScopedRoute)?,
            clusters: all(XdsType::Cluster)?,
            endpoints: all(XdsType::Endpoint)?,
            vhds_routes: all(XdsType::VhdsRoute)?,
            virtual_hosts: all(XdsType::VirtualHost)?,
            secrets: all(XdsType::Secret)?.into_iter().map(redact).collect(),
            runtimes: all(XdsType::Runtime)?,
        },
        status: status
            .objects
            .keys()
            .map(|key| {
                // A kind defined at run time is stored under the namespace its kind
                // names: shown as that kind, with no namespace.
                let (kind, namespace) = match isobar_sdk::DynamicKinds::stored_as(key.kind) {
                    Some(_) => (key.namespace.clone(), String::new()),
                    None => (key.kind.to_string(), key.namespace.clone()),
                };
                ObjectStatus {
                    kind,
                    namespace,
                    name: key.name.clone(),
                    status: rendered(status, objects, key, controller),
                }
            })
            .collect(),
    };
    serde_json::to_value(doc).map_err(|e| e.to_string())
}
