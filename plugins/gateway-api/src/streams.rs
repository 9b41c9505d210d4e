//! TLSRoutes, TCPRoutes and UDPRoutes: connections forwarded by SNI (passed through, or
//! terminated by the listener) or by port, and datagrams by port, to weighted Services. A
//! backend that does not resolve takes no share (a TCP connection has no 500 to answer);
//! with none left the route forwards nothing, and `ResolvedRefs` says why.

use std::collections::{BTreeMap, BTreeSet};

use isobar_sdk::condition::Condition;
use isobar_sdk::ir::{
    Cluster, ClusterOptions, DownstreamTls, Locality, SecureVirtualHost, TcpProxy,
    UpstreamProtocol, WeightedCluster,
};
use isobar_sdk::{BuildContext, Ir, ObjectKey, ParentRef, StatusReport};

use crate::backend_tls::{BackendTls, Upstream};
use crate::gateways::{Family, Gateways, Served};
use crate::grants::Grants;
use crate::kinds::{TcpRoute, TlsRoute, UdpRoute};
use crate::routes::{Attachments, attach, invalid_hostname, ours, resolved_refs};
use crate::rules::{BackendRef, Unresolved, resolve};

/// A route's parents, its hostnames and its backends, whatever its kind.
struct Stream<'a> {
    kind: &'static str,
    parents: Vec<ParentRef>,
    hostnames: Vec<String>,
    backends: Vec<(BackendRef<'a>, Option<i32>)>,
    created: Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

/// The [`Stream`] of a TLS, TCP or UDP route (their specs share these fields).
macro_rules! stream {
    ($objects:expr, $route:expr, $kind:literal, $hostnames:expr) => {{
        let route = $route;
        let spec = &route.spec;
        Stream {
            kind: $kind,
            parents: crate::defaults::parents(
                $objects,
                spec.parent_refs
                    .iter()
                    .flatten()
                    .map(|p| parent_ref!(p))
                    .collect(),
                crate::defaults::is_all(spec.use_default_gateways.as_ref()),
            ),
            hostnames: $hostnames,
            backends: spec
                .rules
                .iter()
                .flat_map(|r| &r.backend_refs)
                .map(|b| (backend_ref!(b), b.weight))
                .collect(),
            created: route.metadata.creation_timestamp.as_ref(),
        }
    }};
}

fn tls_stream<'a>(objects: &isobar_sdk::Objects, route: &'a TlsRoute) -> Stream<'a> {
    stream!(objects, route, "TLSRoute", route.spec.hostnames.clone())
}

fn tcp_stream<'a>(objects: &isobar_sdk::Objects, route: &'a TcpRoute) -> Stream<'a> {
    stream!(objects, route, "TCPRoute", Vec::new())
}

fn udp_stream<'a>(objects: &isobar_sdk::Objects, route: &'a UdpRoute) -> Stream<'a> {
    stream!(objects, route, "UDPRoute", Vec::new())
}

/// Serves the TLSRoutes, TCPRoutes and UDPRoutes of the build's scope, oldest first (an
/// older route keeps an SNI name, or a TCP or UDP listener's traffic, a newer one names
/// too).
pub fn serve(
    ctx: &BuildContext<'_>,
    grants: &Grants<'_>,
    (gateways, tls): (&Gateways, &BackendTls),
    ir: &mut Ir,
    status: &mut StatusReport,
    (attached, policies): (
        &mut BTreeMap<ObjectKey, Attachments>,
        &mut BTreeMap<ObjectKey, BTreeSet<ObjectKey>>,
    ),
) {
    let mut streams: Vec<(ObjectKey, Stream<'_>)> = ctx
        .all::<TlsRoute>()
        .map(|(k, r)| (k, tls_stream(ctx.store(), r)))
        .chain(
            ctx.all::<TcpRoute>()
                .map(|(k, r)| (k, tcp_stream(ctx.store(), r))),
        )
        .chain(
            ctx.all::<UdpRoute>()
                .map(|(k, r)| (k, udp_stream(ctx.store(), r))),
        )
        .collect();
    streams.sort_by(|(ka, a), (kb, b)| a.created.cmp(&b.created).then_with(|| ka.cmp(kb)));
    for (key, stream) in streams {
        // Reported even with no parent of this controller's (see HTTPRoutes).
        status.gateway(&key);
        let mut to = Attachments::new();
        let used = serve_stream(
            ctx,
            grants,
            (gateways, tls),
            &key,
            &stream,
            ir,
            status,
            &mut to,
        );
        if !used.is_empty() {
            policies.insert(key.clone(), used);
        }
        attached.insert(key, to);
    }
}

/// The weighted clusters of a route's backends, those clusters, and the first backend
/// that did not resolve.
type Backends = (Vec<WeightedCluster>, Vec<Cluster>, Option<Unresolved>);

/// [`Backends`] of a route's backends: in clear, or (with `tls`) over TLS where a
/// BackendTLSPolicy says so.
fn backends(
    ctx: &BuildContext<'_>,
    grants: &Grants<'_>,
    key: &ObjectKey,
    stream: &Stream<'_>,
    tls: Option<&Upstream<'_>>,
) -> Backends {
    let (mut weighted, mut clusters, mut unresolved) = (Vec::new(), Vec::new(), None);
    for (reference, weight) in &stream.backends {
        let base = ClusterOptions {
            protocol: (stream.kind == "UDPRoute").then_some(UpstreamProtocol::Udp),
            ..ClusterOptions::default()
        };
        match resolve(ctx, grants, key, reference, base, tls) {
            Ok(cluster) => {
                let weight = u32::try_from(weight.unwrap_or(1)).unwrap_or(0);
                if weight > 0 {
                    weighted.push(WeightedCluster {
                        cluster: cluster.name.clone(),
                        weight,
                        ..Default::default()
                    });
                }
                clusters.push(cluster);
            }
            Err(e) => {
                unresolved.get_or_insert(e);
            }
        }
    }
    WeightedCluster::fit_weights(&mut weighted);
    if stream.kind == "UDPRoute"
        && weighted.len() > 1
        && let Some(one) = localities(key, &weighted, &clusters)
    {
        weighted = vec![WeightedCluster {
            cluster: one.name.clone(),
            weight: 1,
            ..Default::default()
        }];
        clusters = vec![one];
    }
    (weighted, clusters, unresolved)
}

/// A UDPRoute's weighted backends as one cluster (Envoy's UDP proxy sends to one): each
/// backend's Service a locality with its weight. Named after the route and what it
/// holds, so that a change of backends or weights is a new cluster.
fn localities(
    key: &ObjectKey,
    weighted: &[WeightedCluster],
    clusters: &[Cluster],
) -> Option<Cluster> {
    let mut first: Option<&Cluster> = None;
    let mut localities = Vec::new();
    for w in weighted {
        let Some(c) = clusters.iter().find(|c| c.name == w.cluster) else {
            continue;
        };
        let first = *first.get_or_insert(c);
        localities.push(Locality {
            namespace: if c.namespace == first.namespace {
                String::new()
            } else {
                c.namespace.clone()
            },
            service: c.service.clone(),
            port_name: c.port_name.clone(),
            weight: w.weight,
        });
    }
    let first = first?.clone();
    let held = serde_json::to_string(&localities).unwrap_or_default();
    let name = isobar_sdk::names::hashname(
        60,
        &[
            "udproute",
            &key.namespace,
            &key.name,
            &isobar_sdk::names::short_hash(&held),
        ],
    );
    Some(Cluster {
        alt_stat_name: name.replace('/', "_"),
        eds_name: name.clone(),
        name,
        localities,
        ..first
    })
}

/// `Accepted`, or not when a route created before it holds each of its SNI names.
fn accepted_unless_held(accepted: bool) -> Condition {
    if accepted {
        Condition::new("Accepted", true, "Accepted", "")
    } else {
        Condition::new(
            "Accepted",
            false,
            "HostnameConflict",
            "a route created before it holds each of its SNI names",
        )
    }
}

/// Puts `proxy` on each of `hosts` (SNI names) of the TLS `listener` that no older
/// route holds: whether the route holds any of them, and whether an older route holds
/// one.
fn hold_names(ir: &mut Ir, listener: &Served, hosts: &[String], proxy: &TcpProxy) -> (bool, bool) {
    let (mut holds, mut held) = (false, false);
    let Some(vhosts) = ir.secure_virtual_hosts_mut(&listener.envoy) else {
        return (holds, held);
    };
    for host in hosts {
        let tls = listener.secret.as_ref().map(|sds| DownstreamTls {
            secret: sds.clone(),
            min_version: None,
            max_version: None,
            alpn_http: false,
            client_validation: None,
        });
        let vhost = vhosts
            .entry(host.clone())
            .or_insert_with(|| SecureVirtualHost {
                tcp_proxy: Some(proxy.clone()),
                ..SecureVirtualHost::new(host, tls)
            });
        if vhost
            .tcp_proxy
            .as_ref()
            .is_some_and(|p| p.source == proxy.source)
        {
            holds = true;
        } else {
            held = true;
        }
    }
    (holds, held)
}

/// Serves one route on each of its parents; the BackendTLSPolicies its backends were
/// spoken to under (a TLSRoute's on listeners that terminate TLS: Envoy speaks TLS to
/// the backend again as the policy says).
#[allow(clippy::too_many_arguments)]
fn serve_stream(
    ctx: &BuildContext<'_>,
    grants: &Grants<'_>,
    (gateways, tls): (&Gateways, &BackendTls),
    key: &ObjectKey,
    stream: &Stream<'_>,
    ir: &mut Ir,
    status: &mut StatusReport,
    attached: &mut Attachments,
) -> BTreeSet<ObjectKey> {
    let mut resolved = None;
    // Over TLS where a policy says so, for listeners that terminate: once, if any does.
    let mut reencrypted: Option<Backends> = None;
    let mut used_policies = BTreeSet::new();
    let mut forwarded = false;
    let bad_host = invalid_hostname(&stream.hostnames);
    for parent in &stream.parents {
        let Some((gateway, listeners)) = ours(gateways, key, parent) else {
            continue;
        };
        // References resolve (or not) whether or not the parent takes the route.
        let (weighted, _, unresolved) =
            resolved.get_or_insert_with(|| backends(ctx, grants, key, stream, None));
        let verdict = match &bad_host {
            Some(condition) => Err(condition.clone()),
            None => attach(
                ctx,
                listeners,
                stream.kind,
                &key.namespace,
                parent,
                &stream.hostnames,
            ),
        };
        let gw = status.gateway(key);
        let hosted = match verdict {
            Ok(hosted) => hosted,
            Err(condition) => {
                gw.set_parent(parent, condition);
                gw.set_parent(parent, resolved_refs(unresolved.as_ref()));
                continue;
            }
        };
        // Whether an older route holds every SNI name it would get.
        let mut taken = false;
        let mut served = false;
        for (listener, hosts) in &hosted {
            if !listener.programmed {
                served = true;
                continue;
            }
            let terminates = stream.kind == "TLSRoute" && listener.secret.is_some();
            let clusters = if terminates && !tls.is_empty() {
                let upstream = Upstream {
                    policies: tls,
                    client_certificate: gateways
                        .client_certificates
                        .get(&gateway)
                        .map(String::as_str),
                    traffic: None,
                };
                used_policies.extend(
                    stream
                        .backends
                        .iter()
                        .flat_map(|(reference, _)| reference.policies(key, tls, None)),
                );
                let (weighted, _, _) = reencrypted
                    .get_or_insert_with(|| backends(ctx, grants, key, stream, Some(&upstream)));
                weighted.clone()
            } else {
                weighted.clone()
            };
            // A route none of whose backends resolves still holds its names: each of its
            // connections is accepted and closed (no cluster), not refused at the port.
            let proxy = TcpProxy {
                clusters,
                source: key.clone(),
            };
            // A TCP listener forwards to its oldest route; a newer one is accepted and
            // counted all the same (the suite's TCPRouteMultipleRoutesAttachment), and
            // takes over once the older one goes.
            if matches!(listener.family, Family::Tcp | Family::Udp) {
                if let Some(l) = ir.listeners.get_mut(&listener.envoy) {
                    l.tcp_proxy.get_or_insert(proxy);
                    served = true;
                }
                continue;
            }
            let (holds, held) = hold_names(ir, listener, hosts, &proxy);
            served |= holds;
            taken |= held;
        }
        let accepted = served || !taken;
        gw.set_parent(parent, accepted_unless_held(accepted));
        gw.set_parent(parent, resolved_refs(unresolved.as_ref()));
        if !accepted {
            continue;
        }
        forwarded = true;
        for (listener, _) in hosted {
            attached.insert((gateway.clone(), listener.name.clone()));
        }
    }
    if forwarded {
        for (_, clusters, _) in resolved.into_iter().chain(reencrypted) {
            for cluster in clusters {
                ir.add_cluster(cluster);
            }
        }
    }
    used_policies
}
