//! `isobar bootstrap`: the Envoy bootstrap that points Envoy at Isobar over ADS.

use std::net::IpAddr;

use serde_json::{Value, json};

use crate::xds::listener::ADMIN_CLUSTER;

/// The xDS cluster name in the bootstrap (Contour's).
pub const XDS_CLUSTER: &str = "contour";

#[derive(Debug, Clone, clap::Args)]
pub struct BootstrapArgs {
    /// Where to write the bootstrap JSON; `-` for stdout.
    pub path: String,
    /// Isobar's xDS address.
    #[arg(long, default_value = "127.0.0.1")]
    pub xds_address: String,
    /// Isobar's xDS port.
    #[arg(long, default_value_t = 8001)]
    pub xds_port: u16,
    /// The unix socket Envoy's admin listens on.
    #[arg(long, default_value = "/admin/admin.sock")]
    pub admin_address: String,
    /// The namespace Envoy runs in (used in the node and stat names).
    #[arg(long, env = "CONTOUR_NAMESPACE", default_value = "projectcontour")]
    pub namespace: String,
    /// The Envoy node id (Envoy's `--service-node` overrides it).
    #[arg(long, default_value = "envoy")]
    pub node_id: String,
    /// The ADS flavour Envoy asks for: `delta` (incremental: only changed resources and
    /// removals, and each plain vhost on its own over VHDS) or `sotw` (state of the
    /// world, whole responses; what Contour's bootstrap asks for).
    #[arg(long, value_enum, default_value_t = XdsMode::Delta)]
    pub xds_mode: XdsMode,
    /// CA that signed Isobar's xDS certificate (xDS over mutual TLS; with the two below).
    #[arg(long, env = "ENVOY_CAFILE")]
    pub envoy_cafile: Option<String>,
    /// Envoy's client certificate chain for xDS.
    #[arg(long, env = "ENVOY_CERT_FILE")]
    pub envoy_cert_file: Option<String>,
    /// Its private key.
    #[arg(long, env = "ENVOY_KEY_FILE")]
    pub envoy_key_file: Option<String>,
    /// Contour's deprecated admin port: accepted, not used (Envoy's admin is the unix
    /// socket of `--admin-address` only, which the shutdown manager uses).
    #[arg(long)]
    pub admin_port: Option<u16>,
    /// How Envoy resolves `--xds-address` when it is a name: `auto`, `v4`, `v6`, `all`.
    #[arg(long, value_enum, default_value_t = DnsLookupFamily::Auto)]
    pub dns_lookup_family: DnsLookupFamily,
    /// Envoy's heap limit in bytes: past 95% it shrinks its heap, past 98% it stops
    /// accepting requests (Envoy's overload manager, Contour's thresholds); 0: no limit.
    #[arg(long, default_value_t = 0)]
    pub overload_max_heap: u64,
    /// The most downstream connections Envoy accepts, over all listeners (Envoy's global
    /// connection limit); unset: no limit.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub overload_downstream_max_conn: Option<u64>,
    /// The xDS API version: `v3`, the only one Envoy has (Contour's flag).
    #[arg(long, default_value = "v3", value_parser = ["v3"])]
    pub xds_resource_version: String,
    /// Write the client certificate and CA as SDS files under `DIR/sds/`, which Envoy
    /// re-reads when the certificate files are replaced (rotation without a restart).
    #[arg(long)]
    pub resources_dir: Option<String>,
    /// How often Envoy flushes its stats (e.g. `5s`, Envoy's own default), for stat sinks
    /// added to the bootstrap. Unset: only when its admin is asked (a Prometheus scrape),
    /// as no sink is configured: a flush walks every stat on Envoy's main thread (about
    /// 100 ms at 10,000 clusters), and every 5 s it held up the xDS updates behind it.
    #[arg(long, value_parser = flush_interval)]
    pub stats_flush_interval: Option<std::time::Duration>,
    /// Create each cluster's traffic stats (`upstream_rq_*`, `upstream_cx_*`, …) with the
    /// cluster, as Envoy does unless told otherwise (and on Contour's bootstrap). Unset:
    /// on the cluster's first use (Envoy's `enable_deferred_creation_stats`): at 10,000
    /// clusters Envoy then starts serving about 2.5 s sooner and holds 200 MiB less.
    #[arg(long)]
    pub eager_stats: bool,
}

/// A stats flush interval Envoy takes: from 1 ms to 5 minutes (its bounds).
fn flush_interval(text: &str) -> Result<std::time::Duration, String> {
    let every = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    if every < std::time::Duration::from_millis(1) || every >= std::time::Duration::from_secs(300) {
        return Err(format!(
            "{text}: Envoy flushes stats every 1 ms to 5 minutes (exclusive)"
        ));
    }
    Ok(every)
}

/// The SDS names of Envoy's xDS client certificate and of the CA it checks Isobar with.
const XDS_CERTIFICATE: &str = "contour_xds_tls_certificate";
const XDS_VALIDATION: &str = "contour_xds_tls_validation_context";

/// The certificate Isobar's xDS server presents must carry this name (certgen's).
const XDS_SERVER_NAME: &str = "contour";

/// The xDS cluster's TLS, when the three files are given: inline file names, or SDS
/// files under the resources directory (written by [`write`]).
fn xds_tls(args: &BootstrapArgs) -> anyhow::Result<Option<Value>> {
    let (ca, cert, key) = match (
        &args.envoy_cafile,
        &args.envoy_cert_file,
        &args.envoy_key_file,
    ) {
        (None, None, None) => return Ok(None),
        (Some(ca), Some(cert), Some(key)) => (ca, cert, key),
        _ => anyhow::bail!(
            "--envoy-cafile, --envoy-cert-file and --envoy-key-file go together (xDS over mutual TLS)"
        ),
    };
    let names = json!([{"san_type": "DNS", "matcher": {"exact": XDS_SERVER_NAME}}]);
    let context = match &args.resources_dir {
        None => json!({
            "tls_params": {"tls_maximum_protocol_version": "TLSv1_3"},
            "tls_certificates": [{"certificate_chain": {"filename": cert}, "private_key": {"filename": key}}],
            "validation_context": {"trusted_ca": {"filename": ca}, "match_typed_subject_alt_names": names},
        }),
        Some(dir) => {
            let sds = |name: &str, file: &str| {
                let watched = std::path::Path::new(cert)
                    .parent()
                    .map(|d| d.display().to_string())
                    .filter(|d| !d.is_empty())
                    .unwrap_or_else(|| ".".to_string());
                json!({
                    "name": name,
                    "sds_config": {
                        "path_config_source": {
                            "path": format!("{dir}/sds/{file}"),
                            "watched_directory": {"path": watched},
                        },
                        "resource_api_version": "V3",
                    },
                })
            };
            json!({
                "tls_params": {"tls_maximum_protocol_version": "TLSv1_3"},
                "tls_certificate_sds_secret_configs": [sds(XDS_CERTIFICATE, "xds-tls-certificate.json")],
                "combined_validation_context": {
                    "default_validation_context": {"match_typed_subject_alt_names": names},
                    "validation_context_sds_secret_config": sds(XDS_VALIDATION, "xds-validation-context.json"),
                },
            })
        }
    };
    Ok(Some(json!({
        "name": "envoy.transport_sockets.tls",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
            "common_tls_context": context,
        },
    })))
}

/// Envoy's overload manager with a heap limit: shrink the heap past 95% of it, stop
/// accepting requests past 98% (Contour's thresholds).
fn overload_manager(max_heap: u64, max_connections: Option<u64>) -> Value {
    let heap = "envoy.resource_monitors.fixed_heap";
    let threshold = |value: f64| json!({"name": heap, "threshold": {"value": value}});
    let mut monitors = Vec::new();
    let mut actions = Vec::new();
    if max_heap > 0 {
        monitors.push(json!({
            "name": heap,
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.resource_monitors.fixed_heap.v3.FixedHeapConfig",
                "max_heap_size_bytes": max_heap,
            },
        }));
        actions.push(
            json!({"name": "envoy.overload_actions.shrink_heap", "triggers": [threshold(0.95)]}),
        );
        actions.push(json!({"name": "envoy.overload_actions.stop_accepting_requests", "triggers": [threshold(0.98)]}));
    }
    if let Some(max) = max_connections {
        monitors.push(json!({
            "name": "envoy.resource_monitors.global_downstream_max_connections",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.resource_monitors.downstream_connections.v3.DownstreamConnectionsConfig",
                "max_active_downstream_connections": max,
            },
        }));
    }
    json!({"refresh_interval": "0.25s", "resource_monitors": monitors, "actions": actions})
}

/// The SDS files of `--resources-dir`: `(path, contents)`.
fn sds_files(args: &BootstrapArgs) -> Vec<(String, Value)> {
    let (Some(dir), Some(ca), Some(cert), Some(key)) = (
        &args.resources_dir,
        &args.envoy_cafile,
        &args.envoy_cert_file,
        &args.envoy_key_file,
    ) else {
        return Vec::new();
    };
    let secret = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret";
    vec![
        (
            format!("{dir}/sds/xds-tls-certificate.json"),
            json!({"resources": [{"@type": secret, "name": XDS_CERTIFICATE, "tls_certificate": {
                "certificate_chain": {"filename": cert}, "private_key": {"filename": key}}}]}),
        ),
        (
            format!("{dir}/sds/xds-validation-context.json"),
            json!({"resources": [{"@type": secret, "name": XDS_VALIDATION, "validation_context": {
                "trusted_ca": {"filename": ca}}}]}),
        ),
    ]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DnsLookupFamily {
    Auto,
    V4,
    V6,
    All,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum XdsMode {
    Sotw,
    Delta,
}

fn endpoint(address: Value) -> Value {
    json!({"lb_endpoints": [{"endpoint": {"address": address}}]})
}

/// The bootstrap document.
pub fn bootstrap(args: &BootstrapArgs) -> anyhow::Result<Value> {
    let tls = xds_tls(args)?;
    let discovery = if args.xds_address.parse::<IpAddr>().is_ok() {
        "STATIC"
    } else {
        "STRICT_DNS"
    };
    let xds_address =
        json!({"socket_address": {"address": args.xds_address, "port_value": args.xds_port}});
    let thresholds = |priority: &str| {
        json!({
            "priority": priority,
            "max_connections": 100000,
            "max_pending_requests": 100000,
            "max_requests": 60000000,
            "max_retries": 50
        })
    };
    let mut doc = json!({
        "node": {"id": args.node_id, "cluster": args.namespace},
        "admin": {
            "address": {"pipe": {"path": args.admin_address}},
            "access_log": [{
                "name": "envoy.access_loggers.file",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog",
                    "path": "/dev/null"
                }
            }]
        },
        "dynamic_resources": {
            "ads_config": {
                "api_type": match args.xds_mode {
                    XdsMode::Sotw => "GRPC",
                    XdsMode::Delta => "DELTA_GRPC",
                },
                "transport_api_version": "V3",
                "grpc_services": [{"envoy_grpc": {"cluster_name": XDS_CLUSTER}}]
            },
            "lds_config": {"ads": {}, "resource_api_version": "V3"},
            "cds_config": {"ads": {}, "resource_api_version": "V3"}
        },
        "static_resources": {
            "clusters": [
                {
                    "name": XDS_CLUSTER,
                    "alt_stat_name": format!("{}_contour_{}", args.namespace, args.xds_port),
                    "type": discovery,
                    "connect_timeout": "5s",
                    "load_assignment": {"cluster_name": XDS_CLUSTER, "endpoints": [endpoint(xds_address)]},
                    "circuit_breakers": {"thresholds": [thresholds("HIGH"), thresholds("DEFAULT")]},
                    "typed_extension_protocol_options": {
                        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                            "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                            "explicit_http_config": {"http2_protocol_options": {}}
                        }
                    },
                    "upstream_connection_options": {
                        "tcp_keepalive": {"keepalive_probes": 3, "keepalive_time": 30, "keepalive_interval": 5}
                    }
                },
                {
                    "name": ADMIN_CLUSTER,
                    "type": "STATIC",
                    "connect_timeout": "0.250s",
                    "load_assignment": {
                        "cluster_name": ADMIN_CLUSTER,
                        "endpoints": [endpoint(json!({"pipe": {"path": args.admin_address}}))]
                    }
                }
            ]
        },
        "default_regex_engine": {
            "name": "envoy.regex_engines.google_re2",
            "typed_config": {"@type": "type.googleapis.com/envoy.extensions.regex_engines.v3.GoogleRE2"}
        },
        "layered_runtime": {
            "layers": [
                {"name": "static", "static_layer": {
                    "re2.max_program_size.error_level": 1048576,
                    "re2.max_program_size.warn_level": 1000
                }},
                // Contour's layer over RTDS: the `listener` section's runtime keys.
                {"name": "dynamic", "rtds_layer": {
                    "name": crate::xds::runtime::DYNAMIC_LAYER,
                    "rtds_config": {"ads": {}, "resource_api_version": "V3"}
                }},
                {"name": "admin", "admin_layer": {}}
            ]
        }
    });
    if let Some(tls) = tls {
        doc["static_resources"]["clusters"][0]["transport_socket"] = tls;
    }
    if discovery == "STRICT_DNS" {
        doc["static_resources"]["clusters"][0]["dns_lookup_family"] =
            json!(match args.dns_lookup_family {
                DnsLookupFamily::Auto => "AUTO",
                DnsLookupFamily::V4 => "V4_ONLY",
                DnsLookupFamily::V6 => "V6_ONLY",
                DnsLookupFamily::All => "ALL",
            });
    }
    match args.stats_flush_interval {
        Some(every) => {
            doc["stats_flush_interval"] = json!(format!("{}s", every.as_secs_f64()));
        }
        None => doc["stats_flush_on_admin"] = json!(true),
    }
    if !args.eager_stats {
        doc["deferred_stat_options"] = json!({"enable_deferred_creation_stats": true});
    }
    if args.overload_max_heap > 0 || args.overload_downstream_max_conn.is_some() {
        doc["overload_manager"] =
            overload_manager(args.overload_max_heap, args.overload_downstream_max_conn);
    }
    Ok(doc)
}

/// Writes the bootstrap to `args.path` (or stdout for `-`).
pub fn write(args: &BootstrapArgs) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(&bootstrap(args)?)?;
    for (path, contents) in sds_files(args) {
        if let Some(parent) = std::path::Path::new(&path).parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| anyhow::anyhow!("creating {}: {e}", parent.display()))?;
        }
        std::fs::write(&path, serde_json::to_string_pretty(&contents)? + "\n")
            .map_err(|e| anyhow::anyhow!("writing {path}: {e}"))?;
    }
    if args.path == "-" {
        println!("{text}");
    } else {
        std::fs::write(&args.path, text + "\n")
            .map_err(|e| anyhow::anyhow!("writing bootstrap to {}: {e}", args.path))?;
    }
    Ok(())
}
