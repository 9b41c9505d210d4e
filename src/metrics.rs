//! Isobar's own Prometheus metrics, served on `/metrics`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TypeLabel {
    pub xds_type: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: &'static str,
}

pub struct Metrics {
    registry: Registry,
    pub builds: Counter,
    pub endpoint_updates: Counter,
    /// Builds of a change alone, spliced into the previous build.
    pub spliced_builds: Counter,
    pub build_seconds: Histogram,
    pub objects: Family<KindLabel, Gauge>,
    pub manifest_errors: Counter,
    pub xds_streams: Gauge,
    pub xds_responses: Family<TypeLabel, Counter>,
    pub xds_nacks: Family<TypeLabel, Counter>,
    /// Objects whose latest version Envoy refused, held back (see `runner/rejected.rs`).
    pub envoy_rejected_objects: Gauge,
    /// Resources withheld because Envoy's rules refuse them (see `xds/validate/`).
    pub withheld_resources: Counter,
    pub watch_restarts: Family<KindLabel, Counter>,
    pub decode_errors: Family<KindLabel, Counter>,
    pub status_writes: Family<ResultLabel, Counter>,
    pub leader: Gauge,
    pub xds_bytes: Family<TypeLabel, Counter>,
    pub xds_resources: Family<TypeLabel, Counter>,
    pub event_to_xds: Family<TypeLabel, Histogram>,
    pub plugin_events: Family<PluginEventLabel, Counter>,
    pub admission_reviews: Family<ResultLabel, Counter>,
    pub admission_seconds: Histogram,
}

fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginEventLabel {
    pub plugin: String,
    pub event: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: &'static str,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("isobar");
        let builds = Counter::default();
        let endpoint_updates = Counter::default();
        let spliced_builds = Counter::default();
        let build_seconds = Histogram::new(exponential_buckets(0.0005, 2.0, 16));
        let objects = Family::<KindLabel, Gauge>::default();
        let manifest_errors = Counter::default();
        let xds_streams = Gauge::default();
        let xds_responses = Family::<TypeLabel, Counter>::default();
        let xds_nacks = Family::<TypeLabel, Counter>::default();
        let envoy_rejected_objects = Gauge::default();
        let withheld_resources = Counter::default();
        let watch_restarts = Family::<KindLabel, Counter>::default();
        let decode_errors = Family::<KindLabel, Counter>::default();
        let status_writes = Family::<ResultLabel, Counter>::default();
        let leader = Gauge::default();
        let xds_bytes = Family::<TypeLabel, Counter>::default();
        let xds_resources = Family::<TypeLabel, Counter>::default();
        let event_to_xds = Family::<TypeLabel, Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        registry.register("builds", "Completed pipeline builds", builds.clone());
        registry.register(
            "endpoint_updates",
            "EndpointSlice changes served by updating EDS alone, without a build",
            endpoint_updates.clone(),
        );
        registry.register(
            "spliced_builds",
            "Builds of the objects a change reaches alone, spliced into the previous build (also counted in builds)",
            spliced_builds.clone(),
        );
        registry.register(
            "build_duration_seconds",
            "Time from objects to an encoded xDS snapshot",
            build_seconds.clone(),
        );
        registry.register("objects", "Objects in the store, by kind", objects.clone());
        registry.register(
            "manifest_errors",
            "Manifest files that failed to parse (their last good objects were kept)",
            manifest_errors.clone(),
        );
        registry.register(
            "xds_streams",
            "Connected Envoy ADS streams",
            xds_streams.clone(),
        );
        registry.register(
            "xds_responses",
            "xDS responses sent, by type",
            xds_responses.clone(),
        );
        registry.register(
            "xds_nacks",
            "xDS updates Envoy rejected, by type",
            xds_nacks.clone(),
        );
        registry.register(
            "envoy_rejected_objects",
            "Objects whose latest version Envoy rejected: their previous version is served (or none, if new)",
            envoy_rejected_objects.clone(),
        );
        registry.register(
            "withheld_resources",
            "Resources not sent because Envoy's rules would refuse them (Envoy keeps the version it was sent last)",
            withheld_resources.clone(),
        );
        registry.register(
            "watch_errors",
            "Kubernetes watch errors (each is retried with backoff, relisting when needed), by kind",
            watch_restarts.clone(),
        );
        registry.register(
            "decode_errors",
            "Objects from the Kubernetes API that did not decode and were skipped, by kind",
            decode_errors.clone(),
        );
        registry.register(
            "status_writes",
            "Status writes by result: written, unchanged (already in place), conflict (retried), gone, failed",
            status_writes.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica holds the leader Lease (writes status)",
            leader.clone(),
        );
        registry.register(
            "xds_bytes",
            "Encoded bytes of xDS responses sent, by type",
            xds_bytes.clone(),
        );
        registry.register(
            "xds_resources",
            "Resources in xDS responses sent, by type",
            xds_resources.clone(),
        );
        let plugin_events = Family::<PluginEventLabel, Counter>::default();
        registry.register(
            "plugin_events",
            "Events plugins counted (a WebAssembly processor trapping, a policy failing to evaluate), by plugin and event",
            plugin_events.clone(),
        );
        let admission_reviews = Family::<ResultLabel, Counter>::default();
        let admission_seconds = latency_histogram();
        registry.register(
            "admission_reviews",
            "AdmissionReviews answered, by result (allowed, denied)",
            admission_reviews.clone(),
        );
        registry.register(
            "admission_review_seconds",
            "Time to judge one AdmissionReview (the dry builds)",
            admission_seconds.clone(),
        );
        registry.register(
            "event_to_xds_seconds",
            "From the first object change a snapshot reflects to a response carrying it written to a stream, by type",
            event_to_xds.clone(),
        );
        Metrics {
            registry,
            builds,
            endpoint_updates,
            spliced_builds,
            build_seconds,
            objects,
            manifest_errors,
            xds_streams,
            xds_responses,
            xds_nacks,
            envoy_rejected_objects,
            withheld_resources,
            watch_restarts,
            decode_errors,
            status_writes,
            leader,
            xds_bytes,
            xds_resources,
            event_to_xds,
            plugin_events,
            admission_reviews,
            admission_seconds,
        }
    }
}

impl Metrics {
    pub fn nack(&self, xds_type: &'static str) {
        self.xds_nacks.get_or_create(&TypeLabel { xds_type }).inc();
    }

    /// One response written: its type, encoded size, resource count, and how long after
    /// the change it carries (when known).
    pub fn response(
        &self,
        xds_type: &'static str,
        bytes: usize,
        resources: usize,
        since_change: Option<std::time::Duration>,
    ) {
        let label = TypeLabel { xds_type };
        self.xds_responses.get_or_create(&label).inc();
        self.xds_bytes.get_or_create(&label).inc_by(bytes as u64);
        self.xds_resources
            .get_or_create(&label)
            .inc_by(resources as u64);
        if let Some(latency) = since_change {
            self.event_to_xds
                .get_or_create(&label)
                .observe(latency.as_secs_f64());
        }
    }

    pub fn admission(&self, allowed: bool, took: std::time::Duration) {
        let result = if allowed { "allowed" } else { "denied" };
        self.admission_reviews
            .get_or_create(&ResultLabel { result })
            .inc();
        self.admission_seconds.observe(took.as_secs_f64());
    }

    pub fn watch_restart(&self, kind: &'static str) {
        self.watch_restarts.get_or_create(&KindLabel { kind }).inc();
    }

    pub fn decode_error(&self, kind: &'static str) {
        self.decode_errors.get_or_create(&KindLabel { kind }).inc();
    }

    pub fn status_write(&self, result: &'static str) {
        self.status_writes
            .get_or_create(&ResultLabel { result })
            .inc();
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        for ((plugin, event), total) in isobar_sdk::telemetry::totals() {
            let counter = self
                .plugin_events
                .get_or_create(&PluginEventLabel { plugin, event });
            counter.inc_by(total.saturating_sub(counter.get()));
        }
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}
