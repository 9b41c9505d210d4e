//! The objects Isobar watches, keyed by kind, namespace and name.
//!
//! `Objects` is the store every provider fills: synchronous `apply`/`delete`, no I/O,
//! deterministic iteration order.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Arc, OnceLock};

use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;
use serde::Serialize;

use crate::api::{HTTPProxy, TLSCertificateDelegation};
use crate::secret::SecretCheck;

/// The kinds of object Isobar understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Kind {
    Service,
    EndpointSlice,
    Secret,
    Ingress,
    HTTPProxy,
    TLSCertificateDelegation,
}

impl Kind {
    pub const ALL: [Kind; 6] = [
        Kind::Service,
        Kind::EndpointSlice,
        Kind::Secret,
        Kind::Ingress,
        Kind::HTTPProxy,
        Kind::TLSCertificateDelegation,
    ];

    /// The kind for a manifest's `apiVersion` and `kind`, if Isobar reads it.
    pub fn from_type(api_version: &str, kind: &str) -> Option<Kind> {
        match (api_version, kind) {
            ("v1", "Service") => Some(Kind::Service),
            ("v1", "Secret") => Some(Kind::Secret),
            ("discovery.k8s.io/v1", "EndpointSlice") => Some(Kind::EndpointSlice),
            ("networking.k8s.io/v1", "Ingress") => Some(Kind::Ingress),
            ("projectcontour.io/v1", "HTTPProxy") => Some(Kind::HTTPProxy),
            ("projectcontour.io/v1", "TLSCertificateDelegation") => {
                Some(Kind::TLSCertificateDelegation)
            }
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Service => "Service",
            Kind::EndpointSlice => "EndpointSlice",
            Kind::Secret => "Secret",
            Kind::Ingress => "Ingress",
            Kind::HTTPProxy => "HTTPProxy",
            Kind::TLSCertificateDelegation => "TLSCertificateDelegation",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Identifies one object.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct ObjectKey {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    pub fn new(kind: Kind, namespace: impl Into<String>, name: impl Into<String>) -> Self {
        ObjectKey {
            kind,
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// One decoded object.
#[derive(Debug, Clone)]
pub enum Object {
    Service(Arc<Service>),
    EndpointSlice(Arc<EndpointSlice>),
    Secret(Arc<Secret>),
    Ingress(Arc<Ingress>),
    HTTPProxy(Arc<HTTPProxy>),
    TLSCertificateDelegation(Arc<TLSCertificateDelegation>),
}

impl Object {
    pub fn kind(&self) -> Kind {
        match self {
            Object::Service(_) => Kind::Service,
            Object::EndpointSlice(_) => Kind::EndpointSlice,
            Object::Secret(_) => Kind::Secret,
            Object::Ingress(_) => Kind::Ingress,
            Object::HTTPProxy(_) => Kind::HTTPProxy,
            Object::TLSCertificateDelegation(_) => Kind::TLSCertificateDelegation,
        }
    }

    pub fn metadata(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        match self {
            Object::Service(o) => &o.metadata,
            Object::EndpointSlice(o) => &o.metadata,
            Object::Secret(o) => &o.metadata,
            Object::Ingress(o) => &o.metadata,
            Object::HTTPProxy(o) => &o.metadata,
            Object::TLSCertificateDelegation(o) => &o.metadata,
        }
    }

    /// The object's key; a missing namespace means `default`, as `kubectl apply` does.
    pub fn key(&self) -> ObjectKey {
        let meta = self.metadata();
        ObjectKey::new(
            self.kind(),
            meta.namespace.as_deref().unwrap_or("default"),
            meta.name.as_deref().unwrap_or_default(),
        )
    }
}

type NsName = (String, String);

/// Every watched object, by kind, namespace and name.
#[derive(Debug, Default, Clone)]
pub struct Objects {
    /// What each Service says about routing (the rest is not kept).
    pub services: BTreeMap<NsName, Arc<ServiceSummary>>,
    /// What each EndpointSlice says about where traffic goes (the rest is not kept).
    pub endpoint_slices: BTreeMap<NsName, Arc<SliceEndpoints>>,
    /// Secrets not yet dropped (see [`Unchecked`]). A provider that can fetch a Secret
    /// again (Kubernetes) has them dropped after each full build: checked ones keep only
    /// their check and a digest (`stripped`), unused ones a digest (`elided`).
    secrets: Unchecked,
    pub ingresses: BTreeMap<NsName, Arc<Ingress>>,
    pub httpproxies: BTreeMap<NsName, Arc<HTTPProxy>>,
    pub delegations: BTreeMap<NsName, Arc<TLSCertificateDelegation>>,
    /// Each stored secret's check, computed on first use and dropped with its version.
    secret_checks: BTreeMap<NsName, Arc<OnceLock<SecretCheck>>>,
    /// EndpointSlice names by the (namespace, service) they belong to.
    slices_by_service: BTreeMap<NsName, crate::SmallSet<String>>,
    /// Secrets whose data was dropped because no build asked for them, with a digest of
    /// what was kept of them (see [`Unchecked`]: an equal re-delivery changes nothing).
    elided: Dropped,
    /// Secrets in use whose check is computed: not in `secrets` (the check holds what is
    /// served), only this kind of digest.
    stripped: Dropped,
    /// Secrets asked for (through [`Objects::secret_check`]) since the last
    /// [`Objects::take_requested`].
    requested: Arc<std::sync::Mutex<BTreeSet<NsName>>>,
}

/// The Secrets stored whole, until a full build checks or drops them: of each, what its
/// check reads (its type and the data keys Isobar reads, [`crate::secret::READ_KEYS`]),
/// end to end in one shared buffer. A re-delivery is compared by those bytes (a change
/// to anything else, a label say, changes nothing Isobar serves); a dropped Secret is
/// remembered by their SHA-256.
///
/// At start-up every listed Secret waits here for the first build (30,000 at the 10k
/// profile, 20,000 of which no build asks for). Kept as decoded objects they were tens
/// of thousands of small blocks among the long-lived ones allocated at the same time;
/// once dropped, they left those pages part-empty and resident (≈ 15 MiB at 10k). One
/// buffer is handed back whole.
#[derive(Debug, Default, Clone)]
struct Unchecked {
    at: BTreeMap<NsName, Stored>,
    /// Shared with copies of the store (dry builds) until either side adds a Secret.
    bytes: Arc<Vec<u8>>,
    /// Bytes of Secrets no longer stored (reclaimed when they are most of the buffer).
    garbage: usize,
}

#[derive(Debug, Clone)]
struct Stored {
    bytes: std::ops::Range<usize>,
}

/// What a dropped Secret is remembered by: the first half of a SHA-256 of what was kept
/// of it (128 bits: no two versions of a Secret are found equal by chance).
type Digest = [u8; 16];

fn digest(kept: &[u8]) -> Digest {
    use sha2::Digest;
    let full: [u8; 32] = sha2::Sha256::digest(kept).into();
    let mut half = [0; 16];
    half.copy_from_slice(&full[..16]);
    half
}

/// Secrets whose data was dropped, each by `namespace/name` (neither holds a `/`) and a
/// [`Digest`]: 30,000 of them at the 10k profile, so one block each for the name, not a
/// pair of strings.
#[derive(Debug, Default, Clone)]
struct Dropped(BTreeMap<Box<str>, Digest>);

impl Dropped {
    fn key((namespace, name): &NsName) -> Box<str> {
        format!("{namespace}/{name}").into()
    }

    fn get(&self, id: &NsName) -> Option<Digest> {
        self.0.get(&Self::key(id)).copied()
    }

    fn contains(&self, id: &NsName) -> bool {
        self.0.contains_key(&Self::key(id))
    }

    fn insert(&mut self, id: &NsName, digest: Digest) {
        self.0.insert(Self::key(id), digest);
    }

    fn remove(&mut self, id: &NsName) -> Option<Digest> {
        self.0.remove(&Self::key(id))
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn ids(&self) -> impl Iterator<Item = NsName> + '_ {
        self.0.keys().filter_map(|key| {
            let (namespace, name) = key.split_once('/')?;
            Some((namespace.to_string(), name.to_string()))
        })
    }
}

/// Below this size the buffer is not compacted.
const COMPACT_MIN: usize = 1 << 16;

/// How a Secret's type is written when it has none.
const NO_TYPE: u32 = u32::MAX;

impl Unchecked {
    fn len(&self) -> usize {
        self.at.len()
    }

    fn keys(&self) -> impl Iterator<Item = &NsName> {
        self.at.keys()
    }

    /// Stores `secret` (replacing any stored version), unless what is kept of it equals the
    /// version stored, or has the digest `dropped` (of the version whose data was
    /// dropped): returns whether it was stored. Digests are made only to compare with a
    /// dropped version and when a version is dropped, not for every Secret that arrives.
    fn insert(&mut self, id: NsName, secret: &Secret, dropped: Option<Digest>) -> bool {
        // `data` merged with `stringData`, as the API server does on write.
        let field = |key: &str| {
            let string = secret.string_data.as_ref().and_then(|d| d.get(key));
            let data = || secret.data.as_ref().and_then(|d| d.get(key));
            string
                .map(String::as_bytes)
                .or_else(|| data().map(|v| v.0.as_slice()))
        };
        let bytes = Arc::make_mut(&mut self.bytes);
        let start = bytes.len();
        // A field too long to write (4 GiB) reads back as absent.
        let fits = |f: &&[u8]| u32::try_from(f.len()).is_ok_and(|n| n != NO_TYPE);
        let mut put = |field: Option<&[u8]>| match field.filter(fits) {
            Some(field) => {
                bytes.extend_from_slice(&u32::try_from(field.len()).unwrap_or(0).to_le_bytes());
                bytes.extend_from_slice(field);
            }
            None => bytes.extend_from_slice(&NO_TYPE.to_le_bytes()),
        };
        put(secret.type_.as_deref().map(str::as_bytes));
        for key in crate::secret::READ_KEYS {
            put(field(key));
        }
        let new = start..bytes.len();
        let same = match self.at.get(&id) {
            Some(old) => bytes.get(old.bytes.clone()) == bytes.get(new.clone()),
            None => dropped.is_some_and(|d| d == digest(&bytes[new.clone()])),
        };
        if same {
            bytes.truncate(start);
            return false;
        }
        if let Some(old) = self.at.insert(id, Stored { bytes: new }) {
            self.garbage += old.bytes.len();
            self.reclaim();
        }
        true
    }

    /// Drops a stored Secret; returns the digest it is remembered by.
    fn remove(&mut self, id: &NsName) -> Option<Digest> {
        let old = self.at.remove(id)?;
        let digest = digest(self.bytes.get(old.bytes.clone()).unwrap_or_default());
        self.garbage += old.bytes.len();
        self.reclaim();
        Some(digest)
    }

    /// Frees the buffer when nothing is stored, and compacts it when dead bytes (of
    /// replaced or removed Secrets) are most of it.
    fn reclaim(&mut self) {
        if self.at.is_empty() {
            self.bytes = Arc::default();
            self.garbage = 0;
        } else if self.garbage > self.bytes.len() / 2 && self.bytes.len() > COMPACT_MIN {
            self.compact();
        }
    }

    /// Copies the stored Secrets' bytes into a buffer of their own.
    fn compact(&mut self) {
        let mut bytes = Vec::with_capacity(self.bytes.len() - self.garbage);
        for stored in self.at.values_mut() {
            let start = bytes.len();
            bytes.extend_from_slice(&self.bytes[stored.bytes.clone()]);
            stored.bytes = start..bytes.len();
        }
        self.bytes = Arc::new(bytes);
        self.garbage = 0;
    }

    /// The stored Secret's check.
    fn check(&self, id: &NsName) -> Option<SecretCheck> {
        let mut rest = self.bytes.get(self.at.get(id)?.bytes.clone())?;
        let mut take = || -> Option<Option<&[u8]>> {
            let (len, tail) = rest.split_first_chunk::<4>()?;
            let len = u32::from_le_bytes(*len);
            if len == NO_TYPE {
                rest = tail;
                return Some(None);
            }
            let (field, tail) = tail.split_at_checked(usize::try_from(len).ok()?)?;
            rest = tail;
            Some(Some(field))
        };
        let type_ = take()?.map(|t| String::from_utf8_lossy(t).into_owned());
        let mut data = BTreeMap::new();
        for key in crate::secret::READ_KEYS {
            if let Some(value) = take()? {
                data.insert(key.to_string(), value.to_vec());
            }
        }
        let sds_name = crate::secret::sds_name(&id.0, &id.1);
        Some(SecretCheck::of_data(&sds_name, type_.as_deref(), &data))
    }
}

const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// The Service an EndpointSlice belongs to (its `kubernetes.io/service-name` label).
pub fn slice_service(slice: &EndpointSlice) -> Option<&String> {
    slice.metadata.labels.as_ref()?.get(SERVICE_NAME_LABEL)
}

/// What Isobar keeps of a Service: its ports, the `projectcontour.io/` annotations that
/// set upstream protocols and circuit breakers, and `status.loadBalancer` (read for
/// Envoy's own Service). Selectors, cluster IPs, labels and the rest never move traffic.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceSummary {
    pub ports: Box<[ServicePortSummary]>,
    /// The `projectcontour.io/` annotations, in key order.
    pub annotations: Box<[(Box<str>, Box<str>)]>,
    pub load_balancer: Option<Box<k8s_openapi::api::core::v1::LoadBalancerStatus>>,
    /// `spec.externalName` of an `ExternalName` Service (a DNS name, no endpoints).
    pub external_name: Option<Box<str>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServicePortSummary {
    pub name: Option<Box<str>>,
    pub port: i32,
    pub app_protocol: Option<Box<str>>,
    /// The port's protocol when it is not TCP (`UDP`, `SCTP`): Envoy cannot send HTTP
    /// to it. `None` for TCP, which is also what an unset protocol means.
    pub not_tcp: Option<Box<str>>,
}

const READ_SERVICE_ANNOTATIONS: &str = "projectcontour.io/";

impl ServiceSummary {
    pub fn of(service: &Service) -> ServiceSummary {
        let ports = service.spec.as_ref().and_then(|s| s.ports.as_deref());
        let annotations = service.metadata.annotations.iter().flatten();
        ServiceSummary {
            ports: ports
                .unwrap_or_default()
                .iter()
                .map(|p| ServicePortSummary {
                    name: p.name.as_deref().map(Into::into),
                    port: p.port,
                    app_protocol: p.app_protocol.as_deref().map(Into::into),
                    not_tcp: p
                        .protocol
                        .as_deref()
                        .filter(|p| *p != "TCP")
                        .map(Into::into),
                })
                .collect(),
            annotations: annotations
                .filter(|(key, _)| key.starts_with(READ_SERVICE_ANNOTATIONS))
                .map(|(key, value)| (key.as_str().into(), value.as_str().into()))
                .collect(),
            external_name: service
                .spec
                .as_ref()
                .filter(|s| s.type_.as_deref() == Some("ExternalName"))
                .map(|s| s.external_name.as_deref().unwrap_or_default().into()),
            load_balancer: service
                .status
                .as_ref()
                .and_then(|s| s.load_balancer.clone())
                .map(Box::new),
        }
    }

    /// The value of a `projectcontour.io/` annotation.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        let found = self.annotations.binary_search_by(|(k, _)| (**k).cmp(key));
        found.ok().map(|i| &*self.annotations[i].1)
    }
}

/// What Isobar keeps of an EndpointSlice: the Service it belongs to, its TCP ports and
/// the addresses of its ready endpoints. A decoded slice (pods, nodes, zones, conditions
/// and Kubernetes' object model around them) is about ten times larger, and none of the
/// rest moves traffic: two slices with equal `SliceEndpoints` route the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SliceEndpoints {
    /// The `kubernetes.io/service-name` label.
    pub service: Option<Box<str>>,
    /// TCP ports in the slice's order: name (`""` when unnamed) and number (`None` when
    /// unset or not a port number).
    pub ports: Box<[(Box<str>, Option<u16>)]>,
    /// The first address of each ready endpoint (`ready` unset counts as ready, as
    /// Kubernetes documents), in the slice's order.
    pub ready: Box<[Box<str>]>,
}

impl SliceEndpoints {
    pub fn of(slice: &EndpointSlice) -> SliceEndpoints {
        // FQDN slices name hosts, which an EDS endpoint cannot be: Envoy would reject
        // the whole ClusterLoadAssignment.
        let addresses = slice.address_type != "FQDN";
        let ports = slice
            .ports
            .iter()
            .flatten()
            .filter(|p| p.protocol.as_deref().unwrap_or("TCP") == "TCP");
        let ready = slice
            .endpoints
            .iter()
            .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true));
        SliceEndpoints {
            service: slice_service(slice).map(|s| s.as_str().into()),
            ports: ports
                .map(|p| {
                    let number = p.port.and_then(|n| u16::try_from(n).ok());
                    (p.name.as_deref().unwrap_or_default().into(), number)
                })
                .collect(),
            ready: ready
                .filter(|_| addresses)
                .filter_map(|e| e.addresses.first())
                .map(|a| a.as_str().into())
                .collect(),
        }
    }
}

impl Objects {
    /// Adds or replaces an object. Returns false when the same content was already there.
    pub fn apply(&mut self, object: Object) -> bool {
        let key = object.key();
        let id = (key.namespace, key.name);
        match object {
            Object::Service(o) => replace(&mut self.services, id, Arc::new(ServiceSummary::of(&o))),
            Object::Secret(o) => {
                let dropped = self.elided.get(&id).or_else(|| self.stripped.get(&id));
                if !self.secrets.insert(id.clone(), &o, dropped) {
                    return false;
                }
                self.elided.remove(&id);
                self.stripped.remove(&id);
                self.secret_checks.insert(id, Arc::default());
                true
            }
            Object::Ingress(o) => replace(&mut self.ingresses, id, o),
            Object::HTTPProxy(o) => replace(&mut self.httpproxies, id, o),
            Object::TLSCertificateDelegation(o) => replace(&mut self.delegations, id, o),
            Object::EndpointSlice(o) => {
                let kept = SliceEndpoints::of(&o);
                // An endpoint change (the common one) keeps the slice's Service: its
                // index entry stays as it is.
                let indexed = self.endpoint_slices.get(&id).map(|old| &old.service);
                if indexed != Some(&kept.service) {
                    self.unindex_slice(&id);
                    if let Some(svc) = &kept.service {
                        self.slices_by_service
                            .entry((id.0.clone(), svc.to_string()))
                            .or_default()
                            .insert(id.1.clone());
                    }
                }
                replace(&mut self.endpoint_slices, id, Arc::new(kept))
            }
        }
    }

    /// Applies an object read again on request: a Secret whose data was elided gets it
    /// back even when its content did not change. Returns whether anything changed.
    pub fn restore(&mut self, object: Object) -> bool {
        let key = object.key();
        let id = (key.namespace.clone(), key.name.clone());
        if self.elided.remove(&id).is_some() || self.stripped.remove(&id).is_some() {
            self.secrets.remove(&id);
        }
        self.apply(object)
    }

    /// After a complete list of `kind` (in `namespace`, or everywhere): deletes the stored
    /// objects of that kind and scope not in `listed`. Returns whether any went.
    pub fn keep_only(
        &mut self,
        kind: Kind,
        namespace: Option<&str>,
        listed: &BTreeSet<NsName>,
    ) -> bool {
        let ids: Vec<NsName> = match kind {
            Kind::Service => self.services.keys().cloned().collect(),
            Kind::EndpointSlice => self.endpoint_slices.keys().cloned().collect(),
            Kind::Secret => self
                .secrets
                .keys()
                .cloned()
                .chain(self.elided.ids())
                .chain(self.stripped.ids())
                .collect(),
            Kind::Ingress => self.ingresses.keys().cloned().collect(),
            Kind::HTTPProxy => self.httpproxies.keys().cloned().collect(),
            Kind::TLSCertificateDelegation => self.delegations.keys().cloned().collect(),
        };
        let mut gone = false;
        for (ns, name) in ids {
            if namespace.is_some_and(|scope| scope != ns)
                || listed.contains(&(ns.clone(), name.clone()))
            {
                continue;
            }
            gone |= self.delete(&ObjectKey::new(kind, ns, name));
        }
        gone
    }

    /// Removes an object. Returns whether it was there.
    pub fn delete(&mut self, key: &ObjectKey) -> bool {
        let id = (key.namespace.clone(), key.name.clone());
        match key.kind {
            Kind::Service => self.services.remove(&id).is_some(),
            Kind::Secret => {
                self.secret_checks.remove(&id);
                let stripped = self.stripped.remove(&id).is_some();
                let elided = self.elided.remove(&id).is_some();
                self.secrets.remove(&id).is_some() || elided || stripped
            }
            Kind::Ingress => self.ingresses.remove(&id).is_some(),
            Kind::HTTPProxy => self.httpproxies.remove(&id).is_some(),
            Kind::TLSCertificateDelegation => self.delegations.remove(&id).is_some(),
            Kind::EndpointSlice => {
                self.unindex_slice(&id);
                self.endpoint_slices.remove(&id).is_some()
            }
        }
    }

    fn unindex_slice(&mut self, id: &NsName) {
        let Some(old) = self.endpoint_slices.get(id) else {
            return;
        };
        if let Some(svc) = &old.service {
            let svc_id = (id.0.clone(), svc.to_string());
            if let Some(set) = self.slices_by_service.get_mut(&svc_id) {
                set.remove(&id.1);
                if set.is_empty() {
                    self.slices_by_service.remove(&svc_id);
                }
            }
        }
    }

    /// The EndpointSlices of one Service, in name order.
    pub fn slices_for_service<'a>(
        &'a self,
        namespace: &str,
        service: &str,
    ) -> impl Iterator<Item = &'a SliceEndpoints> + 'a {
        let names = self
            .slices_by_service
            .get(&(namespace.to_string(), service.to_string()));
        let namespace = namespace.to_string();
        names.into_iter().flatten().filter_map(move |name| {
            self.endpoint_slices
                .get(&(namespace.clone(), name.clone()))
                .map(|s| s.as_ref())
        })
    }

    pub fn service(&self, namespace: &str, name: &str) -> Option<&ServiceSummary> {
        self.services
            .get(&(namespace.to_string(), name.to_string()))
            .map(|s| s.as_ref())
    }

    /// Whether a stored secret can serve as a certificate, CA bundle or CRL; `None` when
    /// there is no such secret. Checked once per stored version.
    ///
    /// Every call is recorded (see [`Objects::take_requested`]); a Secret whose data was
    /// elided answers `None` until its data is applied again.
    pub fn secret_check(&self, namespace: &str, name: &str) -> Option<&SecretCheck> {
        let id = (namespace.to_string(), name.to_string());
        if let Ok(mut requested) = self.requested.lock() {
            requested.insert(id.clone());
        }
        let cell = self.secret_checks.get(&id)?;
        if let Some(check) = cell.get() {
            return Some(check);
        }
        let check = self.secrets.check(&id)?;
        Some(cell.get_or_init(|| check))
    }

    /// Gives this copy its own record of the Secrets asked for: what a dry build on it
    /// asks for is neither seen by nor taken from the store it was copied from.
    pub fn detach_requests(&mut self) {
        self.requested = Arc::default();
    }

    /// The Secrets asked for since the last call.
    pub fn take_requested(&self) -> BTreeSet<NsName> {
        self.requested
            .lock()
            .map(|mut r| std::mem::take(&mut *r))
            .unwrap_or_default()
    }

    /// Of `requested`, the Secrets whose data was elided: they must be fetched again.
    pub fn elided_among(&self, requested: &BTreeSet<NsName>) -> Vec<NsName> {
        requested
            .iter()
            .filter(|id| self.elided.contains(id))
            .cloned()
            .collect()
    }

    /// Drops every Secret not in `requested` (what the last build asked for), keeping its
    /// name and a digest: an unreferenced Secret costs about a hundred bytes.
    /// Returns how many were elided now.
    pub fn elide_unrequested_secrets(&mut self, requested: &BTreeSet<NsName>) -> usize {
        let unrequested: BTreeSet<NsName> = self
            .secrets
            .keys()
            .filter(|id| !requested.contains(*id))
            .cloned()
            .chain(self.stripped.ids().filter(|id| !requested.contains(id)))
            .collect();
        for id in &unrequested {
            let digest = self.secrets.remove(id).or_else(|| self.stripped.remove(id));
            if let Some(digest) = digest {
                self.elided.insert(id, digest);
            }
            self.secret_checks.remove(id);
        }
        // Secrets in use keep their computed check and a digest; the Secret itself is
        // not needed again.
        let checked: Vec<NsName> = self
            .secrets
            .keys()
            .filter(|id| {
                let check = self.secret_checks.get(*id);
                check.is_some_and(|cell| cell.get().is_some())
            })
            .cloned()
            .collect();
        for id in checked {
            if let Some(digest) = self.secrets.remove(&id) {
                self.stripped.insert(&id, digest);
            }
        }
        unrequested.len()
    }

    /// How many objects of each kind are stored.
    pub fn counts(&self) -> BTreeMap<Kind, usize> {
        BTreeMap::from([
            (Kind::Service, self.services.len()),
            (Kind::EndpointSlice, self.endpoint_slices.len()),
            (
                Kind::Secret,
                self.secrets.len() + self.elided.len() + self.stripped.len(),
            ),
            (Kind::Ingress, self.ingresses.len()),
            (Kind::HTTPProxy, self.httpproxies.len()),
            (Kind::TLSCertificateDelegation, self.delegations.len()),
        ])
    }
}

fn replace<T: PartialEq>(map: &mut BTreeMap<NsName, Arc<T>>, id: NsName, value: Arc<T>) -> bool {
    match map.get(&id) {
        Some(old) if **old == *value => false,
        _ => {
            map.insert(id, value);
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(n: usize, version: usize) -> Secret {
        let text = |what: &str| format!("{what} {n} {version} {}", "x".repeat(n * 37 % 1500));
        let mut secret = Secret {
            type_: (!n.is_multiple_of(3)).then(|| "Opaque".to_string()),
            ..Default::default()
        };
        secret.data = Some(BTreeMap::from([
            (
                "tls.crt".to_string(),
                k8s_openapi::ByteString(text("data crt").into_bytes()),
            ),
            (
                "ca.crt".to_string(),
                k8s_openapi::ByteString(text("ca").into_bytes()),
            ),
            ("unread".to_string(), k8s_openapi::ByteString(b"u".to_vec())),
        ]));
        // `stringData` wins over `data` for the same key, as on the API server.
        secret.string_data = Some(BTreeMap::from([(
            "tls.crt".to_string(),
            text("string crt"),
        )]));
        secret
    }

    /// Through replacements and removals the buffer is compacted, holds no more than
    /// twice what is stored, and every stored Secret reads back as it arrived.
    #[test]
    fn the_buffer_keeps_what_each_secret_needs_through_compaction() {
        let mut store = Unchecked::default();
        let id = |n: usize| ("ns".to_string(), format!("s{n}"));
        let mut versions = BTreeMap::new();
        let mut compactions = 0;
        for round in 0..4 {
            for n in 0..150 {
                if round > 0 && n % 5 == round {
                    assert!(store.remove(&id(n)).is_some() == versions.remove(&n).is_some());
                    continue;
                }
                let before = store.bytes.len();
                assert!(store.insert(id(n), &secret(n, round), None));
                compactions += usize::from(store.bytes.len() < before);
                versions.insert(n, round);
                // The same again changes nothing and leaves no bytes behind.
                let len = store.bytes.len();
                assert!(!store.insert(id(n), &secret(n, round), None));
                assert_eq!(store.bytes.len(), len);
            }
            assert!(store.garbage <= store.bytes.len() / 2 || store.bytes.len() <= COMPACT_MIN);
        }
        assert!(compactions > 0, "the test never compacted the buffer");
        assert_eq!(store.len(), versions.len());
        for (n, version) in &versions {
            assert_eq!(
                store.check(&id(*n)),
                Some(SecretCheck::of(&secret(*n, *version))),
                "s{n}"
            );
        }
        // A dropped version is compared by its digest.
        let digest = store.remove(&id(1));
        assert!(!store.insert(id(1), &secret(1, 3), digest));
        assert!(store.insert(id(1), &secret(1, 4), digest));
    }

    /// A slice is found under the Service its label names, through endpoint changes and
    /// a move to another Service.
    #[test]
    fn slices_are_found_by_the_service_they_name() {
        let slice = |service: &str, address: &str| {
            let mut slice = EndpointSlice::default();
            slice.metadata.namespace = Some("ns".to_string());
            slice.metadata.name = Some("s1".to_string());
            slice.metadata.labels = Some(BTreeMap::from([(
                SERVICE_NAME_LABEL.to_string(),
                service.to_string(),
            )]));
            slice.address_type = "IPv4".to_string();
            slice.endpoints = vec![k8s_openapi::api::discovery::v1::Endpoint {
                addresses: vec![address.to_string()],
                ..Default::default()
            }];
            Object::EndpointSlice(Arc::new(slice))
        };
        let ready = |objects: &Objects, service: &str| -> Vec<String> {
            objects
                .slices_for_service("ns", service)
                .flat_map(|s| s.ready.iter().map(|a| a.to_string()))
                .collect()
        };
        let mut objects = Objects::default();
        assert!(objects.apply(slice("a", "10.0.0.1")));
        assert!(objects.apply(slice("a", "10.0.0.2")));
        assert_eq!(ready(&objects, "a"), ["10.0.0.2"]);
        assert!(objects.apply(slice("b", "10.0.0.2")));
        assert!(ready(&objects, "a").is_empty());
        assert_eq!(ready(&objects, "b"), ["10.0.0.2"]);
        assert!(objects.delete(&ObjectKey::new(Kind::EndpointSlice, "ns", "s1")));
        assert!(ready(&objects, "b").is_empty());
    }
}
