//! The pipeline runner: applies provider events to the object store, waits out the
//! hold-off, builds, translates, and publishes a snapshot when its content changed.
//! Nothing is published before the provider has synced, so Envoy never sees a partial
//! configuration.

mod build;
pub mod inbox;
pub mod leader;
pub mod links;
pub mod pipeline;
pub mod rejected;
pub mod review;
pub mod status;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use std::collections::{BTreeMap, BTreeSet};

use isobar_sdk::api::EndpointSlice;
use isobar_sdk::object::slice_service;

use isobar_sdk::{Kind, ObjectKey, Objects, StatusReport};

use crate::metrics::Metrics;
use crate::provider::Event;
use crate::runner::links::{Links, service_referrers};
use crate::runner::pipeline::Pipeline;
use crate::runner::rejected::{Blame, Rejections};
use crate::runner::status::Desired;
use crate::xds::{Encoder, EnvoySettings, Snapshot};

pub struct Runner {
    pub pipeline: Pipeline,
    pub settings: EnvoySettings,
    pub holdoff: Duration,
    pub holdoff_max: Duration,
    pub metrics: Arc<Metrics>,
    pub snapshots: watch::Sender<Option<Arc<Snapshot>>>,
    /// Where each build's wanted statuses go (Kubernetes provider), with what decides
    /// `status.loadBalancer`.
    pub statuses: Option<StatusOutput>,
    /// Requests from the debug endpoint for the IR of the current objects.
    pub debug: Option<mpsc::Receiver<inbox::IrRequest>>,
    /// Reviews from the admission webhook, answered against the current objects.
    pub admission: Option<mpsc::Receiver<inbox::AdmissionRequest>>,
    /// Where to ask for Secrets whose data was dropped (a provider that can fetch them
    /// again); with it, unreferenced Secrets keep no data.
    pub hydrate: Option<mpsc::Sender<Vec<(String, String)>>>,
    /// Updates Envoy refused, from the xDS streams: traced to the objects that made
    /// them (see `rejected.rs`).
    pub rejections: Option<mpsc::UnboundedReceiver<crate::xds::Rejection>>,
    /// Resources the last builds withheld because Envoy would refuse them, for the
    /// runner to trace to the objects that made them.
    pub withheld: std::sync::Mutex<Vec<crate::xds::validate::Withheld>>,
    /// The HTTP listeners whose routes the last full build split into shards (a full
    /// build keeps them split down to half the threshold), with their shard counts.
    pub sharded: std::sync::Mutex<std::collections::BTreeMap<String, usize>>,
}

/// How long a build waits for dropped Secrets to be fetched before serving without them.
const HYDRATE_MAX: std::time::Duration = std::time::Duration::from_secs(5);
/// How soon a held build is retried when nothing arrives.
const HYDRATE_RETRY: std::time::Duration = std::time::Duration::from_millis(250);

/// How long a review waits for dropped Secrets before it is judged without them (well
/// inside the webhook's `timeoutSeconds`).
const REVIEW_WAIT_MAX: Duration = Duration::from_secs(2);

/// A change that reaches more routing objects than this (or a quarter of them, if more)
/// is built in full rather than spliced in.
const SPLICE_MAX: usize = 256;
/// Endpoint updates of up to this many Services run on the runtime's worker: they take
/// microseconds, less than handing the worker over (`block_in_place`) would.
const ENDPOINTS_INLINE_MAX: usize = 64;

/// What changed since the last build.
#[derive(Default)]
struct Dirty {
    /// Something other than routing objects, Services (but Envoy's), Secrets and
    /// EndpointSlices, or no build yet: everything is rebuilt (and the sets below are
    /// not kept).
    full: bool,
    /// The HTTPProxies and Ingresses that changed, and those naming a Service that
    /// changed: rebuilt with what they reach.
    routing: BTreeSet<ObjectKey>,
    /// The Services (namespace, name) whose EndpointSlices changed.
    services: BTreeSet<(String, String)>,
    /// The Secrets (namespace, name) that changed.
    secrets: BTreeSet<(String, String)>,
}

impl Dirty {
    /// Whether the pipeline must run (not only EDS be updated): something changed that
    /// the last build read. A Secret no build asked for cannot change any output.
    fn pipeline(&self, built: Option<&Built>) -> bool {
        self.full || !self.routing.is_empty() || self.secrets_matter(built)
    }

    /// Whether a changed Secret is one the last build (or a change spliced since) asked
    /// for, so that everything must be rebuilt.
    fn secrets_matter(&self, built: Option<&Built>) -> bool {
        match built {
            Some(Built {
                secrets_used: Some(used),
                ..
            }) => self.secrets.iter().any(|s| used.contains(s)),
            Some(_) => !self.secrets.is_empty(),
            None => !self.secrets.is_empty(),
        }
    }
}

/// What the last build keeps for the next: its encoded vhosts and the links between
/// routing objects.
struct Built {
    encoder: Encoder,
    links: Links,
    /// Every Secret a build asked for (found or not) since the last full build: only a
    /// change to one of these can change the output. Only kept when every plugin is
    /// local (a policy reading the whole inventory could read any Secret).
    secrets_used: Option<BTreeSet<(String, String)>>,
}

/// A review being answered, and since when.
struct Waiting {
    review: inbox::AdmissionRequest,
    started: Instant,
}

pub struct StatusOutput {
    pub desired: watch::Sender<Option<Arc<Desired>>>,
    /// `ingress-status-address`.
    pub fixed_address: String,
    /// The Envoy Service (namespace, name).
    pub envoy_service: (String, String),
}

impl Runner {
    pub async fn run(mut self, mut events: mpsc::Receiver<Event>) {
        let mut debug = self.debug.take();
        let mut admission = self.admission.take();
        let mut rejections = self.rejections.take();
        // What Envoy refused, and what each published snapshot changed.
        let mut refusals = Rejections::default();
        let mut admissions = review::Admissions::default();
        let mut objects = Objects::default();
        let mut synced = false;
        // When the first unbuilt change arrived, and the latest one.
        let mut pending: Option<(Instant, Instant)> = None;
        // When the last build ran and the last change arrived: a change after a quiet
        // moment (no change and no build for a quarter of the hold-off, or no build for
        // the max hold-off, Contour's rule) is built at once; one during a burst waits.
        let mut last_build: Option<Instant> = None;
        let mut last_change: Option<Instant> = None;
        // The pending changes started after a quiet moment: build them now.
        let mut due_now = false;
        let mut last_status = StatusReport::default();
        // While a build waits for elided Secrets to be fetched again: since when.
        let mut holding: Option<Instant> = None;
        // Objects whose latest version did not decode, with why.
        let mut unreadable: BTreeMap<ObjectKey, String> = BTreeMap::new();
        // What changed since the last build, and that build's clusters.
        // The first build is a full one: what each listed object reaches is not recorded.
        let mut dirty = Dirty {
            full: true,
            ..Dirty::default()
        };
        let mut built: Option<Built> = None;
        // Reviews waiting for dropped Secrets to be fetched again.
        let mut waiting_reviews: Vec<Waiting> = Vec::new();
        loop {
            let review_deadline = waiting_reviews
                .iter()
                .map(|w| w.started + REVIEW_WAIT_MAX)
                .min();
            let deadline = pending.filter(|_| synced).map(|(first, last)| {
                if due_now {
                    first
                } else {
                    let at = |from: Instant, after| from.checked_add(after).unwrap_or(from);
                    at(last, self.holdoff).min(at(first, self.holdoff_max))
                }
            });
            let event = tokio::select! {
                event = events.recv() => event,
                () = until(deadline), if deadline.is_some() => {
                    let since = pending.take().map(|(first, _)| first);
                    due_now = false;
                    let changed = std::mem::take(&mut dirty);
                    // On the worker: a change spliced in takes well under a millisecond,
                    // less than handing the worker over would; a full build hands it over.
                    let before = self.published_seq();
                    let held = self.rebuild(&mut objects, &unreadable, &refusals.refused, &mut last_status, since, &mut holding, &mut built, &changed);
                    if let Some(seq) = self.published_seq().filter(|s| Some(*s) != before) {
                        refusals.published(seq, true);
                    }
                    let withheld = self.withheld.lock().map(|mut w| std::mem::take(&mut *w)).unwrap_or_default();
                    if !withheld.is_empty() && self.trace_withheld(&mut objects, &mut unreadable, &mut refusals, &withheld, before, &mut synced, &mut dirty) {
                        // Built again at once, without them.
                        let now = Instant::now();
                        due_now = true;
                        pending = Some((now, now));
                    }
                    self.metrics.envoy_rejected_objects.set(i64::try_from(refusals.refused.len()).unwrap_or(i64::MAX));
                    last_build = Some(Instant::now());
                    if held {
                        dirty.full = true;
                        // Try again shortly even if nothing arrives (the fetch may fail).
                        let at = Instant::now() + HYDRATE_RETRY;
                        pending = Some((at, at.checked_sub(self.holdoff).unwrap_or(at)));
                    } else if pending.is_none() && self.pipeline.unfinished() {
                        // Objects a policy had no time to judge: judged by the next build,
                        // after the hold-off, whether or not anything changes.
                        dirty.full = true;
                        let now = Instant::now();
                        pending = Some((now, now));
                    }
                    continue;
                }
                Some(reply) = async { debug.as_mut()?.recv().await }, if debug.is_some() => {
                    // The debug endpoint: the IR of the current objects, built on demand.
                    let ir = tokio::task::block_in_place(|| self.pipeline.build(&objects).ir);
                    let _ = reply.send(Arc::new(ir));
                    continue;
                }
                Some(rejection) = async { rejections.as_mut()?.recv().await }, if rejections.is_some() => {
                    if self.trace_rejection(&mut objects, &mut unreadable, &mut refusals, &rejection, &mut synced, &mut dirty, built.as_ref()) {
                        // Put back now: until then the Envoy takes no update of the type.
                        let now = Instant::now();
                        due_now = true;
                        pending = Some(pending.map_or((now, now), |(first, _)| (first, now)));
                    }
                    continue;
                }
                Some(review) = async { admission.as_mut()?.recv().await }, if admission.is_some() => {
                    if let Some(message) = review.candidate.object.as_ref().and_then(|o| refusals.refused_shape(o)) {
                        let _ = review.reply.send(inbox::Verdict::deny(
                            format!("Envoy rejected the configuration built from an object of this shape before: {message}"),
                            Vec::new(),
                        ));
                    } else if synced {
                        let waiting = Waiting { review, started: Instant::now() };
                        self.judge(&mut admissions, &objects, waiting, &mut waiting_reviews);
                    } else {
                        let _ = review.reply.send(inbox::Verdict::deny(
                            "isobar is not ready to review objects (still reading the cluster)".to_string(),
                            Vec::new(),
                        ));
                    }
                    continue;
                }
                () = tokio::time::sleep_until(review_deadline.unwrap_or_else(Instant::now).into()), if review_deadline.is_some() => {
                    // Secrets asked for did not arrive in time: judge without them.
                    for waiting in std::mem::take(&mut waiting_reviews) {
                        self.judge(&mut admissions, &objects, waiting, &mut Vec::new());
                    }
                    continue;
                }
            };
            let Some(event) = event else { return };
            let arrived = Instant::now();
            let links = built.as_ref().map(|b| &b.links);
            let mut changed = self.apply(
                &mut objects,
                &mut unreadable,
                &mut refusals,
                event,
                &mut synced,
                &mut dirty,
                links,
            );
            while let Ok(event) = events.try_recv() {
                changed |= self.apply(
                    &mut objects,
                    &mut unreadable,
                    &mut refusals,
                    event,
                    &mut synced,
                    &mut dirty,
                    links,
                );
            }
            // Reviews waiting for Secrets are judged again as soon as anything arrives.
            for waiting in std::mem::take(&mut waiting_reviews) {
                self.judge(&mut admissions, &objects, waiting, &mut waiting_reviews);
            }
            // Only endpoints changed, and nothing else waits to be built: the pipeline's
            // output cannot change, so only EDS is updated, now (no hold-off: it costs
            // microseconds per Service).
            if changed
                && synced
                && pending.is_none()
                && holding.is_none()
                && !dirty.pipeline(built.as_ref())
                && let Some(built) = &built
            {
                let services = std::mem::take(&mut dirty.services);
                let secrets = std::mem::take(&mut dirty.secrets);
                if !secrets.is_empty() {
                    tracing::debug!(
                        secrets = secrets.len(),
                        "changed secrets no build uses; nothing to build"
                    );
                }
                let before = self.published_seq();
                if services.len() > ENDPOINTS_INLINE_MAX {
                    tokio::task::block_in_place(|| {
                        self.publish_endpoints(&built.encoder, &objects, &services, arrived);
                    });
                } else if !services.is_empty() {
                    self.publish_endpoints(&built.encoder, &objects, &services, arrived);
                }
                if let Some(seq) = self.published_seq().filter(|s| Some(*s) != before) {
                    refusals.published(seq, false);
                }
                continue;
            }
            if changed {
                let now = Instant::now();
                let gap = self.holdoff / 4;
                let since = |at: Option<Instant>, d: Duration| {
                    at.is_none_or(|at| now.duration_since(at) >= d)
                };
                let quiet = (since(last_change, gap) && since(last_build, gap))
                    || since(last_build, self.holdoff_max);
                last_change = Some(now);
                if pending.is_none() && quiet && synced {
                    due_now = true;
                }
                pending = Some(pending.map_or((now, now), |(first, _)| (first, now)));
            }
        }
    }

    /// The `seq` of the snapshot published last.
    fn published_seq(&self) -> Option<u64> {
        self.snapshots.borrow().as_ref().map(|s| s.seq)
    }

    /// Traces a refused update to the objects whose changes made it, puts their served
    /// versions back (or takes them out, when new) and marks them refused; true when
    /// anything was put back (it needs building).
    /// Traces resources withheld from the builds since snapshot `before` to the objects
    /// whose changes made them: those go back to their previous version (or out, when
    /// new) and say which of Envoy's rules the resource broke. Returns whether any did.
    #[allow(clippy::too_many_arguments)]
    fn trace_withheld(
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

    #[allow(clippy::too_many_arguments)]
    fn trace_rejection(
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
    fn revert(
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

    /// Answers a review, or, when it needs Secrets whose data was dropped and there is
    /// time, asks for them and puts it in `waiting`.
    fn judge(
        &self,
        admissions: &mut review::Admissions,
        objects: &Objects,
        review: Waiting,
        waiting: &mut Vec<Waiting>,
    ) {
        use review::Outcome;
        let can_wait = self.hydrate.is_some() && review.started.elapsed() < REVIEW_WAIT_MAX;
        let outcome = tokio::task::block_in_place(|| {
            admissions.review(&self.pipeline, objects, &review.review.candidate, can_wait)
        });
        match outcome {
            Outcome::Answer(verdict) => {
                self.metrics
                    .admission(verdict.allowed, review.started.elapsed());
                let _ = review.review.reply.send(verdict);
            }
            Outcome::NeedsSecrets(secrets) => {
                tracing::debug!(
                    secrets = secrets.len(),
                    "a review needs secrets whose data was dropped; fetching them first"
                );
                if let Some(hydrate) = &self.hydrate {
                    let _ = hydrate.try_send(secrets);
                }
                waiting.push(review);
            }
        }
    }

    /// Applies one event; returns whether anything changed, and records in `dirty`
    /// whether only EndpointSlices did (and of which Services).
    #[allow(clippy::too_many_arguments)]
    fn apply(
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

    fn apply_event(
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

/// Resolves at `deadline`; at once when it has passed (a timer would add up to a
/// millisecond of its own resolution to every change with the hold-off at zero).
async fn until(deadline: Option<Instant>) {
    if let Some(at) = deadline.filter(|at| *at > Instant::now()) {
        tokio::time::sleep_until(at.into()).await;
    }
}
