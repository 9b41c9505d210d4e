//! The pipeline runner: applies provider events to the object store, waits out the
//! hold-off, builds, translates, and publishes a snapshot when its content changed.
//! Nothing is published before the provider has synced, so Envoy never sees a partial
//! configuration.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use std::collections::{BTreeMap, BTreeSet};

use isobar_sdk::object::slice_service;

use isobar_sdk::{ConditionType, Kind, Object, ObjectKey, Objects, Reason, StatusReport};

use crate::metrics::{KindLabel, Metrics};
use crate::pipeline::Pipeline;
use crate::provider::Event;
use crate::status::Desired;
use crate::xds::{ClustersByService, EnvoySettings, Snapshot, XdsType, translate};

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
    pub debug: Option<mpsc::Receiver<crate::debug::IrRequest>>,
    /// Reviews from the admission webhook, answered against the current objects.
    pub admission: Option<mpsc::Receiver<crate::admission::Request>>,
    /// Where to ask for Secrets whose data was dropped (a provider that can fetch them
    /// again); with it, unreferenced Secrets keep no data.
    pub hydrate: Option<mpsc::Sender<Vec<(String, String)>>>,
}

/// How long a build waits for dropped Secrets to be fetched before serving without them.
const HYDRATE_MAX: std::time::Duration = std::time::Duration::from_secs(5);
/// How soon a held build is retried when nothing arrives.
const HYDRATE_RETRY: std::time::Duration = std::time::Duration::from_millis(250);

/// How long a review waits for dropped Secrets before it is judged without them (well
/// inside the webhook's `timeoutSeconds`).
const REVIEW_WAIT_MAX: Duration = Duration::from_secs(2);

/// What changed since the last build.
#[derive(Default)]
struct Dirty {
    /// Something other than EndpointSlices: the pipeline must run.
    full: bool,
    /// The Services (namespace, name) whose EndpointSlices changed.
    services: BTreeSet<(String, String)>,
}

/// A review being answered, and since when.
struct Waiting {
    review: crate::admission::Request,
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
        let mut admissions = crate::admission::Admissions::default();
        let mut objects = Objects::default();
        let mut synced = false;
        // When the first unbuilt change arrived, and the latest one.
        let mut pending: Option<(Instant, Instant)> = None;
        let mut last_status = StatusReport::default();
        // While a build waits for elided Secrets to be fetched again: since when.
        let mut holding: Option<Instant> = None;
        // Objects whose latest version did not decode, with why.
        let mut unreadable: BTreeMap<ObjectKey, String> = BTreeMap::new();
        // What changed since the last build, and that build's clusters.
        let mut dirty = Dirty::default();
        let mut built: Option<ClustersByService> = None;
        // Reviews waiting for dropped Secrets to be fetched again.
        let mut waiting_reviews: Vec<Waiting> = Vec::new();
        loop {
            let review_deadline = waiting_reviews
                .iter()
                .map(|w| w.started + REVIEW_WAIT_MAX)
                .min();
            let deadline = pending
                .filter(|_| synced)
                .map(|(first, last)| (last + self.holdoff).min(first + self.holdoff_max));
            let event = tokio::select! {
                event = events.recv() => event,
                () = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now).into()), if deadline.is_some() => {
                    let since = pending.take().map(|(first, _)| first);
                    let held;
                    (last_status, held) = tokio::task::block_in_place(|| {
                        self.rebuild(&mut objects, &unreadable, &last_status, since, &mut holding, &mut built)
                    });
                    dirty = Dirty::default();
                    if held {
                        // Try again shortly even if nothing arrives (the fetch may fail).
                        let at = Instant::now() + HYDRATE_RETRY;
                        pending = Some((at, at.checked_sub(self.holdoff).unwrap_or(at)));
                    }
                    continue;
                }
                Some(reply) = async { debug.as_mut()?.recv().await }, if debug.is_some() => {
                    // The debug endpoint: the IR of the current objects, built on demand.
                    let ir = tokio::task::block_in_place(|| self.pipeline.build(&objects).ir);
                    let _ = reply.send(Arc::new(ir));
                    continue;
                }
                Some(review) = async { admission.as_mut()?.recv().await }, if admission.is_some() => {
                    if synced {
                        let waiting = Waiting { review, started: Instant::now() };
                        self.judge(&mut admissions, &objects, waiting, &mut waiting_reviews);
                    } else {
                        let _ = review.reply.send(crate::admission::Verdict::deny(
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
            let mut changed = self.apply(
                &mut objects,
                &mut unreadable,
                event,
                &mut synced,
                &mut dirty,
            );
            while let Ok(event) = events.try_recv() {
                changed |= self.apply(
                    &mut objects,
                    &mut unreadable,
                    event,
                    &mut synced,
                    &mut dirty,
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
                && !dirty.full
                && let Some(clusters) = &built
            {
                let services = std::mem::take(&mut dirty.services);
                tokio::task::block_in_place(|| {
                    self.publish_endpoints(clusters, &objects, &services, arrived);
                });
                continue;
            }
            if changed {
                let now = Instant::now();
                pending = Some(pending.map_or((now, now), |(first, _)| (first, now)));
            }
        }
    }

    /// Answers a review, or, when it needs Secrets whose data was dropped and there is
    /// time, asks for them and puts it in `waiting`.
    fn judge(
        &self,
        admissions: &mut crate::admission::Admissions,
        objects: &Objects,
        review: Waiting,
        waiting: &mut Vec<Waiting>,
    ) {
        use crate::admission::Outcome;
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
    fn apply(
        &self,
        objects: &mut Objects,
        unreadable: &mut BTreeMap<ObjectKey, String>,
        event: Event,
        synced: &mut bool,
        dirty: &mut Dirty,
    ) -> bool {
        // For an EndpointSlice: its key, and the Services it belongs to before and after.
        let slice = match &event {
            Event::Apply(object @ Object::EndpointSlice(new)) => {
                Some((object.key(), slice_service(new).cloned()))
            }
            Event::Delete(key) if key.kind == Kind::EndpointSlice => Some((key.clone(), None)),
            _ => None,
        };
        let old_service = slice.as_ref().and_then(|(key, _)| {
            let id = (key.namespace.clone(), key.name.clone());
            slice_service(objects.endpoint_slices.get(&id)?).cloned()
        });
        let was_unreadable = slice
            .as_ref()
            .is_some_and(|(key, _)| unreadable.contains_key(key));
        let changed = self.apply_event(objects, unreadable, event, synced);
        if !changed {
            return false;
        }
        match slice {
            // A slice that was unreadable has a status to clear: a full build.
            Some((key, new_service)) if !was_unreadable => {
                for service in [old_service, new_service].into_iter().flatten() {
                    dirty.services.insert((key.namespace.clone(), service));
                }
            }
            _ => dirty.full = true,
        }
        true
    }

    fn apply_event(
        &self,
        objects: &mut Objects,
        unreadable: &mut BTreeMap<ObjectKey, String>,
        event: Event,
        synced: &mut bool,
    ) -> bool {
        match event {
            Event::Apply(object) => {
                let readable = unreadable.remove(&object.key()).is_some();
                objects.apply(object) || readable
            }
            Event::Fetched(object) => objects.restore(object),
            Event::Delete(key) => {
                let readable = unreadable.remove(&key).is_some();
                objects.delete(&key) || readable
            }
            Event::Listed {
                kind,
                namespace,
                keys,
            } => {
                let gone = objects.keep_only(kind, namespace.as_deref(), &keys);
                unreadable.retain(|key, _| {
                    key.kind != kind
                        || namespace.as_ref().is_some_and(|ns| *ns != key.namespace)
                        || keys.contains(&(key.namespace.clone(), key.name.clone()))
                });
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

    /// One build; returns the status report for the next comparison, and whether the
    /// build was held back (not published) waiting for elided Secrets to be fetched.
    fn rebuild(
        &self,
        objects: &mut Objects,
        unreadable: &BTreeMap<ObjectKey, String>,
        previous: &StatusReport,
        since: Option<Instant>,
        holding: &mut Option<Instant>,
        built: &mut Option<ClustersByService>,
    ) -> (StatusReport, bool) {
        let started = Instant::now();
        let mut output = self.pipeline.build(objects);
        report_unreadable(&mut output.status, objects, unreadable);
        let requested = objects.take_requested();
        if let Some(hydrate) = &self.hydrate {
            let missing = objects.elided_among(&requested);
            if !missing.is_empty() {
                let first = *holding.get_or_insert_with(Instant::now);
                if first.elapsed() < HYDRATE_MAX {
                    tracing::debug!(
                        secrets = missing.len(),
                        "a build needs secrets whose data was dropped; fetching them first"
                    );
                    let _ = hydrate.try_send(missing);
                    return (previous.clone(), true);
                }
                tracing::warn!(
                    secrets = missing.len(),
                    "secrets could not be fetched in time; serving without them"
                );
            }
            *holding = None;
        }
        let resources = translate(&output.ir, objects, &self.settings);
        let mut snapshot = Snapshot::new(resources);
        snapshot.changed_at = since;
        let elapsed = started.elapsed();
        self.metrics.builds.inc();
        self.metrics.build_seconds.observe(elapsed.as_secs_f64());
        for (kind, count) in objects.counts() {
            let label = KindLabel {
                kind: kind_label(kind),
            };
            self.metrics
                .objects
                .get_or_create(&label)
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
        let published = self.snapshots.send_if_modified(|current| {
            if current.as_deref() == Some(&snapshot) {
                return false;
            }
            *current = Some(Arc::new(snapshot));
            true
        });
        tracing::info!(
            vhosts = output.ir.virtual_hosts.len(),
            clusters = output.ir.clusters.len(),
            published,
            millis = elapsed.as_secs_f64() * 1000.0,
            "built"
        );
        if let Some(out) = &self.statuses {
            let envoy = objects.services.get(&out.envoy_service);
            let lb = crate::status::load_balancer(&out.fixed_address, envoy.map(|s| s.as_ref()));
            let desired = Desired::from_build(&output.status, objects, lb);
            out.desired.send_if_modified(|current| {
                if current.as_deref() == Some(&desired) {
                    return false;
                }
                *current = Some(Arc::new(desired));
                true
            });
        }
        log_status_changes(previous, &output.status);
        if self.hydrate.is_some() {
            // Unreferenced Secrets keep only a digest; a later reference fetches them.
            let elided = objects.elide_unrequested_secrets(&requested);
            if elided > 0 {
                tracing::debug!(elided, "dropped the data of unreferenced secrets");
            }
        }
        *built = Some(crate::xds::clusters_by_service(&output.ir));
        (output.status, false)
    }

    /// Publishes the current snapshot with the ClusterLoadAssignments of `services`
    /// recomputed; every other resource is shared with it.
    fn publish_endpoints(
        &self,
        clusters: &ClustersByService,
        objects: &Objects,
        services: &BTreeSet<(String, String)>,
        since: Instant,
    ) {
        let started = Instant::now();
        let fresh = crate::xds::endpoints_of(clusters, objects, services);
        let published = self.snapshots.send_if_modified(|current| {
            let Some(snapshot) = current.as_ref() else {
                return false;
            };
            let eds = snapshot.get(XdsType::Endpoint);
            let changes: Vec<_> = fresh
                .into_iter()
                .filter(|(name, any)| eds.resources.get(name) != Some(any))
                .map(|(name, any)| (name, Some(any)))
                .collect();
            if changes.is_empty() {
                return false;
            }
            let mut next = snapshot.with_changes(XdsType::Endpoint, changes);
            next.changed_at = Some(since);
            *current = Some(Arc::new(next));
            true
        });
        self.metrics.endpoint_updates.inc();
        tracing::debug!(
            services = services.len(),
            published,
            micros = started.elapsed().as_micros() as u64,
            "endpoints updated"
        );
    }
}

/// Says on each object whose latest version did not decode why, and what is served
/// instead: its last good version (a warning), or nothing (an error).
fn report_unreadable(
    status: &mut StatusReport,
    objects: &Objects,
    unreadable: &BTreeMap<ObjectKey, String>,
) {
    for (key, error) in unreadable {
        let id = (key.namespace.clone(), key.name.clone());
        let stored = match key.kind {
            Kind::HTTPProxy => objects.httpproxies.contains_key(&id),
            Kind::Ingress => objects.ingresses.contains_key(&id),
            _ => continue,
        };
        if stored {
            status.warning(
                key,
                ConditionType::SpecError,
                Reason::ObjectNotReadable,
                format!("the latest version could not be read ({error}); the previous version is still served"),
            );
        } else {
            status.error(
                key,
                ConditionType::SpecError,
                Reason::ObjectNotReadable,
                format!("this object could not be read ({error}) and is not served"),
            );
        }
    }
}

fn kind_label(kind: Kind) -> &'static str {
    kind.as_str()
}

/// Logs every object whose conditions changed since the last build.
fn log_status_changes(previous: &StatusReport, current: &StatusReport) {
    for (key, status) in &current.objects {
        if previous.get(key) == Some(status) {
            continue;
        }
        let errors: Vec<String> = status
            .errors
            .iter()
            .map(|e| format!("{}: {}", e.reason, e.message))
            .collect();
        let warnings: Vec<String> = status
            .warnings
            .iter()
            .map(|e| format!("{}: {}", e.reason, e.message))
            .collect();
        tracing::info!(
            kind = %key.kind,
            ns = %key.namespace,
            name = %key.name,
            status = ?status.current(),
            errors = ?errors,
            warnings = ?warnings,
            "object status"
        );
    }
}
