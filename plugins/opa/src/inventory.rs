//! What a policy sees: `input` for one object and `data` for the whole build.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use isobar_contour::api::HTTPProxy;
use isobar_sdk::api::Ingress;
use isobar_sdk::host::parse_host;
use isobar_sdk::status::{Route, StatusShape};
use isobar_sdk::{Kind, Object, Objects};

/// The kinds policies judge: HTTPProxy, Ingress and every kind of Gateway API's route
/// shape a source plugin registers (HTTPRoute, GRPCRoute, TLSRoute, TCPRoute).
pub fn judged() -> impl Iterator<Item = Kind> {
    let routes = Kind::all()
        .filter(|info| info.status.per_parent() == Route.per_parent())
        .map(|info| info.kind);
    [isobar_contour::HTTP_PROXY, Kind::Ingress]
        .into_iter()
        .chain(routes)
}

/// Every judged object stored, in Gatekeeper's layout
/// (`data.inventory.namespace[ns][apiVersion][kind][name]`), and Isobar's host index
/// (`data.isobar.hosts[host]`: who claims each host).
/// apiVersion → kind → name → object, within one namespace.
type ByVersion = BTreeMap<String, BTreeMap<&'static str, serde_json::Map<String, Value>>>;

#[derive(Debug, Clone, Default)]
pub struct Inventory {
    namespaces: BTreeMap<String, ByVersion>,
    hosts: BTreeMap<String, Vec<Value>>,
    /// The objects copied, by their place in `data.inventory.namespace`.
    objects: BTreeMap<Place, Object>,
}

/// An object's place in `data.inventory.namespace`: namespace, apiVersion, kind, name.
pub type Place = [String; 4];

impl Inventory {
    /// The host index of `objects` (only of `only` hosts, when given), and with `full`
    /// the copy of every object too.
    pub fn of(objects: &Objects, full: bool, only: Option<&[String]>) -> Inventory {
        let mut inventory = Inventory::default();
        for kind in judged() {
            for object in objects.of_kind(kind).values() {
                inventory.add(object, full, only);
            }
        }
        inventory
    }

    fn add(&mut self, object: &Object, full: bool, only: Option<&[String]>) {
        let mut claimed = hosts(object);
        claimed.retain(|host| only.is_none_or(|only| only.contains(host)));
        if claimed.is_empty() && !full {
            return;
        }
        let key = object.key();
        let (api_version, kind) = type_of(object);
        for host in claimed {
            self.hosts.entry(host).or_default().push(json!({
                "kind": kind,
                "namespace": key.namespace,
                "name": key.name,
            }));
        }
        if !full {
            return;
        }
        self.objects.insert(
            [
                key.namespace.clone(),
                api_version.clone(),
                kind.to_string(),
                key.name.clone(),
            ],
            object.clone(),
        );
        self.namespaces
            .entry(key.namespace.clone())
            .or_default()
            .entry(api_version)
            .or_default()
            .entry(kind)
            .or_default()
            .insert(key.name.clone(), manifest(object));
    }

    /// Every object copied into the inventory, with its place.
    pub fn objects(&self) -> &BTreeMap<Place, Object> {
        &self.objects
    }

    /// `data` holding an inventory of only the objects at `places`.
    pub fn subset<'a>(&self, places: impl IntoIterator<Item = &'a Place>) -> Value {
        let mut namespaces = serde_json::Map::new();
        for [ns, version, kind, name] in places {
            let Some(object) = self
                .namespaces
                .get(ns)
                .and_then(|v| v.get(version))
                .and_then(|k| k.get(kind.as_str()))
                .and_then(|n| n.get(name))
            else {
                continue;
            };
            let at = [ns, version, kind]
                .into_iter()
                .try_fold(&mut namespaces, |at, step| {
                    match at.entry(step.clone()).or_insert_with(|| json!({})) {
                        Value::Object(map) => Some(map),
                        _ => None,
                    }
                });
            if let Some(at) = at {
                at.insert(name.clone(), object.clone());
            }
        }
        json!({"inventory": {"namespace": namespaces}})
    }

    /// `data` for one build: the inventory (empty unless `full`), the host index and the
    /// plugin's `data`.
    pub fn data(&self, config: &Value, full: bool) -> Value {
        let namespaces = if full {
            json!(self.namespaces)
        } else {
            json!({})
        };
        json!({
            "inventory": { "namespace": namespaces },
            "isobar": { "hosts": self.hosts },
            "config": config,
        })
    }
}

fn type_of(object: &Object) -> (String, &'static str) {
    let kind = object.kind();
    let api_version = kind.info().map(|i| i.api_version()).unwrap_or_default();
    (api_version, kind.as_str())
}

/// The object as its manifest reads, with `apiVersion` and `kind`.
pub(crate) fn manifest(object: &Object) -> Value {
    let (api_version, kind) = type_of(object);
    let mut value = object.to_json();
    if let Value::Object(map) = &mut value {
        map.insert("apiVersion".into(), api_version.into());
        map.insert("kind".into(), kind.into());
        if let Some(Value::Object(meta)) = map.get_mut("metadata")
            && !meta.contains_key("namespace")
        {
            meta.insert("namespace".into(), object.key().namespace.into());
        }
    }
    value
}

/// The hosts an object claims, as Isobar compares them: lower case, no trailing dot.
/// An HTTPProxy claims its `virtualhost.fqdn`; an Ingress the host of each rule; a
/// Gateway API route its `spec.hostnames`.
pub fn hosts(object: &Object) -> Vec<String> {
    let json;
    let raw: Vec<&str> = match (object.get::<HTTPProxy>(), object.get::<Ingress>()) {
        (Some(p), _) => p
            .spec
            .virtualhost
            .as_ref()
            .map(|v| vec![v.fqdn.as_str()])
            .unwrap_or_default(),
        (_, Some(i)) => i
            .spec
            .as_ref()
            .and_then(|s| s.rules.as_ref())
            .map(|rules| rules.iter().filter_map(|r| r.host.as_deref()).collect())
            .unwrap_or_default(),
        _ => {
            json = object.to_json();
            json.pointer("/spec/hostnames")
                .and_then(Value::as_array)
                .map(|names| names.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default()
        }
    };
    let mut out: Vec<String> = raw
        .into_iter()
        .filter(|h| !h.is_empty())
        .map(|h| {
            parse_host(h)
                .map(|h| h.fqdn)
                .unwrap_or_else(|_| h.to_ascii_lowercase())
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// `input` for one object: `{kind, apiVersion, object, hosts}`, and the same object
/// as Gatekeeper's policies read it (`review`, with empty `parameters`) and OPA's
/// kube-mgmt's (`request`, an admission request).
pub fn input_for(object: &Object) -> Value {
    let (api_version, kind) = type_of(object);
    let manifest = manifest(object);
    let review = crate::gatekeeper::review(object, &manifest);
    json!({
        "kind": kind,
        "apiVersion": api_version,
        "object": manifest,
        "hosts": hosts(object),
        "review": review,
        "request": review,
        "parameters": {},
    })
}
