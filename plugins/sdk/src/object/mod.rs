//! The objects Isobar watches, keyed by kind, namespace and name.
//!
//! `Objects` is the store every provider fills: synchronous `apply`/`delete`, no I/O,
//! deterministic iteration order. Services, EndpointSlices and Secrets are kept as what
//! routing reads of them ([`ServiceSummary`], [`SliceEndpoints`], a Secret's checked
//! data); every other kind, whatever crate defines it, is kept whole as decoded.

mod secrets;
mod summary;

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Arc, OnceLock};

use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;

pub use crate::kind::{Kind, Resource};
use crate::secret::SecretCheck;
use secrets::{Dropped, Unchecked};
pub use summary::{ServicePortSummary, ServiceSummary, SliceEndpoints, slice_service};

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

/// One decoded object of any kind; cloning it shares it.
#[derive(Clone)]
pub struct Object {
    kind: Kind,
    value: Arc<dyn Dyn>,
}

/// What the store needs of a [`Resource`] whose type it does not know.
trait Dyn: Any + Send + Sync + fmt::Debug {
    fn metadata(&self) -> &ObjectMeta;
    fn same(&self, other: &dyn Dyn) -> bool;
    fn to_json(&self) -> serde_json::Result<serde_json::Value>;
    fn as_any(&self) -> &dyn Any;
    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
}

impl<T: Resource> Dyn for T {
    fn metadata(&self) -> &ObjectMeta {
        Resource::metadata(self)
    }

    fn same(&self, other: &dyn Dyn) -> bool {
        other.as_any().downcast_ref::<T>() == Some(self)
    }

    fn to_json(&self) -> serde_json::Result<serde_json::Value> {
        serde_json::to_value(self)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }
}

impl Object {
    pub fn new<T: Resource>(value: Arc<T>) -> Object {
        Object {
            kind: T::KIND,
            value,
        }
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    pub fn metadata(&self) -> &ObjectMeta {
        self.value.metadata()
    }

    /// The object's key; a missing namespace means `default`, as `kubectl apply` does
    /// (a cluster-scoped kind's objects have none).
    pub fn key(&self) -> ObjectKey {
        let meta = self.metadata();
        ObjectKey::new(
            self.kind,
            self.kind.namespace_of(meta.namespace.as_deref()),
            meta.name.as_deref().unwrap_or_default(),
        )
    }

    /// Whether `key` is the object's key (without making the key).
    pub fn is(&self, key: &ObjectKey) -> bool {
        let meta = self.metadata();
        self.kind == key.kind
            && meta.name.as_deref().unwrap_or_default() == key.name
            && self.kind.namespace_of(meta.namespace.as_deref()) == key.namespace
    }

    /// The object's namespace as its key has it (see [`Object::key`]).
    pub fn namespace(&self) -> &str {
        self.kind.namespace_of(self.metadata().namespace.as_deref())
    }

    /// The object as a `T`, when it is one.
    pub fn get<T: Resource>(&self) -> Option<&T> {
        self.value.as_any().downcast_ref()
    }

    /// The object as a shared `T`, when it is one.
    pub fn arc<T: Resource>(&self) -> Option<Arc<T>> {
        Arc::clone(&self.value).into_any().downcast().ok()
    }

    /// The object as JSON, as it was decoded (what Isobar does not read is gone).
    pub fn to_json(&self) -> serde_json::Value {
        self.value.to_json().unwrap_or_default()
    }

    /// Identifies the decoded object (its allocation): equal while it is the same one.
    pub fn address(&self) -> usize {
        Arc::as_ptr(&self.value).cast::<()>() as usize
    }

    /// Whether both are the same decoded object (not only equal).
    pub fn ptr_eq(&self, other: &Object) -> bool {
        std::ptr::addr_eq(Arc::as_ptr(&self.value), Arc::as_ptr(&other.value))
    }

    /// Whether both say the same.
    pub fn same(&self, other: &Object) -> bool {
        self.kind == other.kind && self.value.same(&*other.value)
    }
}

impl fmt::Debug for Object {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.value, f)
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
    /// Every other kind, whole: by kind, then namespace and name.
    kinds: BTreeMap<Kind, BTreeMap<NsName, Object>>,
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

static NONE: BTreeMap<NsName, Object> = BTreeMap::new();

impl Objects {
    /// The stored objects of `kind` (other than Services, EndpointSlices and Secrets,
    /// which are kept as summaries), in namespace/name order.
    pub fn of_kind(&self, kind: Kind) -> &BTreeMap<NsName, Object> {
        self.kinds.get(&kind).unwrap_or(&NONE)
    }

    /// Every stored `T`, in namespace/name order.
    pub fn all<T: Resource>(&self) -> impl Iterator<Item = (&NsName, &T)> {
        let all = self.of_kind(T::KIND).iter();
        all.filter_map(|(id, o)| Some((id, o.get::<T>()?)))
    }

    /// The stored `T`s of one namespace, in name order.
    pub fn in_namespace<'a, T: Resource>(
        &'a self,
        namespace: &'a str,
    ) -> impl Iterator<Item = (&'a NsName, &'a T)> + 'a {
        let from = (namespace.to_string(), String::new());
        let all = self.of_kind(T::KIND).range(from..);
        all.take_while(move |((ns, _), _)| ns == namespace)
            .filter_map(|(id, o)| Some((id, o.get::<T>()?)))
    }

    /// One stored `T` by namespace and name.
    pub fn get<T: Resource>(&self, namespace: &str, name: &str) -> Option<&T> {
        let id = (namespace.to_string(), name.to_string());
        self.kinds.get(&T::KIND)?.get(&id)?.get()
    }

    /// One stored object (not a Service, EndpointSlice or Secret) by key.
    pub fn object(&self, key: &ObjectKey) -> Option<&Object> {
        let id = (key.namespace.clone(), key.name.clone());
        self.kinds.get(&key.kind)?.get(&id)
    }

    /// Keeps only the objects of `kind` for which `keep` holds.
    pub fn retain(&mut self, kind: Kind, mut keep: impl FnMut(&ObjectKey) -> bool) {
        if let Some(stored) = self.kinds.get_mut(&kind) {
            stored.retain(|(ns, name), _| keep(&ObjectKey::new(kind, ns, name)));
        }
    }

    /// Adds or replaces an object. Returns false when the same content was already there.
    pub fn apply(&mut self, object: Object) -> bool {
        let key = object.key();
        let kind = key.kind;
        let id = (key.namespace, key.name);
        if let Some(o) = object.get::<Service>() {
            return replace(&mut self.services, id, Arc::new(ServiceSummary::of(o)));
        }
        if let Some(o) = object.get::<Secret>() {
            let dropped = self.elided.get(&id).or_else(|| self.stripped.get(&id));
            if !self.secrets.insert(id.clone(), o, dropped) {
                return false;
            }
            self.elided.remove(&id);
            self.stripped.remove(&id);
            self.secret_checks.insert(id, Arc::default());
            return true;
        }
        if let Some(o) = object.get::<EndpointSlice>() {
            let kept = SliceEndpoints::of(o);
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
            return replace(&mut self.endpoint_slices, id, Arc::new(kept));
        }
        let stored = self.kinds.entry(kind).or_default();
        match stored.get(&id) {
            Some(old) if old.same(&object) => false,
            _ => {
                stored.insert(id, object);
                true
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
        let ids: Vec<NsName> = if kind == Kind::Service {
            self.services.keys().cloned().collect()
        } else if kind == Kind::EndpointSlice {
            self.endpoint_slices.keys().cloned().collect()
        } else if kind == Kind::Secret {
            let stored = self.secrets.keys().cloned();
            stored
                .chain(self.elided.ids())
                .chain(self.stripped.ids())
                .collect()
        } else {
            let stored = self.kinds.get(&kind);
            stored.into_iter().flat_map(|m| m.keys().cloned()).collect()
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
        if key.kind == Kind::Service {
            self.services.remove(&id).is_some()
        } else if key.kind == Kind::Secret {
            self.secret_checks.remove(&id);
            let stripped = self.stripped.remove(&id).is_some();
            let elided = self.elided.remove(&id).is_some();
            self.secrets.remove(&id).is_some() || elided || stripped
        } else if key.kind == Kind::EndpointSlice {
            self.unindex_slice(&id);
            self.endpoint_slices.remove(&id).is_some()
        } else {
            let stored = self.kinds.get_mut(&key.kind);
            stored.is_some_and(|m| m.remove(&id).is_some())
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
        let mut counts = BTreeMap::from([
            (Kind::Service, self.services.len()),
            (Kind::EndpointSlice, self.endpoint_slices.len()),
            (
                Kind::Secret,
                self.secrets.len() + self.elided.len() + self.stripped.len(),
            ),
        ]);
        counts.extend(self.kinds.iter().map(|(kind, m)| (*kind, m.len())));
        counts
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
mod tests;
