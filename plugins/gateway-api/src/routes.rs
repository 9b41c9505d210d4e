//! HTTPRoutes: which served listeners each attaches to (per parent reference), the
//! hosts it gets there, its rules placed on those hosts, and its `status.parents[]`.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use gateway_api::apis::experimental::httproutes::HttpRouteSpec;

use isobar_sdk::condition::Condition;
use isobar_sdk::{BuildContext, GatewayStatus, Ir, ObjectKey, ParentRef, StatusReport};

mod place;

use place::{Placed, place};

use crate::backend_tls::BackendTls;
use crate::backend_traffic::BackendTraffic;
use crate::gateways::{Gateways, Served};
use crate::grants::Grants;
use crate::hosts::intersect;
use crate::kinds::{GATEWAY, GROUP, GRPC_ROUTE, GrpcRoute, HttpRoute};
use crate::rules::rules;

/// The Gateway listeners (`(gateway, listener name)`) a route is attached to.
/// (A sorted vector: most routes attach to one listener, and a B-tree's first node
/// holds room for eleven.)
pub type Attachments = isobar_sdk::SmallSet<(ObjectKey, String)>;

/// What serving the routes came to, per route: the listeners each is attached to, and
/// the policies naming the Services each sends to.
#[derive(Debug, Default)]
pub struct Outcome {
    pub attached: BTreeMap<ObjectKey, Attachments>,
    pub policies: BTreeMap<ObjectKey, BTreeSet<ObjectKey>>,
}

/// Serves every HTTPRoute and GRPCRoute (of the build's scope) attached to a served
/// Gateway, oldest first (an older route keeps a match a newer one repeats), then the
/// TLSRoutes and TCPRoutes; returns the listeners each route served is attached to.
pub fn serve(
    ctx: &BuildContext<'_>,
    grants: &Grants<'_>,
    gateways: &Gateways,
    tls: &BackendTls,
    traffic: &BackendTraffic,
    ir: &mut Ir,
    status: &mut StatusReport,
) -> Outcome {
    let mut outcome = Outcome::default();
    type Created<'a> = Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>;
    let mut routes: Vec<(ObjectKey, Created<'_>, Cow<'_, HttpRouteSpec>)> = ctx
        .all::<HttpRoute>()
        .map(|(k, r)| {
            (
                k,
                r.metadata.creation_timestamp.as_ref(),
                Cow::Borrowed(&r.spec),
            )
        })
        .collect();
    // A GRPCRoute that decoded converts (the decoder checked it).
    routes.extend(ctx.all::<GrpcRoute>().filter_map(|(k, r)| {
        let spec = crate::grpc::as_http(&r.spec).ok()?;
        Some((k, r.metadata.creation_timestamp.as_ref(), Cow::Owned(spec)))
    }));
    routes.sort_by(|(ka, a, _), (kb, b, _)| a.cmp(b).then_with(|| ka.cmp(kb)));
    // Only GRPCRoutes can conflict with HTTPRoutes: without any, nothing is tracked.
    let mut hosts = (!ctx.store().of_kind(GRPC_ROUTE).is_empty()).then(HostKinds::new);
    for (key, created, spec) in routes {
        let mut to = Attachments::new();
        let env = Env {
            ctx,
            grants,
            gateways,
            tls,
            traffic,
            created: created.map(|t| t.0.as_second()),
        };
        let used = serve_route(&env, &key, &spec, ir, status, &mut to, hosts.as_mut());
        if !used.is_empty() {
            outcome.policies.insert(key.clone(), used);
        }
        outcome.attached.insert(key, to);
    }
    crate::streams::serve(
        ctx,
        grants,
        (gateways, tls),
        ir,
        status,
        (&mut outcome.attached, &mut outcome.policies),
    );
    refused(ctx, gateways, status);
    outcome
}

/// The kinds of route this plugin serves.
pub const ROUTE_KINDS: [isobar_sdk::Kind; 5] = [
    crate::kinds::HTTP_ROUTE,
    GRPC_ROUTE,
    crate::kinds::TLS_ROUTE,
    crate::kinds::TCP_ROUTE,
    crate::kinds::UDP_ROUTE,
];

/// Routes (of the build's scope) a filter or processor turned away before the sources
/// ran (an OPA policy's `deny`): each parent of this controller's gets `Accepted` False
/// with the first error's reason and message, so the refusal shows where Gateway API
/// users look for it.
fn refused(ctx: &BuildContext<'_>, gateways: &Gateways, status: &mut StatusReport) {
    let store = ctx.store();
    let keys: Vec<ObjectKey> = match ctx.scope() {
        Some(scope) => scope
            .iter()
            .filter(|k| ROUTE_KINDS.contains(&k.kind))
            .cloned()
            .collect(),
        None => ROUTE_KINDS
            .iter()
            .flat_map(|kind| {
                store
                    .of_kind(*kind)
                    .keys()
                    .map(move |(ns, name)| ObjectKey::new(*kind, ns, name))
            })
            .collect(),
    };
    for key in keys.into_iter().filter(|k| !ctx.admitted(k)) {
        let Some(object) = store.object(&key) else {
            continue;
        };
        let Some(error) = status.get(&key).and_then(|s| s.errors.first()).cloned() else {
            continue;
        };
        let parents: Vec<ParentRef> = object
            .to_json()
            .pointer("/spec/parentRefs")
            .cloned()
            .and_then(|p| serde_json::from_value(p).ok())
            .unwrap_or_default();
        for parent in parents.into_iter().map(crate::defaulted) {
            if ours(gateways, &key, &parent).is_some() {
                status.gateway(&key).set_parent(
                    &parent,
                    Condition::new("Accepted", false, error.reason.as_str(), &error.message),
                );
            }
        }
    }
}

/// `Accepted` False when one of a route's hostnames is not a host name Gateway API
/// allows (Envoy would refuse it as a domain or server name).
pub fn invalid_hostname(hostnames: &[String]) -> Option<Condition> {
    let bad = hostnames
        .iter()
        .find(|h| !crate::hosts::valid(&h.to_ascii_lowercase()))?;
    Some(Condition::new(
        "Accepted",
        false,
        "UnsupportedValue",
        format!("hostname {bad:?} is not a valid host name"),
    ))
}

/// The Gateway (or ListenerSet) a parent reference names and its served listeners, when
/// it is one of this controller's.
pub fn ours<'g>(
    gateways: &'g Gateways,
    route: &ObjectKey,
    parent: &ParentRef,
) -> Option<(ObjectKey, &'g [Served])> {
    if parent.group.as_deref().unwrap_or(GROUP) != GROUP {
        return None;
    }
    // A ListenerSet's listeners are served under its own key.
    let kind = match parent.kind.as_deref().unwrap_or("Gateway") {
        "Gateway" => GATEWAY,
        "ListenerSet" => crate::kinds::LISTENER_SET,
        _ => return None,
    };
    let namespace = parent.namespace.as_deref().unwrap_or(&route.namespace);
    let gateway = ObjectKey::new(kind, namespace, &parent.name);
    let listeners = gateways.listeners.get(&gateway)?;
    Some((gateway, listeners.as_slice()))
}

/// The listeners one parent reference of a route of `kind` attaches to, with its hosts
/// on each; or the reason it attaches to none.
pub fn attach<'g>(
    ctx: &BuildContext<'_>,
    listeners: &'g [Served],
    kind: &str,
    namespace: &str,
    parent: &ParentRef,
    hostnames: &[String],
) -> Result<Vec<(&'g Served, Vec<String>)>, Condition> {
    let candidates: Vec<&Served> = listeners
        .iter()
        .filter(|l| parent.section_name.as_ref().is_none_or(|s| *s == l.name))
        .filter(|l| parent.port.is_none_or(|p| p == l.port))
        .collect();
    if candidates.is_empty() {
        return Err(Condition::new(
            "Accepted",
            false,
            "NoMatchingParent",
            "no listener of the Gateway matches the parentRef's sectionName and port",
        ));
    }
    let allowed: Vec<&Served> = candidates
        .into_iter()
        .filter(|l| l.kinds.contains(&kind) && l.admits(ctx, namespace))
        .collect();
    if allowed.is_empty() {
        return Err(Condition::new(
            "Accepted",
            false,
            "NotAllowedByListeners",
            format!("no listener it names takes {kind}s from namespace {namespace}"),
        ));
    }
    // Listener isolation: a host a more specific listener of the Gateway on the same
    // port covers is that listener's alone.
    let hosted: Vec<(&Served, Vec<String>)> = allowed
        .into_iter()
        .map(|l| {
            let mut hosts = intersect(l.hostname.as_deref(), hostnames);
            hosts.retain(|h| !isolated(listeners, l, h));
            (l, hosts)
        })
        .filter(|(_, hosts)| !hosts.is_empty())
        .collect();
    if hosted.is_empty() {
        return Err(Condition::new(
            "Accepted",
            false,
            "NoMatchingListenerHostname",
            "no listener hostname intersects the route's hostnames",
        ));
    }
    Ok(hosted)
}

/// Whether a listener of `listeners` on `listener`'s port with a more specific hostname
/// covers `host`: requests for it are that listener's.
fn isolated(listeners: &[Served], listener: &Served, host: &str) -> bool {
    let rank = |h: Option<&str>| match h {
        None => (0, 0),
        Some(h) if h.starts_with('*') => (1, h.split('.').count()),
        Some(_) => (2, 0),
    };
    let own = rank(listener.hostname.as_deref());
    listeners.iter().any(|other| {
        other.port == listener.port
            && other.name != listener.name
            && rank(other.hostname.as_deref()) > own
            && other
                .hostname
                .as_deref()
                .is_some_and(|h| crate::hosts::covers(&h.to_ascii_lowercase(), host))
    })
}

/// By Gateway listener and host: the kind of route (HTTPRoute or GRPCRoute) that has it.
type HostKinds = BTreeMap<(ObjectKey, String), BTreeMap<String, bool>>;

/// What serving a route reads besides the route.
struct Env<'c, 'a> {
    ctx: &'c BuildContext<'a>,
    grants: &'c Grants<'a>,
    gateways: &'c Gateways,
    tls: &'c BackendTls,
    traffic: &'c BackendTraffic,
    /// The route's creation time (seconds), which orders it among equally specific
    /// matches of other routes.
    created: Option<i64>,
}

/// Serves one HTTPRoute (or GRPCRoute as one); returns the policies naming
/// the Services it sends to. On a listener where an older route of the other kind has
/// one of its hosts, it is not accepted (GRPCRoutes and HTTPRoutes are never merged).
fn serve_route(
    env: &Env<'_, '_>,
    key: &ObjectKey,
    spec: &HttpRouteSpec,
    ir: &mut Ir,
    status: &mut StatusReport,
    attached: &mut Attachments,
    mut host_kinds: Option<&mut HostKinds>,
) -> BTreeSet<ObjectKey> {
    let Env {
        ctx,
        grants,
        gateways,
        created,
        ..
    } = *env;
    // Reported even with no parent of this controller's: entries it wrote before (a
    // parent named no longer, a default Gateway no more) go.
    status.gateway(key);
    let grpc = key.kind == GRPC_ROUTE;
    let kind = if grpc { "GRPCRoute" } else { "HTTPRoute" };
    let hostnames: Vec<String> = spec.hostnames.clone().unwrap_or_default();
    let mut translated = None;
    let mut placed = false;
    let parents: Vec<ParentRef> = crate::defaults::parents(
        ctx.store(),
        spec.parent_refs
            .iter()
            .flatten()
            .map(|p| parent_ref!(p))
            .collect(),
        crate::defaults::is_all(spec.use_default_gateways.as_ref()),
    );
    let upstream = upstream(env, key, &parents);
    let bad_host = invalid_hostname(&hostnames);
    for parent in parents {
        // Another controller's Gateway (or none): not this controller's to report.
        let Some((gateway, listeners)) = ours(gateways, key, &parent) else {
            continue;
        };
        // References resolve (or not) whether or not the parent takes the route.
        let done = translated.get_or_insert_with(|| {
            rules(
                ctx,
                grants,
                key,
                spec.rules.as_deref().unwrap_or_default(),
                grpc,
                &upstream,
            )
        });
        let verdict = accept(
            ctx,
            key,
            kind,
            listeners,
            &parent,
            &hostnames,
            bad_host.as_ref(),
            host_kinds.as_deref_mut(),
            done,
        );
        let gw = status.gateway(key);
        let hosted = match verdict {
            Ok(hosted) => hosted,
            Err(condition) => {
                gw.set_parent(&parent, condition);
                gw.set_parent(&parent, resolved_refs(done.unresolved.as_ref()));
                continue;
            }
        };
        report_accepted(gw, &parent, done);
        let mut outcome = Placed::default();
        for (listener, hosts) in hosted {
            attached.insert((gateway.clone(), listener.name.clone()));
            for host in hosts {
                place(
                    ir,
                    (key, created, gateways),
                    listener,
                    &host,
                    done,
                    &mut outcome,
                );
            }
        }
        if !outcome.taken.is_empty() {
            report_conflicts(status.gateway(key), &parent, kind, &outcome);
        }
        placed = true;
    }
    match translated {
        Some(done) if placed => {
            for cluster in done.clusters {
                ir.add_cluster(cluster);
            }
            done.policies
        }
        _ => BTreeSet::new(),
    }
}

/// What a route's TLS backends are called with: the policies, the traffic policies and
/// the client certificate of its (first) Gateway that has one.
fn upstream<'c>(
    env: &Env<'c, '_>,
    key: &ObjectKey,
    parents: &[ParentRef],
) -> crate::backend_tls::Upstream<'c> {
    let gateways = env.gateways;
    let client_certificate = parents.iter().find_map(|p| {
        let (gateway, _) = ours(gateways, key, p)?;
        gateways
            .client_certificates
            .get(&gateway)
            .map(String::as_str)
    });
    crate::backend_tls::Upstream {
        policies: env.tls,
        client_certificate,
        traffic: (!env.traffic.is_empty()).then_some(env.traffic),
    }
}

/// A parent that takes the route: `Accepted`, what of it was left out, and whether its
/// references resolve.
fn report_accepted(gw: &mut GatewayStatus, parent: &ParentRef, done: &crate::rules::Rules) {
    gw.set_parent(parent, Condition::new("Accepted", true, "Accepted", ""));
    if !done.invalid.is_empty() {
        gw.set_parent(
            parent,
            Condition::new(
                "PartiallyInvalid",
                true,
                "UnsupportedValue",
                format!("left out: {}", done.invalid.join("; ")),
            ),
        );
    }
    gw.set_parent(parent, resolved_refs(done.unresolved.as_ref()));
}

/// Matches an older route has on the same host: as Contour reports them (the route not
/// accepted when none of its rules was placed).
fn report_conflicts(gw: &mut GatewayStatus, parent: &ParentRef, kind: &str, outcome: &Placed) {
    let condition = if outcome.placed.is_empty() {
        Condition::new(
            "Accepted",
            false,
            "RuleMatchConflict",
            format!("{kind}'s Match has conflict with other {kind}'s Match"),
        )
    } else {
        Condition::new(
            "PartiallyInvalid",
            true,
            "RuleMatchPartiallyConflict",
            format!(
                "Dropped Rule: some of {kind}'s rule(s) has(ve) been dropped because of conflict against other {kind}'s rule(s)"
            ),
        )
    };
    gw.set_parent(parent, condition);
}

/// Whether the parent `parent` (one of this controller's, with its `listeners`) takes
/// the route: the listeners it attaches to with its hosts on each, or why not. A host an
/// older route of the other kind (GRPCRoute, HTTPRoute) has on a listener is not taken;
/// the hosts taken are recorded in `host_kinds`.
#[allow(clippy::too_many_arguments)]
fn accept<'g>(
    ctx: &BuildContext<'_>,
    key: &ObjectKey,
    kind: &str,
    listeners: &'g [Served],
    parent: &ParentRef,
    hostnames: &[String],
    bad_host: Option<&Condition>,
    host_kinds: Option<&mut HostKinds>,
    done: &crate::rules::Rules,
) -> Result<Vec<(&'g Served, Vec<String>)>, Condition> {
    if let Some(condition) = bad_host {
        return Err(condition.clone());
    }
    let hosted = attach(ctx, listeners, kind, &key.namespace, parent, hostnames)?;
    let grpc = key.kind == GRPC_ROUTE;
    if let Some(host_kinds) = host_kinds {
        let taken = hosted.iter().find_map(|(l, hosts)| {
            let kinds = host_kinds.get(&(l.gateway.clone(), l.name.clone()))?;
            hosts.iter().find(|h| kinds.get(*h) == Some(&!grpc))
        });
        if let Some(host) = taken {
            let other = if grpc { "an HTTPRoute" } else { "a GRPCRoute" };
            return Err(Condition::new(
                "Accepted",
                false,
                "HostnameConflict",
                format!("{other} created before it has host {host} on this listener"),
            ));
        }
        for (l, hosts) in &hosted {
            let kinds = host_kinds
                .entry((l.gateway.clone(), l.name.clone()))
                .or_default();
            for host in hosts {
                kinds.insert(host.clone(), grpc);
            }
        }
    }
    if done.rules.is_empty() && !done.invalid.is_empty() {
        return Err(Condition::new(
            "Accepted",
            false,
            "UnsupportedValue",
            done.invalid.join("; "),
        ));
    }
    Ok(hosted)
}

/// A parent's `ResolvedRefs`: true, or why the first reference that does not resolve
/// does not.
pub fn resolved_refs(unresolved: Option<&crate::rules::Unresolved>) -> Condition {
    match unresolved {
        None => Condition::new("ResolvedRefs", true, "ResolvedRefs", ""),
        Some((reason, message)) => Condition::new("ResolvedRefs", false, reason, message.clone()),
    }
}
