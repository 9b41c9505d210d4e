//! What Envoy refused, traced to the objects that caused it.
//!
//! Every published snapshot is recorded with the routing objects changed since the one
//! before, and their versions before the change. When an Envoy refuses an update (a
//! NACK: it then keeps its last good resources of that type and takes no later update of
//! it), its stream reports which snapshot it last took and which it refused; the
//! changes built between the two are what it refused. Those objects go back to the
//! version served before (or out, when new), keep a condition naming Envoy's message,
//! and the refused version is not taken again: a later edit is, and the admission
//! webhook refuses the same shape from then on.
//!
//! Nothing is blamed when the changes cannot be known: a build of more than
//! [`CAPTURE_MAX`] changes, one older than the last [`HISTORY_MAX`] snapshots, or a
//! refusal before the Envoy took anything.

use std::collections::{BTreeMap, VecDeque};

use isobar_sdk::condition::{Condition, ParentRef};
use isobar_sdk::{ConditionType, Object, ObjectKey, Objects, Reason, StatusReport};

use crate::xds::Rejection;

/// The most changes one build may carry and still be traced.
pub const CAPTURE_MAX: usize = 256;
/// How many published snapshots are remembered.
const HISTORY_MAX: usize = 256;
/// How many refused shapes the admission webhook remembers.
const SHAPES_MAX: usize = 4096;

/// An object whose latest version Envoy refused.
#[derive(Debug, Clone)]
pub struct Refused {
    /// The refused version (what a relist sends again, and is not taken).
    pub object: Object,
    pub shape: u64,
    pub message: String,
    /// Whether an earlier version is served in its place.
    pub previous_served: bool,
}

/// The versions, before the change, of the routing objects a build changed (`None`:
/// it did not exist).
type Changes = BTreeMap<ObjectKey, Option<Object>>;

pub struct Rejections {
    /// Published snapshots (`seq`), with what their build changed (`None`: not known).
    history: VecDeque<(u64, Option<Changes>)>,
    /// The newest snapshot no longer in `history`: a range starting before it is not
    /// known.
    floor: u64,
    /// Changes applied since the last published snapshot (`None`: too many to trace).
    pending: Option<Changes>,
    /// Whether changes are recorded (not while putting refused objects back).
    capturing: bool,
    pub refused: BTreeMap<ObjectKey, Refused>,
    /// Shapes refused so far, with Envoy's message, oldest first.
    shapes: BTreeMap<u64, String>,
    order: VecDeque<u64>,
}

impl Default for Rejections {
    fn default() -> Self {
        Rejections {
            history: VecDeque::new(),
            floor: 0,
            pending: Some(Changes::new()),
            capturing: true,
            refused: BTreeMap::new(),
            shapes: BTreeMap::new(),
            order: VecDeque::new(),
        }
    }
}

/// What an object says, without what the API server or a writer adds: the kind, the
/// spec (and anything else at the top level but `status`) and the annotations (an
/// Ingress is configured by them).
pub fn shape(object: &Object) -> u64 {
    let mut value = object.to_json();
    if let Some(map) = value.as_object_mut() {
        let annotations = map
            .get("metadata")
            .and_then(|m| m.get("annotations"))
            .cloned()
            .map(|mut a| {
                if let Some(a) = a.as_object_mut() {
                    a.remove("kubectl.kubernetes.io/last-applied-configuration");
                }
                a
            });
        map.remove("status");
        map.remove("metadata");
        map.insert("kind".to_string(), object.kind().as_str().into());
        map.insert("annotations".to_string(), annotations.into());
    }
    crate::xds::snapshot::digest(value.to_string().as_bytes())
}

/// How a refusal was traced.
#[derive(Debug)]
pub enum Blame {
    /// These objects (their key, the version to serve instead) made the refused update.
    Objects(Vec<(ObjectKey, Option<Object>)>),
    /// A change already traced is among them (another Envoy, or a later update still
    /// carrying it).
    Known,
    /// The changes are not known, or none is a routing object's.
    Unknown,
}

impl Rejections {
    /// Notes that `key` is about to change (call before applying the change).
    pub fn before_change(&mut self, objects: &Objects, key: &ObjectKey) {
        if !self.capturing {
            return;
        }
        if let Some(pending) = &mut self.pending {
            if pending.len() >= CAPTURE_MAX && !pending.contains_key(key) {
                self.pending = None;
                return;
            }
            pending
                .entry(key.clone())
                .or_insert_with(|| objects.object(key).cloned());
        }
    }

    /// Changes applied from here on are not recorded until [`Self::resume`].
    pub fn pause(&mut self) {
        self.capturing = false;
    }

    pub fn resume(&mut self) {
        self.capturing = true;
    }

    /// Everything since the last record is no longer known (a full relist).
    pub fn forget_pending(&mut self) {
        self.pending = None;
    }

    /// Records a published snapshot: `built` when it holds the changes applied since
    /// the last one, else (endpoints only) nothing of them.
    pub fn published(&mut self, seq: u64, built: bool) {
        let changes = if built {
            self.pending.replace(Changes::new())
        } else {
            Some(Changes::new())
        };
        self.history.push_back((seq, changes));
        while self.history.len() > HISTORY_MAX {
            if let Some((seq, _)) = self.history.pop_front() {
                self.floor = seq;
            }
        }
    }

    /// Which objects made the update `rejection` describes.
    pub fn blame(&self, rejection: &Rejection, objects: &Objects) -> Blame {
        if rejection.after == 0 || rejection.after < self.floor {
            return Blame::Unknown;
        }
        let recorded = self
            .history
            .iter()
            .filter(|(seq, _)| *seq > rejection.after && *seq <= rejection.upto)
            .map(|(_, changes)| changes.as_ref());
        self.blame_changes(recorded, objects)
    }

    /// Which objects made the builds since snapshot `after` (published or not): what
    /// made a resource Envoy would refuse, withheld from them.
    pub fn blame_since(&self, after: u64, objects: &Objects) -> Blame {
        if after < self.floor {
            return Blame::Unknown;
        }
        let recorded = self
            .history
            .iter()
            .filter(|(seq, _)| *seq > after)
            .map(|(_, changes)| changes.as_ref())
            .chain([self.pending.as_ref()]);
        self.blame_changes(recorded, objects)
    }

    fn blame_changes<'a>(
        &self,
        recorded: impl Iterator<Item = Option<&'a Changes>>,
        objects: &Objects,
    ) -> Blame {
        let mut before = Changes::new();
        for changes in recorded {
            let Some(changes) = changes else {
                return Blame::Unknown;
            };
            for (key, old) in changes {
                before.entry(key.clone()).or_insert_with(|| old.clone());
            }
        }
        if before.keys().any(|k| self.refused.contains_key(k)) {
            return Blame::Known;
        }
        // A deletion cannot be refused back into existence, nor a change undone since.
        let blamed: Vec<_> = before
            .into_iter()
            .filter(|(key, old)| {
                objects
                    .object(key)
                    .is_some_and(|now| old.as_ref().is_none_or(|old| !old.same(now)))
            })
            .collect();
        if blamed.is_empty() {
            Blame::Unknown
        } else {
            Blame::Objects(blamed)
        }
    }

    /// Records that Envoy refused `object` (the version now in the store) with
    /// `message`.
    pub fn refuse(&mut self, object: Object, message: &str, previous_served: bool) {
        let shape = shape(&object);
        if self.shapes.insert(shape, message.to_string()).is_none() {
            self.order.push_back(shape);
            while self.order.len() > SHAPES_MAX {
                if let Some(old) = self.order.pop_front() {
                    self.shapes.remove(&old);
                }
            }
        }
        self.refused.insert(
            object.key(),
            Refused {
                object,
                shape,
                message: message.to_string(),
                previous_served,
            },
        );
    }

    /// Envoy's message, when Envoy refused an object of this shape before.
    pub fn refused_shape(&self, object: &Object) -> Option<&str> {
        if self.shapes.is_empty() {
            return None;
        }
        self.shapes.get(&shape(object)).map(String::as_str)
    }

    /// Whether `object` is the version of its key Envoy refused (not taken again).
    pub fn is_refused_version(&self, object: &Object) -> bool {
        self.refused
            .get(&object.key())
            .is_some_and(|r| r.shape == shape(object))
    }
}

/// Says on each object Envoy refused why, and what is served instead: its previous
/// version (a warning), or nothing (an error). Kinds of Gateway API's route shape get
/// the same on each parent.
pub fn report_refused(status: &mut StatusReport, refused: &BTreeMap<ObjectKey, Refused>) {
    for (key, r) in refused {
        let message = if r.previous_served {
            format!(
                "Envoy rejected the configuration built from the latest version ({}); the previous version is still served",
                r.message
            )
        } else {
            format!(
                "Envoy rejected the configuration built from this object ({}); it is not served",
                r.message
            )
        };
        let per_parent = key.kind.info().and_then(|i| i.status.per_parent());
        if per_parent.is_some() {
            let gateway = status.gateway(key);
            let mut parents: Vec<ParentRef> = gateway
                .parents
                .iter()
                .map(|p| p.parent_ref.clone())
                .collect();
            if parents.is_empty() {
                parents = parent_refs(&r.object);
            }
            for parent in &parents {
                gateway.set_parent(
                    parent,
                    Condition::new("Accepted", false, "EnvoyRejected", message.clone()),
                );
            }
        }
        if r.previous_served {
            status.warning(
                key,
                ConditionType::SpecError,
                Reason::EnvoyRejected,
                message,
            );
        } else {
            status.error(
                key,
                ConditionType::SpecError,
                Reason::EnvoyRejected,
                message,
            );
        }
    }
}

/// `spec.parentRefs` of a route-shaped object.
fn parent_refs(object: &Object) -> Vec<ParentRef> {
    let json = object.to_json();
    json.get("spec")
        .and_then(|s| s.get("parentRefs"))
        .and_then(|p| serde_json::from_value(p.clone()).ok())
        .unwrap_or_default()
}

use super::{Built, Dirty, Runner};
use crate::provider::Event;

impl Runner {
    /// Traces resources withheld from the builds since snapshot `before` to the objects
    /// whose changes made them: those go back to their previous version (or out, when
    /// new) and say which of Envoy's rules the resource broke. Returns whether any did.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn trace_withheld(
        &self,
        objects: &mut Objects,
        unreadable: &mut BTreeMap<ObjectKey, String>,
        refusals: &mut Rejections,
        withheld: &[crate::xds::validate::Withheld],
        before: Option<u64>,
        synced: &mut bool,
        dirty: &mut Dirty,
    ) -> bool {
        let message = withheld
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        let blamed = match refusals.blame_since(before.unwrap_or(0), objects) {
            Blame::Objects(blamed) => blamed,
            Blame::Known | Blame::Unknown => {
                tracing::warn!(
                    withheld = %message,
                    "resources Envoy would refuse are withheld; no object's change can be traced to them"
                );
                return false;
            }
        };
        let rejection = crate::xds::Rejection {
            xds_type: withheld[0].xds_type,
            after: 0,
            upto: 0,
            message,
        };
        self.revert(
            objects, unreadable, refusals, blamed, &rejection, synced, dirty, None,
        );
        true
    }

    /// Traces a refused update to the objects whose changes made it, puts their served
    /// versions back (or takes them out, when new) and marks them refused; true when
    /// anything was put back (it needs building).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn trace_rejection(
        &self,
        objects: &mut Objects,
        unreadable: &mut BTreeMap<ObjectKey, String>,
        refusals: &mut Rejections,
        rejection: &crate::xds::Rejection,
        synced: &mut bool,
        dirty: &mut Dirty,
        built: Option<&Built>,
    ) -> bool {
        let blamed = match refusals.blame(rejection, objects) {
            Blame::Objects(blamed) => blamed,
            Blame::Known => return false,
            Blame::Unknown => {
                tracing::warn!(
                    xds_type = rejection.xds_type.short(),
                    error = %rejection.message,
                    "envoy rejected an update that no object's change can be traced to"
                );
                return false;
            }
        };
        self.revert(
            objects, unreadable, refusals, blamed, rejection, synced, dirty, built,
        );
        true
    }

    /// Puts each blamed object back to its previous version (or out, when new), noting
    /// that `rejection` refused its latest one.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn revert(
        &self,
        objects: &mut Objects,
        unreadable: &mut BTreeMap<ObjectKey, String>,
        refusals: &mut Rejections,
        blamed: Vec<(ObjectKey, Option<isobar_sdk::Object>)>,
        rejection: &crate::xds::Rejection,
        synced: &mut bool,
        dirty: &mut Dirty,
        built: Option<&Built>,
    ) {
        let links = built.map(|b| &b.links);
        refusals.pause();
        for (key, previous) in blamed {
            let Some(refused) = objects.object(&key).cloned() else {
                continue;
            };
            let served = previous.is_some();
            let event = match previous {
                Some(previous) => Event::Apply(previous),
                None => Event::Delete(key.clone()),
            };
            self.apply(objects, unreadable, refusals, event, synced, dirty, links);
            refusals.refuse(refused, &rejection.message, served);
            tracing::warn!(
                kind = %key.kind,
                ns = %key.namespace,
                name = %key.name,
                xds_type = rejection.xds_type.short(),
                error = %rejection.message,
                served_instead = if served { "the previous version" } else { "nothing" },
                "envoy rejected the configuration built from this object"
            );
        }
        refusals.resume();
        self.metrics
            .envoy_rejected_objects
            .set(i64::try_from(refusals.refused.len()).unwrap_or(i64::MAX));
    }
}

#[cfg(test)]
mod tests;
