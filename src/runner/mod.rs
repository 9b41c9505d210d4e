//! The pipeline runner: applies provider events to the object store, waits out the
//! hold-off, builds, translates, and publishes a snapshot when its content changed.
//! Nothing is published before the provider has synced, so Envoy never sees a partial
//! configuration.

pub mod leader;
pub mod links;
pub mod pipeline;
pub mod status;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use std::collections::{BTreeMap, BTreeSet};

use isobar_sdk::api::EndpointSlice;
use isobar_sdk::object::slice_service;

use isobar_sdk::{ConditionType, Kind, ObjectKey, Objects, Reason, StatusReport};

use crate::metrics::{KindLabel, Metrics};
use crate::provider::Event;
use crate::runner::links::{Links, service_referrers};
use crate::runner::pipeline::Pipeline;
use crate::runner::status::Desired;
use crate::xds::{Encoder, EnvoySettings, Snapshot, XdsType, translate_keeping};

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
    pub debug: Option<mpsc::Receiver<crate::cli::debug::IrRequest>>,
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
            let deadline = pending
                .filter(|_| synced)
                .map(|(first, last)| (last + self.holdoff).min(first + self.holdoff_max));
            let event = tokio::select! {
                event = events.recv() => event,
                () = until(deadline), if deadline.is_some() => {
                    let since = pending.take().map(|(first, _)| first);
                    let changed = std::mem::take(&mut dirty);
                    // On the worker: a change spliced in takes well under a millisecond,
                    // less than handing the worker over would; a full build hands it over.
                    let held = self.rebuild(&mut objects, &unreadable, &mut last_status, since, &mut holding, &mut built, &changed);
                    if held {
                        dirty.full = true;
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
                if services.len() > ENDPOINTS_INLINE_MAX {
                    tokio::task::block_in_place(|| {
                        self.publish_endpoints(&built.encoder, &objects, &services, arrived);
                    });
                } else if !services.is_empty() {
                    self.publish_endpoints(&built.encoder, &objects, &services, arrived);
                }
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
        if dirty.full {
            // Everything is rebuilt anyway: what each object reaches is neither worked out
            // nor recorded (during the first list, tens of thousands of keys).
            return self.apply_event(objects, unreadable, event, synced);
        }
        let key = match &event {
            Event::Apply(object) => Some(object.key()),
            Event::Delete(key) => Some(key.clone()),
            _ => None,
        };
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
            .is_some_and(|key| unreadable.contains_key(key));
        let changed = self.apply_event(objects, unreadable, event, synced);
        if !changed {
            return false;
        }
        match (slice, routing) {
            // An object that was unreadable has a status to clear: a full build.
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
                    let referrers =
                        service_referrers(objects, &self.pipeline, &key.namespace, &key.name);
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

    /// One build: what `dirty` reaches spliced into the last build when it can be, else
    /// everything. `status` becomes this build's report. Returns whether the build was
    /// held back (not published) waiting for elided Secrets to be fetched.
    #[allow(clippy::too_many_arguments)]
    fn rebuild(
        &self,
        objects: &mut Objects,
        unreadable: &BTreeMap<ObjectKey, String>,
        status: &mut StatusReport,
        since: Option<Instant>,
        holding: &mut Option<Instant>,
        built: &mut Option<Built>,
        dirty: &Dirty,
    ) -> bool {
        if !dirty.full
            && !dirty.secrets_matter(built.as_ref())
            && holding.is_none()
            && self.pipeline.local()
            && let Some(last) = built.as_mut()
            && last.encoder.splices()
        {
            if self.splice(objects, unreadable, status, since, last, dirty) {
                return false;
            }
            *built = None;
        }
        tokio::task::block_in_place(|| {
            self.build_all(objects, unreadable, status, since, holding, built)
        })
    }

    /// Rebuilds only the routing objects `dirty` reaches and splices the result into
    /// the last build. False when it cannot (then nothing was published or kept).
    fn splice(
        &self,
        objects: &mut Objects,
        unreadable: &BTreeMap<ObjectKey, String>,
        status: &mut StatusReport,
        since: Option<Instant>,
        last: &mut Built,
        dirty: &Dirty,
    ) -> bool {
        let started = Instant::now();
        let reach = last.links.update(objects, &self.pipeline, &dirty.routing);
        if reach.objects.len() > SPLICE_MAX.max(last.links.len() / 4) {
            return false;
        }
        let linked = started.elapsed();
        let mut output = self.pipeline.build_scoped(objects, &reach.objects);
        let piped = started.elapsed();
        let requested = objects.take_requested();
        if self.hydrate.is_some() && !objects.elided_among(&requested).is_empty() {
            // A full build holds back until they are fetched.
            return false;
        }
        if let Some(used) = &mut last.secrets_used {
            used.extend(requested);
        }
        if !last.encoder.same_listeners(&output.ir) {
            tracing::debug!("a change reshaped a listener; building everything");
            return false;
        }
        let every = output.ir.listeners.values().flat_map(|l| l.fqdns());
        if let Some(stray) = every.into_iter().find(|fqdn| !reach.hosts.contains(*fqdn)) {
            tracing::debug!(fqdn = %stray, "a change reached a vhost its objects do not claim; building everything");
            return false;
        }
        report_unreadable(&mut output.status, objects, unreadable, &self.pipeline);
        let published = self.snapshots.borrow().clone();
        let Ok(mut changes) = last.encoder.replace(
            &output.ir,
            objects,
            &self.settings,
            &reach.hosts,
            published.as_deref(),
        ) else {
            // A bug, not bad input: tests must see it; a release build recovers.
            debug_assert!(
                false,
                "the published resources are not what the last build made"
            );
            tracing::warn!(
                "the published resources are not what the last build made; building everything"
            );
            return false;
        };
        if !dirty.services.is_empty() {
            let eds = changes.by_type.entry(XdsType::Endpoint).or_default();
            for (name, any) in last.encoder.endpoints_of(objects, &dirty.services) {
                eds.entry(name).or_insert(Some(any));
            }
        }
        let encoded = started.elapsed();
        let mut fresh = StatusReport::default();
        for key in &reach.objects {
            if let Some(s) = output.status.objects.remove(key) {
                fresh.objects.insert(key.clone(), s);
            }
        }
        log_status_changes(status, &fresh);
        for key in &reach.objects {
            match fresh.objects.remove(key) {
                Some(s) => status.objects.insert(key.clone(), s),
                None => status.objects.remove(key),
            };
        }
        let published = self.snapshots.send_if_modified(|current| {
            let Some(snapshot) = current.as_ref() else {
                return false;
            };
            let mut next = snapshot.with_all_changes(changes);
            if next == **snapshot {
                return false;
            }
            next.changed_at = since;
            *current = Some(Arc::new(next));
            true
        });
        let elapsed = started.elapsed();
        self.publish_statuses(objects, |last, lb| {
            let mut desired = last.cloned().unwrap_or_default();
            desired.load_balancer = lb;
            desired.update(status, objects, &reach.objects);
            desired
        });
        tracing::info!(
            objects = reach.objects.len(),
            vhosts = reach.hosts.len(),
            published,
            millis = elapsed.as_secs_f64() * 1000.0,
            links_ms = linked.as_secs_f64() * 1000.0,
            pipeline_ms = (piped - linked).as_secs_f64() * 1000.0,
            encode_ms = (encoded - piped).as_secs_f64() * 1000.0,
            publish_ms = (elapsed - encoded).as_secs_f64() * 1000.0,
            "built the change alone"
        );
        // Counted once everything is published (tests wait on the count).
        self.metrics.spliced_builds.inc();
        self.metrics.build_seconds.observe(elapsed.as_secs_f64());
        self.metrics.builds.inc();
        true
    }

    /// Builds everything from the objects.
    fn build_all(
        &self,
        objects: &mut Objects,
        unreadable: &BTreeMap<ObjectKey, String>,
        status: &mut StatusReport,
        since: Option<Instant>,
        holding: &mut Option<Instant>,
        built: &mut Option<Built>,
    ) -> bool {
        let started = Instant::now();
        let mut output = self.pipeline.build(objects);
        report_unreadable(&mut output.status, objects, unreadable, &self.pipeline);
        let mut requested = objects.take_requested();
        // Envoy's own client certificate is read when the build is encoded, below: it is
        // in use too (neither elided after this build nor missing from the next).
        requested.extend(self.settings.client_certificate.iter().cloned());
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
                    return true;
                }
                tracing::warn!(
                    secrets = missing.len(),
                    "secrets could not be fetched in time; serving without them"
                );
            }
            *holding = None;
        }
        let (resources, encoder) = translate_keeping(&output.ir, objects, &self.settings);
        let mut snapshot = Snapshot::new(resources);
        snapshot.changed_at = since;
        let elapsed = started.elapsed();
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
            vhosts = output.ir.vhost_count(),
            clusters = output.ir.clusters.len(),
            published,
            millis = elapsed.as_secs_f64() * 1000.0,
            "built"
        );
        self.publish_statuses(objects, |_, lb| {
            Desired::from_build(&output.status, objects, lb)
        });
        log_status_changes(status, &output.status);
        if self.hydrate.is_some() {
            // Unreferenced Secrets keep only a digest; a later reference fetches them.
            let elided = objects.elide_unrequested_secrets(&requested);
            if elided > 0 {
                tracing::debug!(elided, "dropped the data of unreferenced secrets");
            }
        }
        *status = output.status;
        let secrets_used = self.pipeline.local().then_some(requested);
        *built = Some(Built {
            encoder,
            links: Links::of(objects, &self.pipeline),
            secrets_used,
        });
        // Counted once everything is published (tests wait on the count).
        self.metrics.build_seconds.observe(elapsed.as_secs_f64());
        self.metrics.builds.inc();
        false
    }

    /// Hands the status writer what `make` builds from the statuses last handed to it and
    /// `status.loadBalancer`, when it differs (Kubernetes provider only).
    fn publish_statuses(
        &self,
        objects: &Objects,
        make: impl FnOnce(Option<&Desired>, serde_json::Value) -> Desired,
    ) {
        let Some(out) = &self.statuses else {
            return;
        };
        let envoy = objects.services.get(&out.envoy_service);
        let lb = crate::runner::status::load_balancer(
            &out.fixed_address,
            envoy.and_then(|s| s.load_balancer.as_deref()),
        );
        let last = out.desired.borrow().clone();
        let desired = make(last.as_deref(), lb);
        out.desired.send_if_modified(|current| {
            if current.as_deref() == Some(&desired) {
                return false;
            }
            *current = Some(Arc::new(desired));
            true
        });
    }

    /// Publishes the current snapshot with the ClusterLoadAssignments of `services`
    /// recomputed; every other resource is shared with it.
    fn publish_endpoints(
        &self,
        encoder: &Encoder,
        objects: &Objects,
        services: &BTreeSet<(String, String)>,
        since: Instant,
    ) {
        let started = Instant::now();
        let fresh = encoder.endpoints_of(objects, services);
        let published = self.snapshots.send_if_modified(|current| {
            let Some(snapshot) = current.as_ref() else {
                return false;
            };
            let eds = snapshot.get(XdsType::Endpoint);
            let changes: Vec<_> = fresh
                .into_iter()
                .filter(|(name, cla)| eds.resources.get(name.as_str()) != Some(cla))
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

/// Resolves at `deadline`; at once when it has passed (a timer would add up to a
/// millisecond of its own resolution to every change with the hold-off at zero).
async fn until(deadline: Option<Instant>) {
    if let Some(at) = deadline.filter(|at| *at > Instant::now()) {
        tokio::time::sleep_until(at.into()).await;
    }
}

/// Says on each object whose latest version did not decode why, and what is served
/// instead: its last good version (a warning), or nothing (an error).
/// Only routing objects get a status (see `Source::kinds`).
fn report_unreadable(
    status: &mut StatusReport,
    objects: &Objects,
    unreadable: &BTreeMap<ObjectKey, String>,
    pipeline: &Pipeline,
) {
    for (key, error) in unreadable {
        if !pipeline.routes(key.kind) {
            continue;
        }
        let stored = objects.object(key).is_some();
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
