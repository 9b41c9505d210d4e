//! Isobar's own Prometheus metrics, served on `/metrics`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Metric, Registry};

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

/// Registers `metric` as `name` with `help`; returns it.
fn registered<M: Metric + Clone>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M {
    registry.register(name, help, metric.clone());
    metric
}

/// `Metrics` with each metric registered in the order listed: `field: name, help, metric;`.
macro_rules! metrics {
    ($registry:expr; $($field:ident: $name:literal, $help:literal, $metric:expr;)*) => {{
        let registry = &mut $registry;
        Metrics {
            $($field: registered(registry, $name, $help, $metric),)*
            registry: std::mem::take(registry),
        }
    }};
}

impl Default for Metrics {
    fn default() -> Self {
        metrics! {
            Registry::with_prefix("isobar");
            builds: "builds", "Completed pipeline builds", Counter::default();
            endpoint_updates: "endpoint_updates", "EndpointSlice changes served by updating EDS alone, without a build", Counter::default();
            spliced_builds: "spliced_builds", "Builds of the objects a change reaches alone, spliced into the previous build (also counted in builds)", Counter::default();
            build_seconds: "build_duration_seconds", "Time from objects to an encoded xDS snapshot", Histogram::new(exponential_buckets(0.0005, 2.0, 16));
            objects: "objects", "Objects in the store, by kind", Family::default();
            manifest_errors: "manifest_errors", "Manifest files that failed to parse (their last good objects were kept)", Counter::default();
            xds_streams: "xds_streams", "Connected Envoy ADS streams", Gauge::default();
            xds_responses: "xds_responses", "xDS responses sent, by type", Family::default();
            xds_nacks: "xds_nacks", "xDS updates Envoy rejected, by type", Family::default();
            envoy_rejected_objects: "envoy_rejected_objects", "Objects whose latest version Envoy rejected: their previous version is served (or none, if new)", Gauge::default();
            withheld_resources: "withheld_resources", "Resources not sent because Envoy's rules would refuse them (Envoy keeps the version it was sent last)", Counter::default();
            watch_restarts: "watch_errors", "Kubernetes watch errors (each is retried with backoff, relisting when needed), by kind", Family::default();
            decode_errors: "decode_errors", "Objects from the Kubernetes API that did not decode and were skipped, by kind", Family::default();
            status_writes: "status_writes", "Status writes by result: written, unchanged (already in place), conflict (retried), gone, failed", Family::default();
            leader: "leader", "1 while this replica holds the leader Lease (writes status)", Gauge::default();
            xds_bytes: "xds_bytes", "Encoded bytes of xDS responses sent, by type", Family::default();
            xds_resources: "xds_resources", "Resources in xDS responses sent, by type", Family::default();
            plugin_events: "plugin_events", "Events plugins counted (a WebAssembly processor trapping, a policy failing to evaluate), by plugin and event", Family::default();
            admission_reviews: "admission_reviews", "AdmissionReviews answered, by result (allowed, denied)", Family::default();
            admission_seconds: "admission_review_seconds", "Time to judge one AdmissionReview (the dry builds)", latency_histogram();
            event_to_xds: "event_to_xds_seconds", "From the first object change a snapshot reflects to a response carrying it written to a stream, by type", Family::new_with_constructor(latency_histogram as fn() -> Histogram);
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
