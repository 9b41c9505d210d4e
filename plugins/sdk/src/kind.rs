//! Kinds are data: one [`KindInfo`] per kind of object Isobar reads (its group, versions,
//! plural, scope, how it decodes and how its status is written), registered with
//! `inventory` by the crate that defines it. Providers watch and decode through the
//! table, the admission webhook and the status writer read it: adding a kind is adding
//! a crate that registers it.

use std::any::Any;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, OnceLock};

use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::object::Object;

/// A kind of object, as the Kubernetes API names it: a group and a kind name. Copied by
/// value (one pointer); compared by what it names.
#[derive(Clone, Copy)]
pub struct Kind(&'static KindId);

/// What a [`Kind`] names. A crate defining a kind writes
/// `const ID: KindId = KindId::new("example.com", "Thing");` and
/// `pub const THING: Kind = Kind::new(&ID);`.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KindId {
    /// Where it sorts: Isobar's own kinds in a fixed order (backends, then routes, as
    /// status and `translate` list them), every other kind after them by group and name.
    rank: u8,
    group: &'static str,
    name: &'static str,
}

#[allow(non_upper_case_globals)]
impl Kind {
    pub const Service: Kind = Kind(&KindId {
        rank: 0,
        group: "",
        name: "Service",
    });
    pub const EndpointSlice: Kind = Kind(&KindId {
        rank: 1,
        group: "discovery.k8s.io",
        name: "EndpointSlice",
    });
    pub const Secret: Kind = Kind(&KindId {
        rank: 2,
        group: "",
        name: "Secret",
    });
    pub const Ingress: Kind = Kind(&KindId {
        rank: 3,
        group: "networking.k8s.io",
        name: "Ingress",
    });
    /// A kind defined outside the SDK (by a plugin crate).
    pub const fn new(id: &'static KindId) -> Kind {
        Kind(id)
    }

    /// The kind's name (`Ingress`).
    pub fn as_str(self) -> &'static str {
        self.0.name
    }

    /// Its API group (`projectcontour.io`; empty for the core group).
    pub fn group(self) -> &'static str {
        self.0.group
    }

    /// Whether Kubernetes itself serves it (the core group and the built-in API groups
    /// Isobar reads: Services, EndpointSlices, Secrets, Ingresses, Leases, ...), not a
    /// CustomResourceDefinition that may be missing.
    pub fn is_built_in(self) -> bool {
        matches!(
            self.group(),
            "" | "apps" | "discovery.k8s.io" | "networking.k8s.io" | "coordination.k8s.io"
        )
    }

    /// Its entry in the table of kinds; `None` when no linked crate registers it.
    pub fn info(self) -> Option<&'static KindInfo> {
        table().get(&self).copied()
    }

    /// The kind a manifest's `apiVersion` and `kind` name, if a registered kind reads
    /// that version; for a group of kinds defined at run time ([`DynamicKinds`]), the
    /// kind its objects are stored as.
    pub fn from_type(api_version: &str, kind: &str) -> Option<Kind> {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let exact = table().values().find(|info| {
            info.kind.as_str() == kind
                && info.kind.group() == group
                && info.versions.contains(&version)
        });
        match exact {
            Some(info) => Some(info.kind),
            None => DynamicKinds::of_group(group)
                .filter(|d| d.kind.info().is_some_and(|i| i.versions.contains(&version)))
                .map(|d| d.kind),
        }
    }

    /// Whether its objects live in namespaces (an unregistered kind is taken to).
    pub fn namespaced(self) -> bool {
        self.info().is_none_or(|i| i.namespaced)
    }

    /// The namespace of one of its objects whose metadata says `namespace`: `default`
    /// when unset (as `kubectl apply` does), none for a cluster-scoped kind.
    pub fn namespace_of(self, namespace: Option<&str>) -> &str {
        if !self.namespaced() {
            return "";
        }
        namespace.unwrap_or("default")
    }

    /// Every registered kind, in kind order.
    pub fn all() -> impl Iterator<Item = &'static KindInfo> {
        table().values().copied()
    }
}

impl KindId {
    /// `group` is the kind's API group (empty for the core group), `name` its kind.
    pub const fn new(group: &'static str, name: &'static str) -> KindId {
        KindId {
            rank: u8::MAX,
            group,
            name,
        }
    }

    /// A kind with a fixed place in listings (status, `translate`), compared by that
    /// place alone. Ranks 0–3 are Kubernetes' kinds here, 4–6 Contour's (`isobar-contour`).
    pub const fn ranked(rank: u8, group: &'static str, name: &'static str) -> KindId {
        KindId { rank, group, name }
    }
}

/// Isobar's own kinds have ranks of their own: two of them are compared by rank alone.
/// (A constant's reference is not one address everywhere it is used, so the pointers of
/// two copies of `Kind::Ingress` may differ.)
impl PartialEq for Kind {
    fn eq(&self, other: &Kind) -> bool {
        std::ptr::eq(self.0, other.0)
            || (self.0.rank == other.0.rank && (self.0.rank != u8::MAX || self.0 == other.0))
    }
}

impl Eq for Kind {}

impl PartialOrd for Kind {
    fn partial_cmp(&self, other: &Kind) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Kind {
    fn cmp(&self, other: &Kind) -> Ordering {
        if std::ptr::eq(self.0, other.0) {
            return Ordering::Equal;
        }
        match self.0.rank.cmp(&other.0.rank) {
            Ordering::Equal if self.0.rank == u8::MAX => self.0.cmp(other.0),
            by_rank => by_rank,
        }
    }
}

impl Hash for Kind {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl fmt::Debug for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Kind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// One kind's entry in the table of kinds.
#[derive(Debug)]
pub struct KindInfo {
    pub kind: Kind,
    /// The API versions objects are read in (the first is the one watched).
    pub versions: &'static [&'static str],
    /// The resource's plural, as its API path names it (`httpproxies`).
    pub plural: &'static str,
    pub namespaced: bool,
    /// Decodes one object from JSON as the API server or a manifest gives it; the error
    /// says what is wrong and where (`invalid type … at spec.routes`). See
    /// [`decode_object`].
    pub decode: fn(serde_json::Value) -> Result<Object, String>,
    /// How its objects' status is written back.
    pub status: &'static dyn crate::status::StatusShape,
}

impl KindInfo {
    /// `group/version` (`v1` for the core group) of the version watched.
    pub fn api_version(&self) -> String {
        let version = self.versions.first().copied().unwrap_or("v1");
        match self.kind.group() {
            "" => version.to_string(),
            group => format!("{group}/{version}"),
        }
    }
}

inventory::collect!(KindInfo);

/// A group of kinds defined at run time by objects of another kind: Gatekeeper's
/// constraint kinds, one per ConstraintTemplate. Every object of the group is stored as
/// one registered kind (`kind`, whose [`KindInfo`] decodes it), under the namespace
/// named by its own kind (the group's kinds are cluster-scoped), so that two kinds may
/// use one name. The Kubernetes provider watches each kind as it is declared, and the
/// status writer writes to it.
#[derive(Debug)]
pub struct DynamicKinds {
    pub kind: Kind,
    /// The API group every kind of the group is in.
    pub group: &'static str,
    /// The kind whose objects declare them.
    pub declared_by: Kind,
    /// The kind (its name, and its plural) one of those declares, if any.
    pub declares: fn(&Object) -> Option<(String, String)>,
}

inventory::collect!(DynamicKinds);

impl DynamicKinds {
    /// Every registered group.
    pub fn all() -> impl Iterator<Item = &'static DynamicKinds> {
        inventory::iter::<DynamicKinds>.into_iter()
    }

    /// The group of `group`, when registered.
    pub fn of_group(group: &str) -> Option<&'static DynamicKinds> {
        Self::all().find(|d| d.group == group)
    }

    /// The group whose objects are stored as `kind`, when it is one.
    pub fn stored_as(kind: Kind) -> Option<&'static DynamicKinds> {
        Self::all().find(|d| d.kind == kind)
    }
}

fn table() -> &'static BTreeMap<Kind, &'static KindInfo> {
    static TABLE: OnceLock<BTreeMap<Kind, &'static KindInfo>> = OnceLock::new();
    TABLE.get_or_init(|| {
        inventory::iter::<KindInfo>
            .into_iter()
            .map(|info| (info.kind, info))
            .collect()
    })
}

/// A Rust type objects of one kind decode into.
pub trait Resource:
    Any + Send + Sync + fmt::Debug + PartialEq + Serialize + DeserializeOwned
{
    const KIND: Kind;

    fn metadata(&self) -> &ObjectMeta;
}

/// Decodes `value` as a `T` (the usual [`KindInfo::decode`]); the error names the field
/// path.
pub fn decode_object<T: Resource>(value: serde_json::Value) -> Result<Object, String> {
    serde_path_to_error::deserialize::<_, T>(value)
        .map(|o| Object::new(Arc::new(o)))
        .map_err(|e| format!("{} at {}", e.inner(), e.path()))
}

/// What an EndpointSlice's endpoints carry that Isobar never reads.
const UNREAD_ENDPOINT_FIELDS: [&str; 5] = [
    "targetRef",
    "nodeName",
    "zone",
    "hints",
    "deprecatedTopology",
];

/// An EndpointSlice, without what Isobar never reads: only where traffic goes is read.
/// A real cluster also sets each endpoint's pod, node, zone and hints and the slice's
/// owner and trigger-time annotation: memory for nothing, and a pod restart would look
/// like a change of addresses.
fn decode_endpoint_slice(mut value: serde_json::Value) -> Result<Object, String> {
    if let Some(meta) = value.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        meta.remove("ownerReferences");
        meta.remove("annotations");
    }
    let endpoints = value.get_mut("endpoints").and_then(|e| e.as_array_mut());
    for endpoint in endpoints
        .into_iter()
        .flatten()
        .filter_map(|e| e.as_object_mut())
    {
        for field in UNREAD_ENDPOINT_FIELDS {
            endpoint.remove(field);
        }
    }
    decode_object::<EndpointSlice>(value)
}

/// Secret types whose data Isobar keeps.
const KEPT_SECRET_TYPES: [&str; 2] = ["kubernetes.io/tls", "Opaque"];

/// Stands for a data value that cannot be a JWKS: the value itself is not kept.
const NOT_AN_OBJECT: &str = "-";

/// Replaces `value` (base64 in `data`, text in `stringData`) by [`NOT_AN_OBJECT`] unless
/// it is empty or may be a JSON object (see [`crate::secret::OtherValue`]).
fn mask_other_value(value: &mut serde_json::Value, base64: bool) {
    use base64::Engine;
    let text = value.as_str().unwrap_or_default();
    let bytes = if base64 {
        base64::engine::general_purpose::STANDARD.decode(text).ok()
    } else {
        Some(text.as_bytes().to_vec())
    };
    let keep = bytes.is_some_and(|b| {
        matches!(
            crate::secret::OtherValue::of(&b),
            crate::secret::OtherValue::Text(_)
        )
    });
    if !keep {
        let marker = if base64 {
            base64::engine::general_purpose::STANDARD.encode(NOT_AN_OBJECT)
        } else {
            NOT_AN_OBJECT.to_string()
        };
        *value = serde_json::Value::String(marker);
    }
}

/// A Secret, with only the data Isobar reads: nothing of a Secret that is neither
/// `kubernetes.io/tls` nor `Opaque`, of a `kubernetes.io/tls` one only the keys Isobar
/// reads (`tls.crt`, `tls.key`, `ca.crt`, `crl.pem`). An `Opaque` one keeps its other
/// keys too (a JWT provider's `localJWKS` names any of them), each value only when it may
/// be a JWKS: an application's passwords are not kept.
fn decode_secret(mut value: serde_json::Value) -> Result<Object, String> {
    let type_ = value.get("type").and_then(|t| t.as_str());
    let kept = type_.is_none_or(|t| KEPT_SECRET_TYPES.contains(&t));
    let opaque = type_.is_none_or(|t| t == "Opaque");
    if let Some(fields) = value.as_object_mut() {
        for field in ["data", "stringData"] {
            if !kept {
                fields.remove(field);
            } else if let Some(serde_json::Value::Object(entries)) = fields.get_mut(field) {
                entries.retain(|key, _| opaque || crate::secret::READ_KEYS.contains(&key.as_str()));
                let base64 = field == "data";
                for (key, value) in entries.iter_mut() {
                    if !crate::secret::READ_KEYS.contains(&key.as_str()) {
                        mask_other_value(value, base64);
                    }
                }
            }
        }
    }
    decode_object::<Secret>(value)
}

macro_rules! resource {
    ($type:ty, $kind:expr) => {
        impl Resource for $type {
            const KIND: Kind = $kind;

            fn metadata(&self) -> &ObjectMeta {
                &self.metadata
            }
        }
    };
}

resource!(Service, Kind::Service);
resource!(EndpointSlice, Kind::EndpointSlice);
resource!(Secret, Kind::Secret);
resource!(Ingress, Kind::Ingress);

inventory::submit! {
    KindInfo {
        kind: Kind::Service,
        versions: &["v1"],
        plural: "services",
        namespaced: true,
        decode: decode_object::<Service>,
        status: &crate::status::NoStatus,
    }
}

inventory::submit! {
    KindInfo {
        kind: Kind::EndpointSlice,
        versions: &["v1"],
        plural: "endpointslices",
        namespaced: true,
        decode: decode_endpoint_slice,
        status: &crate::status::NoStatus,
    }
}

inventory::submit! {
    KindInfo {
        kind: Kind::Secret,
        versions: &["v1"],
        plural: "secrets",
        namespaced: true,
        decode: decode_secret,
        status: &crate::status::NoStatus,
    }
}

inventory::submit! {
    KindInfo {
        kind: Kind::Ingress,
        versions: &["v1"],
        plural: "ingresses",
        namespaced: true,
        decode: decode_object::<Ingress>,
        status: &crate::status::LoadBalancer,
    }
}

#[cfg(test)]
mod tests;
