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
    /// The ADS flavour Envoy asks for: `sotw` (state of the world, whole responses) or
    /// `delta` (incremental: only changed resources and removals).
    #[arg(long, value_enum, default_value_t = XdsMode::Sotw)]
    pub xds_mode: XdsMode,
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
pub fn bootstrap(args: &BootstrapArgs) -> Value {
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
    json!({
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
                {"name": "admin", "admin_layer": {}}
            ]
        }
    })
}

/// Writes the bootstrap to `args.path` (or stdout for `-`).
pub fn write(args: &BootstrapArgs) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(&bootstrap(args))?;
    if args.path == "-" {
        println!("{text}");
    } else {
        std::fs::write(&args.path, text + "\n")
            .map_err(|e| anyhow::anyhow!("writing bootstrap to {}: {e}", args.path))?;
    }
    Ok(())
}
