//! One build: a change spliced into the last build when everything it reaches is
//! known, else everything; translation, publishing the snapshot, and handing statuses to
//! the status writer.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use isobar_sdk::{ConditionType, Kind, ObjectKey, Objects, Reason, StatusReport};

use super::links::{Links, Reach};
use super::pipeline::Pipeline;
use super::rejected::{Refused, report_refused};
use super::status::Desired;
use super::{Built, Dirty, HYDRATE_MAX, Runner, SPLICE_MAX, State};
use crate::metrics::KindLabel;
use crate::xds::{Encoder, Snapshot, XdsType, translate_after};

impl Runner {
    /// One build: what `dirty` reaches spliced into the last build when it can be, else
    /// everything. `s.status` becomes this build's report. Returns whether the build was
    /// held back (not published) waiting for elided Secrets to be fetched.
    pub(super) fn rebuild(&self, s: &mut State, since: Option<Instant>, dirty: &Dirty) -> bool {
        let refused = &s.refusals.refused;
        let held = 'built: {
            if !dirty.full
                && !dirty.secrets_matter(s.built.as_ref())
                && s.holding.is_none()
                && self.pipeline.local()
                && let Some(last) = s.built.as_mut()
                && last.encoder.splices()
            {
                let status = &mut s.status;
                if self.splice(
                    &mut s.objects,
                    &s.unreadable,
                    refused,
                    status,
                    since,
                    last,
                    dirty,
                ) {
                    break 'built false;
                }
                s.built = None;
            }
            tokio::task::block_in_place(|| {
                self.build_all(
                    &mut s.objects,
                    &s.unreadable,
                    refused,
                    &mut s.status,
                    since,
                    &mut s.holding,
                    &mut s.built,
                )
            })
        };
        if self.withheld.lock().is_ok_and(|w| !w.is_empty()) {
            // What is served is no longer what the build made: the next build makes
            // everything again (splicing copies from what is served).
            s.built = None;
        }
        held
    }

    /// Notes resources withheld from what is served (see [`crate::xds::validate`]).
    fn withhold(&self, withheld: Vec<crate::xds::validate::Withheld>) {
        if withheld.is_empty() {
            return;
        }
        for w in &withheld {
            tracing::warn!(resource = %w, "withheld a resource Envoy would refuse");
        }
        self.metrics
            .withheld_resources
            .inc_by(u64::try_from(withheld.len()).unwrap_or(u64::MAX));
        if let Ok(mut all) = self.withheld.lock() {
            all.extend(withheld);
        }
    }

    /// Rebuilds only the routing objects `dirty` reaches and splices the result into
    /// the last build. False when it cannot (then nothing was published or kept).
    #[allow(clippy::too_many_arguments)]
    fn splice(
        &self,
        objects: &mut Objects,
        unreadable: &BTreeMap<ObjectKey, String>,
        refused: &BTreeMap<ObjectKey, Refused>,
        status: &mut StatusReport,
        since: Option<Instant>,
        last: &mut Built,
        dirty: &Dirty,
    ) -> bool {
        let started = Instant::now();
        if dirty.routing.iter().any(|k| self.pipeline.whole(k.kind)) {
            return false;
        }
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
        last.encoder
            .carry_tcp_proxies(&mut output.ir, &reach.objects);
        if !self.fits(&last.encoder, &output.ir, &reach) {
            return false;
        }
        report_unreadable(&mut output.status, objects, unreadable, &self.pipeline);
        report_refused(&mut output.status, refused);
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
        let reported = self.take_reported(status, &mut output.status, &reach);
        let published = self.snapshots.send_if_modified(|current| {
            let Some(snapshot) = current.as_ref() else {
                return false;
            };
            self.withhold(crate::xds::validate::vet_changes(&mut changes, snapshot));
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
            desired.update(status, objects, &reported, self.pipeline.controller_name());
            observe_refused(&mut desired, refused);
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

    /// Whether a spliced build's IR fits the last build's tables: the same listeners,
    /// the same split of routes into shards, and no vhost the change does not reach.
    fn fits(&self, last: &Encoder, ir: &isobar_sdk::Ir, reach: &Reach) -> bool {
        if !last.same_listeners(ir) {
            tracing::debug!("a change reshaped a listener; building everything");
            return false;
        }
        if !last.keeps_shards(ir, &reach.hosts, &self.settings) {
            tracing::debug!(
                "a change splits a listener's routes into shards or joins them; building everything"
            );
            return false;
        }
        let every = ir.listeners.values().flat_map(|l| l.fqdns());
        if let Some(stray) = every.into_iter().find(|fqdn| !reach.hosts.contains(*fqdn)) {
            tracing::debug!(fqdn = %stray, "a change reached a vhost its objects do not claim; building everything");
            return false;
        }
        true
    }

    /// Moves a spliced build's report on the objects it has status for (those it
    /// reached, and those of kinds every build reports on whole) into `status`; returns
    /// their keys.
    fn take_reported(
        &self,
        status: &mut StatusReport,
        built: &mut StatusReport,
        reach: &Reach,
    ) -> BTreeSet<ObjectKey> {
        let mut reported = reach.objects.clone();
        reported.extend(
            built
                .objects
                .keys()
                .filter(|k| self.pipeline.whole(k.kind))
                .cloned(),
        );
        let mut fresh = StatusReport::default();
        for key in &reported {
            if let Some(s) = built.objects.remove(key) {
                fresh.objects.insert(key.clone(), s);
            }
        }
        log_status_changes(status, &fresh);
        for key in &reported {
            match fresh.objects.remove(key) {
                Some(s) => status.objects.insert(key.clone(), s),
                None => status.objects.remove(key),
            };
        }
        reported
    }

    /// Builds everything from the objects.
    #[allow(clippy::too_many_arguments)]
    fn build_all(
        &self,
        objects: &mut Objects,
        unreadable: &BTreeMap<ObjectKey, String>,
        refused: &BTreeMap<ObjectKey, Refused>,
        status: &mut StatusReport,
        since: Option<Instant>,
        holding: &mut Option<Instant>,
        built: &mut Option<Built>,
    ) -> bool {
        let started = Instant::now();
        let mut output = self.pipeline.build(objects);
        let piped = started.elapsed();
        report_unreadable(&mut output.status, objects, unreadable, &self.pipeline);
        report_refused(&mut output.status, refused);
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
        let (mut resources, encoder) = {
            let mut sharded = self.sharded.lock().unwrap_or_else(|p| p.into_inner());
            let built = translate_after(&output.ir, objects, &self.settings, Some(&sharded));
            *sharded = built.1.sharded_listeners();
            built
        };
        let encoded = started.elapsed();
        let served = self.snapshots.borrow().clone();
        self.withhold(crate::xds::validate::vet_resources(
            &mut resources,
            served.as_deref(),
        ));
        let vetted = started.elapsed();
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
            pipeline_ms = piped.as_secs_f64() * 1000.0,
            encode_ms = (encoded - piped).as_secs_f64() * 1000.0,
            vet_ms = (vetted - encoded).as_secs_f64() * 1000.0,
            "built"
        );
        self.publish_statuses(objects, |_, lb| {
            let mut desired =
                Desired::from_build(&output.status, objects, lb, self.pipeline.controller_name());
            observe_refused(&mut desired, refused);
            desired
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
    pub(super) fn publish_endpoints(
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

/// A refused object's status is about the refused version: its `observedGeneration` is
/// that version's (the store holds the one served instead).
fn observe_refused(desired: &mut Desired, refused: &BTreeMap<ObjectKey, Refused>) {
    for (key, r) in refused {
        if let Some((generation, _)) = desired.proxies.get_mut(key) {
            *generation = r.object.metadata().generation;
        }
    }
}

fn kind_label(kind: Kind) -> &'static str {
    kind.as_str()
}

/// Logs every object whose conditions changed since the last build; a new object that
/// is valid without a warning only at debug level (a start with 100,000 objects would
/// write as many lines).
fn log_status_changes(previous: &StatusReport, current: &StatusReport) {
    for (key, status) in &current.objects {
        let before = previous.get(key);
        if before == Some(status) {
            continue;
        }
        if before.is_none() && status.is_valid() && status.warnings.is_empty() {
            tracing::debug!(kind = %key.kind, ns = %key.namespace, name = %key.name, status = ?status.current(), "object status");
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
