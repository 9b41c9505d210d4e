//! Configuration: built-in defaults ← `contour.yaml` (`-c`) ← `ISOBAR_…` environment ←
//! command-line flags, merged with figment. Unknown keys are errors naming the file and key.
//!
//! Keys follow Contour's where Contour has one (`timeouts.connect-timeout`, the serving
//! addresses of `ContourConfiguration`); `pipeline` and `plugins` are Isobar's own.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Yaml};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct Config {
    /// Where Isobar serves xDS to Envoy.
    pub xds_server: XdsServer,
    /// Isobar's Prometheus `/metrics` (`--http-address`, `--http-port`); Contour's
    /// `metrics.contour` and `metrics.envoy` are read too.
    pub metrics: Metrics,
    /// Isobar's `/healthz` (`--health-address`, `--health-port`).
    pub health: Endpoint,
    pub envoy: EnvoyConfig,
    pub timeouts: Timeouts,
    /// Downstream TLS defaults (Contour's `tls` section).
    pub tls: TlsConfig,
    pub pipeline: PipelineConfig,
    /// One section per plugin, by plugin name.
    pub plugins: BTreeMap<String, serde_json::Value>,
    /// Contour's `gateway` section (`controllerName`, `gatewayRef`): the settings of the
    /// `gateway-api` source, which it enables.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gateway: Option<serde_json::Value>,
    /// Fixed addresses for `status.loadBalancer` of Ingresses and HTTPProxies, comma-
    /// separated IPs or hostnames (`--ingress-status-address`). Empty: copied from the
    /// Envoy Service below.
    pub ingress_status_address: String,
    /// The Service in front of Envoy, whose `status.loadBalancer` is copied to Ingresses
    /// and HTTPProxies (`--envoy-service-name`, `--envoy-service-namespace`).
    pub envoy_service_name: String,
    pub envoy_service_namespace: String,
    /// Which replica writes status (Kubernetes provider only).
    pub leader_election: LeaderElection,
    /// The debug endpoint: `/debug/ir` and `/debug/dag` (`--debug-http-address`,
    /// `--debug-http-port`).
    pub debug_http: Endpoint,
    /// The validating admission webhook (HTTPS, `admission.k8s.io/v1`).
    pub admission_webhook: AdmissionWebhook,
    /// Debug logging (`--debug`).
    pub debug: bool,
    /// Contour's access log format: `envoy` (Envoy's text format, or
    /// `accesslog-format-string`) or `json` (`json-fields`).
    pub accesslog_format: contour::AccessLogFormat,
    /// An Envoy format string for `accesslog-format: envoy` (ends in a newline).
    pub accesslog_format_string: String,
    /// The fields of `accesslog-format: json`; empty: Contour's default fields.
    pub json_fields: Vec<String>,
    /// Which requests are logged: `info` (all), `error` (status ≥ 300), `critical`
    /// (≥ 500), `disabled`.
    pub accesslog_level: contour::AccessLogLevel,
    /// HTTPProxy `permitInsecure` is ignored: secure vhosts always redirect plain HTTP.
    #[serde(rename = "disablePermitInsecure")]
    pub disable_permit_insecure: bool,
    /// Envoy no longer lets `Content-Length` and chunked encoding come together.
    #[serde(rename = "disableAllowChunkedLength")]
    pub disable_allow_chunked_length: bool,
    /// Envoy no longer merges adjacent slashes in request paths.
    #[serde(rename = "disableMergeSlashes")]
    pub disable_merge_slashes: bool,
    /// The `Server` response header: `overwrite` (`envoy`), `append_if_absent`,
    /// `pass_through`.
    #[serde(rename = "serverHeaderTransformation")]
    pub server_header_transformation: contour::ServerHeader,
    /// Route to ExternalName Services (never to localhost or link-local names).
    #[serde(rename = "enableExternalNameService")]
    pub enable_external_name_service: bool,
    /// Contour's `network` section.
    pub network: contour::Network,
    /// HTTP versions Envoy speaks to clients (`HTTP/1.1`, `HTTP/2`); empty: both.
    pub default_http_versions: Vec<String>,
    /// Contour's `incluster`: watch the cluster Isobar runs in (as `--incluster`).
    pub incluster: bool,
    /// Contour's `kubeconfig`: watch this kubeconfig's cluster (as `--kubeconfig`).
    pub kubeconfig: String,
    /// Contour's `cluster` section: every upstream cluster.
    pub cluster: sections::Cluster,
    /// Contour's `listener` section: every listener and HTTP connection manager.
    pub listener: sections::Listener,
    /// Contour's `policy` section: default header policies of services.
    pub policy: sections::Policy,
    /// Contour's `compression` section: the compressor of every connection manager.
    pub compression: sections::Compression,
    /// Contour's extension service sections: checked, and named in one warning at
    /// start-up while Isobar does not serve them yet.
    #[serde(rename = "rateLimitService", skip_serializing_if = "Option::is_none")]
    pub rate_limit_service: Option<sections::RateLimitService>,
    #[serde(rename = "globalExtAuth", skip_serializing_if = "Option::is_none")]
    pub global_ext_auth: Option<sections::GlobalExtAuth>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tracing: Option<sections::Tracing>,
    /// Contour's feature flags (Contour 1.33 defines none that change behaviour).
    #[serde(rename = "featureFlags")]
    pub feature_flags: Vec<String>,
    /// Contour's `omEnforcedHealthListener`: `/ready` where Envoy's global connection
    /// limit applies.
    #[serde(
        rename = "omEnforcedHealthListener",
        skip_serializing_if = "Option::is_none"
    )]
    pub om_enforced_health_listener: Option<sections::HealthListener>,
    /// Contour's `server` section (no keys).
    pub server: sections::Server,
    /// The Kubernetes client's request rate and burst (client-go's QPS and burst);
    /// unset: no limit.
    #[serde(
        rename = "kubernetesClientQPS",
        skip_serializing_if = "Option::is_none"
    )]
    pub kubernetes_client_qps: Option<f32>,
    #[serde(
        rename = "kubernetesClientBurst",
        skip_serializing_if = "Option::is_none"
    )]
    pub kubernetes_client_burst: Option<u32>,
    /// Envoy runtime keys and values, sent in the `dynamic` layer beside the ones Isobar
    /// sets itself (which win; Contour's main).
    #[serde(
        rename = "runtime-settings",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub runtime_settings: BTreeMap<String, String>,
    /// Kinds not watched, by plural, as if their CRDs were not installed (`serve
    /// --disable-feature`; a flag only, as in Contour).
    #[serde(skip)]
    pub disabled_features: Vec<String>,
}

pub mod contour;
pub mod contour_configuration;
pub mod sections;

/// A `coordination.k8s.io/v1` Lease decides which replica writes status; every replica
/// serves xDS. Contour's defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct LeaderElection {
    /// Every replica writes status (`--disable-leader-election`).
    pub disabled: bool,
    /// How long a Lease holds without renewal before another replica may take it.
    pub lease_duration: Dur,
    /// The leader stops writing if it could not renew for this long.
    pub renew_deadline: Dur,
    /// How often replicas try to take or renew the Lease.
    pub retry_period: Dur,
    /// The Lease's name and namespace.
    pub resource_name: String,
    pub resource_namespace: String,
}

impl LeaderElection {
    /// client-go's rule: lease-duration > renew-deadline > 1.2 × retry-period.
    fn validate(&self) -> Result<(), String> {
        let (lease, renew, retry) = (
            self.lease_duration.0,
            self.renew_deadline.0,
            self.retry_period.0,
        );
        if lease <= renew || renew.as_secs_f64() <= 1.2 * retry.as_secs_f64() || retry.is_zero() {
            return Err(format!(
                "leader-election: need lease-duration ({lease:?}) > renew-deadline ({renew:?}) > 1.2 × retry-period ({retry:?}) > 0"
            ));
        }
        if self.resource_name.is_empty() || self.resource_namespace.is_empty() {
            return Err("leader-election: resource-name and resource-namespace must be set".into());
        }
        Ok(())
    }
}

impl Default for LeaderElection {
    fn default() -> Self {
        LeaderElection {
            disabled: false,
            lease_duration: Dur(Duration::from_secs(15)),
            renew_deadline: Dur(Duration::from_secs(10)),
            retry_period: Dur(Duration::from_secs(2)),
            resource_name: "leader-elect".to_string(),
            resource_namespace: "projectcontour".to_string(),
        }
    }
}

/// Where `serve` answers AdmissionReviews, and with which certificate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct AdmissionWebhook {
    pub enabled: bool,
    pub address: String,
    pub port: u16,
    /// PEM certificate chain and key the webhook serves (re-read when either changes).
    pub certificate_file: String,
    pub key_file: String,
    /// PEM CA bundle: when set, only clients presenting a certificate it issued (the API
    /// server, with its `--admission-control-config-file` client certificate) are
    /// answered; re-read when it changes.
    pub client_ca_file: String,
}

impl Default for AdmissionWebhook {
    fn default() -> Self {
        AdmissionWebhook {
            enabled: false,
            address: "0.0.0.0".to_string(),
            port: 8443,
            certificate_file: String::new(),
            key_file: String::new(),
            client_ca_file: String::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct XdsServer {
    pub address: String,
    pub port: u16,
    /// Serve xDS without TLS (`--insecure`); otherwise over mutual TLS with the three
    /// files below.
    pub insecure: bool,
    /// CA that signs Envoys' client certificates (`--contour-cafile`).
    pub ca_file: String,
    /// Isobar's xDS certificate chain (`--contour-cert-file`).
    pub cert_file: String,
    /// Its private key (`--contour-key-file`).
    pub key_file: String,
    /// Serve the plain HTTP listener's vhosts one by one over VHDS to Envoys on delta
    /// xDS (`isobar bootstrap`'s default), so a change to one vhost sends that vhost only;
    /// Envoys on state-of-the-world xDS (which cannot take VHDS) get every vhost in the
    /// `ingress_http` RouteConfiguration, as with this off.
    pub vhds: bool,
    /// An HTTP listener with at least this many vhosts has its routes split into 64
    /// RouteConfigurations (shards) that Envoy picks per request by the host (scoped
    /// routes), so a change to one vhost makes Envoy rebuild one shard instead of the
    /// whole table; every shard holds the wildcard and default vhosts too. A split
    /// listener stays split until it has fewer than half as many. 0: never.
    pub route_shards_from: usize,
}

/// Isobar's `/metrics` address, and Contour's spelling of it and of Envoy's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Metrics {
    pub address: String,
    pub port: u16,
    /// Contour's `metrics.contour` (Isobar's `/metrics`): overrides the two above.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contour: Option<contour::MetricsServer>,
    /// Contour's `metrics.envoy`: overrides `envoy.metrics`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub envoy: Option<contour::MetricsServer>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Endpoint {
    pub address: String,
    pub port: u16,
}

impl Endpoint {
    fn new(address: &str, port: u16) -> Self {
        Endpoint {
            address: address.to_string(),
            port,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct EnvoyConfig {
    /// Envoy's plain HTTP listener (`--envoy-service-http-address/-port`).
    pub http: Endpoint,
    /// Envoy's HTTPS listener (`--envoy-service-https-address/-port`).
    pub https: Endpoint,
    /// Envoy's `stats-health` listener (`--stats-address/-port`): stats and readiness;
    /// stats alone (`stats`) when `health` is elsewhere or `metrics.envoy` has a
    /// certificate.
    pub metrics: Endpoint,
    /// Envoy's readiness (`/ready`, Contour's `health` listener) when not on `metrics`.
    pub health: Endpoint,
    /// Envoy's access log path for the HTTP listener; empty disables it.
    pub access_log: String,
    /// Every listener but `stats-health` expects a PROXY protocol header (v1 or v2) from
    /// the load balancer in front (`--use-proxy-protocol`).
    pub use_proxy_protocol: bool,
}

impl Config {
    /// Envoy's listeners as the IR starts them, before any source writes to them:
    /// Contour's `ingress_http`, `ingress_https`, `stats-health`, `envoy-admin` (on
    /// `network.admin-port`, unless 0) and `health-om-enforced`
    /// (`omEnforcedHealthListener`).
    pub fn listeners(&self) -> Vec<isobar_sdk::ir::Listener> {
        use isobar_sdk::ir::{Listener, STATS_LISTENER};
        let mut out = self.envoy.listeners();
        let (metrics, health) = (&self.envoy.metrics, &self.envoy.health);
        let tls = self.envoy_metrics_tls().is_some();
        if tls || metrics != health {
            // Contour's `stats` and `health` listeners in place of `stats-health`.
            out.retain(|l| l.name != STATS_LISTENER);
            out.push(Listener::stats_only(
                "stats",
                &metrics.address,
                metrics.port,
                tls,
            ));
            out.push(Listener::health("health", &health.address, health.port));
        }
        if let Ok(port) = u16::try_from(self.network.admin_port)
            && port > 0
        {
            out.push(isobar_sdk::ir::Listener::admin(
                "envoy-admin",
                "127.0.0.1",
                port,
            ));
        }
        if let Some(h) = &self.om_enforced_health_listener {
            out.push(isobar_sdk::ir::Listener::om_enforced_health(
                "health-om-enforced",
                &h.address,
                h.port,
            ));
        }
        out
    }
}

impl Config {
    /// `metrics.envoy`'s certificate files (chain, key, CA), when set: Envoy serves its
    /// stats over TLS with them.
    pub fn envoy_metrics_tls(&self) -> Option<(String, String, Option<String>)> {
        let m = self
            .metrics
            .envoy
            .as_ref()
            .filter(|m| !m.server_certificate_path.is_empty())?;
        Some((
            m.server_certificate_path.clone(),
            m.server_key_path.clone(),
            (!m.ca_certificate_path.is_empty()).then(|| m.ca_certificate_path.clone()),
        ))
    }
}

impl EnvoyConfig {
    /// Envoy's traffic and stats listeners as the IR starts them: Contour's
    /// `ingress_http`, `ingress_https` and `stats-health`.
    pub fn listeners(&self) -> Vec<isobar_sdk::ir::Listener> {
        use isobar_sdk::ir::{self, Listener, RouteNames};
        vec![
            Listener::http(ir::HTTP_LISTENER, &self.http.address, self.http.port),
            Listener::https(
                ir::HTTPS_LISTENER,
                &self.https.address,
                self.https.port,
                RouteNames {
                    prefix: "https".to_string(),
                    fallback: "ingress_fallbackcert".to_string(),
                },
            ),
            Listener::stats(ir::STATS_LISTENER, &self.metrics.address, self.metrics.port),
        ]
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct Timeouts {
    /// Upstream connect timeout of every cluster.
    pub connect_timeout: Dur,
    /// Contour's HTTP connection manager timeouts, each `""` (Envoy's default),
    /// `infinity` (none) or a duration (`30s`, `1m30s`).
    pub request_timeout: String,
    pub connection_idle_timeout: String,
    pub stream_idle_timeout: String,
    pub max_connection_duration: String,
    pub delayed_close_timeout: String,
    pub connection_shutdown_grace_period: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct PipelineConfig {
    /// Source plugins, in the order they run (a later source wins an identical route).
    pub sources: Vec<String>,
    /// Filter plugins, in order.
    pub filters: Vec<String>,
    /// Processor plugins, in order.
    pub processors: Vec<String>,
    /// Wait this long after a change for more changes before rebuilding (0 disables).
    pub holdoff_delay: Dur,
    /// Rebuild at the latest this long after the first pending change.
    pub holdoff_max_delay: Dur,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            xds_server: XdsServer::default(),
            metrics: Metrics {
                address: "0.0.0.0".to_string(),
                port: 8000,
                contour: None,
                envoy: None,
            },
            health: Endpoint::new("0.0.0.0", 8000),
            envoy: EnvoyConfig::default(),
            timeouts: Timeouts::default(),
            tls: TlsConfig::default(),
            pipeline: PipelineConfig::default(),
            plugins: default_plugin_sections(),
            gateway: None,
            ingress_status_address: String::new(),
            envoy_service_name: "envoy".to_string(),
            envoy_service_namespace: "projectcontour".to_string(),
            leader_election: LeaderElection::default(),
            debug_http: Endpoint::new("127.0.0.1", 6060),
            admission_webhook: AdmissionWebhook::default(),
            debug: false,
            accesslog_format: contour::AccessLogFormat::Envoy,
            accesslog_format_string: String::new(),
            json_fields: Vec::new(),
            accesslog_level: contour::AccessLogLevel::Info,
            disable_permit_insecure: false,
            disable_allow_chunked_length: false,
            disable_merge_slashes: false,
            server_header_transformation: contour::ServerHeader::Overwrite,
            enable_external_name_service: false,
            network: contour::Network::default(),
            default_http_versions: Vec::new(),
            incluster: false,
            kubeconfig: String::new(),
            cluster: sections::Cluster::default(),
            listener: sections::Listener::default(),
            policy: sections::Policy::default(),
            compression: sections::Compression::default(),
            rate_limit_service: None,
            global_ext_auth: None,
            tracing: None,
            feature_flags: Vec::new(),
            om_enforced_health_listener: None,
            server: sections::Server::default(),
            kubernetes_client_qps: None,
            kubernetes_client_burst: None,
            runtime_settings: BTreeMap::new(),
            disabled_features: Vec::new(),
        }
    }
}

/// The section of every plugin linked in that has settings, at its defaults (as its
/// registration gives them), so that `contour.yaml` shows (and the flags can set) every
/// setting.
fn default_plugin_sections() -> BTreeMap<String, serde_json::Value> {
    isobar_sdk::plugin::registered()
        .into_iter()
        .filter_map(|p| Some((p.name.to_string(), p.settings?.defaults())))
        .collect()
}

impl Default for XdsServer {
    fn default() -> Self {
        XdsServer {
            address: "127.0.0.1".to_string(),
            port: 8001,
            insecure: false,
            ca_file: String::new(),
            cert_file: String::new(),
            key_file: String::new(),
            vhds: true,
            route_shards_from: 1000,
        }
    }
}

impl Default for EnvoyConfig {
    fn default() -> Self {
        EnvoyConfig {
            http: Endpoint::new("0.0.0.0", 8080),
            https: Endpoint::new("0.0.0.0", 8443),
            metrics: Endpoint::new("0.0.0.0", 8002),
            health: Endpoint::new("0.0.0.0", 8002),
            access_log: "/dev/stdout".to_string(),
            use_proxy_protocol: false,
        }
    }
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect_timeout: Dur(Duration::from_secs(2)),
            request_timeout: String::new(),
            connection_idle_timeout: "60s".to_string(),
            stream_idle_timeout: String::new(),
            max_connection_duration: String::new(),
            delayed_close_timeout: String::new(),
            connection_shutdown_grace_period: String::new(),
        }
    }
}

impl Default for PipelineConfig {
    fn default() -> Self {
        PipelineConfig {
            sources: vec![
                "extension-service".to_string(),
                "ingress".to_string(),
                "httpproxy".to_string(),
            ],
            filters: vec!["ingress-class".to_string(), "root-namespaces".to_string()],
            processors: vec!["conflicts".to_string(), "tls-delegation".to_string()],
            holdoff_delay: Dur(Duration::from_millis(100)),
            holdoff_max_delay: Dur(Duration::from_millis(500)),
        }
    }
}

/// A duration written as Contour writes them: `2s`, `100ms`, `1m30s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dur(pub Duration);

impl Serialize for Dur {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(self.0).to_string())
    }
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(&text).map(Dur).map_err(|e| {
            serde::de::Error::custom(format!("{text:?} is not a duration like 2s or 100ms: {e}"))
        })
    }
}

mod tls;
use tls::check_ciphers;
pub use tls::{Fingerprint, NamespacedName, TlsConfig, check_curves};
mod load;
pub use load::{ConfigError, load, load_with};
