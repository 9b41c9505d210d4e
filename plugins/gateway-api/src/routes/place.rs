//! A route's rules placed on the vhosts of the listeners it attaches to.

use std::collections::BTreeSet;

use isobar_sdk::ir::{
    DownstreamTls, Redirect, Route, RouteAction, RouteTie, SecureVirtualHost, VirtualHost,
};
use isobar_sdk::{Ir, ObjectKey};

use crate::gateways::{Family, Gateways, Served};
use crate::rules::{policy_for, redirect_for};

/// What placing a route's rules came to: the rules (by index) with a match served, and
/// those with a match an older route already has on the host.
#[derive(Debug, Default)]
pub(super) struct Placed {
    pub(super) placed: BTreeSet<usize>,
    pub(super) taken: BTreeSet<usize>,
}

/// Adds the rules to vhost `host` of the listener's Envoy listener; a match already
/// there (from an older route, or an earlier rule) is kept. On an HTTPS listener the
/// vhost is one of the filter chain of its Gateway listener (chosen by SNI: the
/// listener's hostname, or any name for a listener without one); a request on that
/// chain whose Host another Gateway listener of the port serves answers 421.
/// HTTPRoutes reach only HTTP and HTTPS listeners; on an SNI name a TLSRoute already
/// forwards, they are not placed.
pub(super) fn place(
    ir: &mut Ir,
    (key, created, gateways): (&ObjectKey, Option<i64>, &Gateways),
    listener: &Served,
    host: &str,
    done: &crate::rules::Rules,
    outcome: &mut Placed,
) {
    if !listener.programmed {
        return;
    }
    let secure = listener.family != Family::Http;
    if secure {
        let Some(vhosts) = ir.secure_virtual_hosts_mut(&listener.envoy) else {
            return;
        };
        let chain = crate::gateways::chain_name(listener);
        if vhosts.get(&chain).is_some_and(|v| v.tcp_proxy.is_some()) {
            return;
        }
        vhosts
            .entry(chain.clone())
            .or_insert_with(|| SecureVirtualHost {
                misdirected: gateways.misdirected(listener),
                ..SecureVirtualHost::new(
                    &chain,
                    Some(DownstreamTls {
                        secret: listener.secret.clone().unwrap_or_default(),
                        min_version: None,
                        max_version: None,
                        alpn_http: true,
                        client_validation: listener.client_validation.clone(),
                    }),
                )
            });
    }
    let Some(vhost) = vhost_mut(ir, listener, host) else {
        return;
    };
    for (index, rule) in done.rules.iter().enumerate() {
        for matcher in &rule.matches {
            if let Some(held) = vhost.routes.get(matcher) {
                if held.source != *key {
                    outcome.taken.insert(index);
                }
                continue;
            }
            outcome.placed.insert(index);
            let policy = match rule.policy.as_deref().and_then(|p| policy_for(p, matcher)) {
                Some(p) => Some(Box::new(p)),
                None => rule.policy.clone(),
            };
            let action = match &rule.action {
                RouteAction::Redirect(r) => {
                    let by_match = redirect_for(r, matcher);
                    let r = by_match.as_ref().unwrap_or(r);
                    RouteAction::Redirect(Box::new(redirect_on(listener, r)))
                }
                other => other.clone(),
            };
            vhost.routes.insert(Route {
                matcher: matcher.clone(),
                action,
                source: key.clone(),
                policy,
                tie: Some(Box::new(RouteTie {
                    created,
                    rule: u32::try_from(index).unwrap_or(u32::MAX),
                })),
            });
        }
    }
}

/// The HTTP virtual host of `host` on `listener` (made on first use): on an HTTP
/// listener one of its Envoy listener's, on an HTTPS one a host of its filter chain.
fn vhost_mut<'i>(ir: &'i mut Ir, listener: &Served, host: &str) -> Option<&'i mut VirtualHost> {
    if listener.family == Family::Http {
        let vhosts = ir.virtual_hosts_mut(&listener.envoy)?;
        return Some(
            vhosts
                .entry(host.to_string())
                .or_insert_with(|| VirtualHost::new(host)),
        );
    }
    let chain = ir
        .secure_virtual_hosts_mut(&listener.envoy)?
        .get_mut(&crate::gateways::chain_name(listener))?;
    if chain.http.fqdn == host {
        return Some(&mut chain.http);
    }
    Some(
        chain
            .hosts
            .entry(host.to_string())
            .or_insert_with(|| VirtualHost::new(host)),
    )
}

/// A RequestRedirect as served on `listener`: without a port, the redirect goes to the
/// scheme's well-known port when it names a scheme, else to the listener's (Gateway)
/// port. The port is left out of `Location` when it is the well-known one of the
/// redirect's scheme and Envoy would leave it out too: when the redirect names a host
/// (Envoy then drops the request's port) or the listener is on its scheme's well-known
/// port (a request's Host carries that port or none).
fn redirect_on(listener: &Served, r: &Redirect) -> Redirect {
    let listener_scheme = if listener.family == Family::Http {
        "http"
    } else {
        "https"
    };
    let well_known = |scheme: &str| if scheme == "https" { 443 } else { 80 };
    let scheme = r.scheme.as_deref().unwrap_or(listener_scheme);
    let listener_port = u32::try_from(listener.port).unwrap_or(0);
    let port = r
        .port
        .or(r.scheme.as_deref().map(well_known))
        .unwrap_or(listener_port);
    let implied = port == well_known(scheme)
        && (r.host.is_some() || listener_port == well_known(listener_scheme));
    Redirect {
        port: (!implied).then_some(port),
        ..r.clone()
    }
}
