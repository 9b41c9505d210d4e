//! Provider events applied to the object store: what each changes, and what the next
//! build must rebuild for it.

use std::collections::BTreeMap;

use isobar_sdk::api::EndpointSlice;
use isobar_sdk::object::slice_service;
use isobar_sdk::{Kind, ObjectKey, Objects};

use super::links::{Links, service_referrers};
use super::rejected::Rejections;
use super::{Dirty, Runner};
use crate::provider::Event;

impl Runner {
    /// Applies one event; returns whether anything changed, and records in `dirty`
    /// whether only EndpointSlices did (and of which Services).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn apply(
        &self,
        objects: &mut Objects,
        unreadable: &mut BTreeMap<ObjectKey, String>,
        refusals: &mut Rejections,
        event: Event,
        synced: &mut bool,
        dirty: &mut Dirty,
        links: Option<&Links>,
    ) -> bool {
        let key = match &event {
            Event::Apply(object) => Some(object.key()),
            Event::Delete(key) => Some(key.clone()),
            _ => None,
        };
        if let Some(key) = key.as_ref().filter(|k| self.pipeline.routes(k.kind)) {
            refusals.before_change(objects, key);
        }
        if dirty.full {
            // Everything is rebuilt anyway: what each object reaches is neither worked out
            // nor recorded (during the first list, tens of thousands of keys).
            return self.apply_event(objects, unreadable, refusals, event, synced);
        }
        // For an EndpointSlice: its key, and the Services it belongs to before and after.
        let slice = match &event {
            Event::Apply(object) => object
                .get::<EndpointSlice>()
                .map(|new| (object.key(), slice_service(new).cloned())),
            Event::Delete(key) if key.kind == Kind::EndpointSlice => Some((key.clone(), None)),
            _ => None,
        };
        let old_service = slice.as_ref().and_then(|(key, _)| {
            let id = (key.namespace.clone(), key.name.clone());
            let old = objects.endpoint_slices.get(&id)?;
            old.service.as_deref().map(str::to_string)
        });
        let secret = key.clone().filter(|k| k.kind == Kind::Secret);
        let routing = key.clone().filter(|k| self.pipeline.routes(k.kind));
        // A Service changes only the routes naming it, unless it is Envoy's own (its
        // address goes into every status).
        let service = key.filter(|k| k.kind == Kind::Service).filter(|key| {
            self.statuses.as_ref().is_none_or(|out| {
                (&*out.envoy_service.0, &*out.envoy_service.1) != (&*key.namespace, &*key.name)
            })
        });
        let was_unreadable = slice
            .as_ref()
            .map(|(key, _)| key)
            .or(routing.as_ref())
            .or(secret.as_ref())
            .or(service.as_ref())
            .is_some_and(|key| unreadable.contains_key(key) || refusals.refused.contains_key(key));
        let changed = self.apply_event(objects, unreadable, refusals, event, synced);
        if !changed {
            return false;
        }
        match (slice, routing) {
            // An object that was unreadable or refused has a status to clear: a full build.
            _ if was_unreadable => dirty.full = true,
            (Some((key, new_service)), _) => {
                for service in [old_service, new_service].into_iter().flatten() {
                    dirty.services.insert((key.namespace.clone(), service));
                }
            }
            (None, Some(key)) => {
                dirty.routing.insert(key);
            }
            (None, None) => match (secret, service) {
                (Some(key), _) => {
                    dirty.secrets.insert((key.namespace, key.name));
                }
                // A plugin that is not local may read any Service.
                (None, Some(_)) if !self.pipeline.local() => dirty.full = true,
                (None, Some(key)) => {
                    let referrers = service_referrers(
                        objects,
                        &self.pipeline,
                        links,
                        &key.namespace,
                        &key.name,
                    );
                    if referrers.is_empty() {
                        tracing::debug!(service = %key, "a Service no route names changed; nothing to build");
                    }
                    dirty.routing.extend(referrers);
                }
                (None, None) => dirty.full = true,
            },
        }
        true
    }

    pub(super) fn apply_event(
        &self,
        objects: &mut Objects,
        unreadable: &mut BTreeMap<ObjectKey, String>,
        refusals: &mut Rejections,
        event: Event,
        synced: &mut bool,
    ) -> bool {
        match event {
            Event::Apply(object) => {
                if refusals.is_refused_version(&object) {
                    // What Envoy refused, sent again (a relist): the version served stays.
                    return false;
                }
                let key = object.key();
                let readable = unreadable.remove(&key).is_some();
                let cleared = refusals.refused.remove(&key).is_some();
                objects.apply(object) || readable || cleared
            }
            Event::Fetched(object) => objects.restore(object),
            Event::Delete(key) => {
                let readable = unreadable.remove(&key).is_some();
                let cleared = refusals.refused.remove(&key).is_some();
                objects.delete(&key) || readable || cleared
            }
            Event::Listed {
                kind,
                namespace,
                keys,
            } => {
                let gone = objects.keep_only(kind, namespace.as_deref(), &keys);
                let listed = |key: &ObjectKey| {
                    key.kind != kind
                        || namespace.as_ref().is_some_and(|ns| *ns != key.namespace)
                        || keys.contains(&(key.namespace.clone(), key.name.clone()))
                };
                unreadable.retain(|key, _| listed(key));
                refusals.refused.retain(|key, _| listed(key));
                if gone && self.pipeline.routes(kind) {
                    // What went is not recorded one by one.
                    refusals.forget_pending();
                }
                gone
            }
            Event::Unreadable(key, error) => {
                unreadable.insert(key, error);
                true
            }
            Event::Synced => {
                *synced = true;
                true
            }
            Event::Problem(_) => {
                self.metrics.manifest_errors.inc();
                false
            }
        }
    }
}
