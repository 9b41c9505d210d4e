//! The routes of one root HTTPProxy and of every proxy it includes, down the chain.

use std::collections::BTreeSet;

use isobar_contour::api::{GlobalRateLimitPolicy, HTTPProxy, Include, VirtualHost};
use isobar_sdk::condition::{ConditionType, Reason};
use isobar_sdk::host::Host;
use isobar_sdk::ir::{self, HTTP_LISTENER, HTTPS_LISTENER, Route, RouteAction, RoutePolicy};
use isobar_sdk::{BuildContext, Ir, ObjectKey, StatusReport};

use crate::check_unsupported;
use crate::conditions::Matches;
use crate::policy::{self};
use crate::tls::RouteMode;

mod backends;
mod route;

pub(crate) use backends::settle_weights;

/// One root's walk: adds routes to the root's vhost and records which proxies it reached.
pub(crate) struct Walk<'c, 'a> {
    pub ctx: &'c BuildContext<'a>,
    pub ir: &'c mut Ir,
    pub status: &'c mut StatusReport,
    pub host: &'c Host,
    /// Non-root proxies reached through an include (the others are orphans).
    pub reached: &'c mut BTreeSet<ObjectKey>,
    /// Where the root's routes go (plain HTTP, HTTPS, or redirects only).
    pub mode: RouteMode,
    /// Whether `permitInsecure` is honoured (Contour's `disablePermitInsecure` off).
    pub permit_insecure: bool,
    /// Every service's default header changes (Contour's `policy`).
    pub default_headers: &'c isobar_sdk::headers::DefaultHeaders,
    /// How the root's routes are authorized by default (`None`: no authorization
    /// applies to them).
    pub auth: Option<&'c crate::auth::RouteDefaults>,
    /// Global rate limits of vhosts without a global policy of their own.
    pub default_rate_limits: Option<&'c GlobalRateLimitPolicy>,
    /// The root's JWT providers (`None`: it has none).
    pub jwt: Option<&'c crate::jwt::Providers>,
}

/// What a root's `virtualhost` sets on its vhosts besides routes.
#[derive(Default)]
struct VhostPolicies {
    filter: Option<ir::IpFilter>,
    cors: Option<ir::Cors>,
    limit: Option<ir::LocalRateLimit>,
    global: Vec<ir::RateLimitDescriptor>,
}

impl VhostPolicies {
    /// The policies of `vhost` (its global rate limits its own, else unless it opts out
    /// `default_global`), and the problems of those that are invalid.
    fn of(
        vhost: &VirtualHost,
        default_global: Option<&GlobalRateLimitPolicy>,
    ) -> (Self, Vec<policy::PolicyError>) {
        let mut out = VhostPolicies::default();
        let mut problems = Vec::new();
        let own = vhost
            .rate_limit_policy
            .as_ref()
            .and_then(|r| r.global.as_ref());
        let (global, what) = match (own, default_global) {
            (Some(own), _) if !own.disabled => {
                (Some(own), "Spec.VirtualHost.RateLimitPolicy is invalid")
            }
            (Some(_), _) => (None, ""),
            (None, default) => (default, "Default Global RateLimit Policy is invalid"),
        };
        if let Some(global) = global {
            match policy::global_rate_limit(global) {
                Ok(descriptors) => out.global = descriptors,
                Err(e) => problems.push((
                    ConditionType::VirtualHostError,
                    Reason::RateLimitPolicyNotValid,
                    format!("{what}: {e}"),
                )),
            }
        }
        match policy::ip_filter(
            "spec.virtualhost",
            &vhost.ip_allow_policy,
            &vhost.ip_deny_policy,
        ) {
            Ok(filter) => out.filter = filter,
            Err(e) => problems.push(e),
        }
        if let Some(c) = &vhost.cors_policy {
            match policy::cors(c) {
                Ok(c) => out.cors = Some(c),
                Err(e) => problems.push(e),
            }
        }
        if let Some(r) = &vhost.rate_limit_policy {
            match policy::local_rate_limit("spec.virtualhost", r) {
                Ok(r) => out.limit = r,
                Err(e) => problems.push(e),
            }
        }
        (out, problems)
    }

    /// Sets them on every vhost of `fqdn`.
    fn set_on(&self, ir: &mut Ir, fqdn: &str) {
        for vhost in ir.virtual_hosts_of_mut(fqdn) {
            vhost.ip_filter = self.filter.clone();
            vhost.cors = self.cors.clone().map(Box::new);
            vhost.rate_limit = self.limit.clone().map(Box::new);
            if !self.global.is_empty() {
                vhost
                    .extensions
                    .get_or_insert_with(Default::default)
                    .rate_limits = self.global.clone();
            }
        }
    }
}

impl Walk<'_, '_> {
    /// Adds `proxy`'s routes, narrowed by `matches`, and walks its includes. An error in
    /// the proxy itself drops everything it would add; errors of included proxies stay
    /// with them. Missing Services do not invalidate: their route answers 503. Returns
    /// whether the proxy itself was valid.
    pub(crate) fn visit(
        &mut self,
        key: &ObjectKey,
        proxy: &HTTPProxy,
        matches: &Matches,
        chain: &mut Vec<ObjectKey>,
    ) -> bool {
        let spec = &proxy.spec;
        let mut valid = check_unsupported(
            self.status,
            key,
            || "spec".to_string(),
            &spec.unsupported,
            || crate::fields_of(spec),
        );
        let mut vhost_policies = VhostPolicies::default();
        if let Some(vhost) = &spec.virtualhost {
            let problems;
            (vhost_policies, problems) = VhostPolicies::of(vhost, self.default_rate_limits);
            for (type_, reason, message) in problems {
                self.status.error(key, type_, reason, message);
                valid = false;
            }
            valid &= check_unsupported(
                self.status,
                key,
                || "spec.virtualhost".to_string(),
                &vhost.unsupported,
                || crate::fields_of(vhost),
            );
        }
        if spec.routes.is_empty() && spec.includes.is_empty() && spec.tcpproxy.is_none() {
            self.status.error(
                key,
                ConditionType::SpecError,
                Reason::NothingDefined,
                "HTTPProxy.Spec.Routes unspecified",
            );
            return false;
        }
        let mut routes = Vec::with_capacity(spec.routes.len());
        for (index, route) in spec.routes.iter().enumerate() {
            match self.route(key, index, route, matches) {
                Some(r) => routes.push((route.permit_insecure && self.permit_insecure, r)),
                None => valid = false,
            }
        }
        let mut includes = Vec::with_capacity(spec.includes.len());
        for (index, include) in spec.includes.iter().enumerate() {
            if spec.includes[..index]
                .iter()
                .any(|earlier| earlier.conditions == include.conditions)
            {
                self.status.error(
                    key,
                    ConditionType::IncludeError,
                    Reason::DuplicateMatchConditions,
                    format!("spec.includes[{index}]: duplicate conditions defined on an include"),
                );
                continue;
            }
            match matches.and(&include.conditions, true) {
                Ok(narrowed) => includes.push((include, narrowed)),
                Err((reason, message)) => {
                    self.status.error(
                        key,
                        ConditionType::IncludeError,
                        reason,
                        format!("spec.includes[{index}]: {message}"),
                    );
                    valid = false;
                }
            }
        }
        if !valid {
            return false;
        }
        for (permit_insecure, batch) in routes {
            for route in batch {
                self.add(route, permit_insecure);
            }
        }
        chain.push(key.clone());
        for (include, narrowed) in includes {
            self.include(key, include, &narrowed, chain);
        }
        chain.pop();
        if spec.virtualhost.is_some() {
            vhost_policies.set_on(self.ir, &self.host.fqdn);
        }
        true
    }

    /// Adds a route where the root's mode puts it: on a TLS vhost, the plain HTTP side
    /// answers with a redirect to HTTPS unless the route permits insecure access.
    fn add(&mut self, route: Route, permit_insecure: bool) {
        let fqdn = &self.host.fqdn;
        let upgrade = |route: &Route| Route {
            matcher: route.matcher.clone(),
            action: RouteAction::Redirect(Box::new(isobar_sdk::ir::Redirect {
                scheme: Some("https".to_string()),
                host: None,
                port: None,
                path: None,
                prefix: None,
                regex: None,
                status: 301,
            })),
            source: route.source.clone(),
            tie: None,
            // A redirect to HTTPS is never checked (the HTTPS request will be).
            policy: self
                .auth
                .map(|_| {
                    RoutePolicy {
                        auth: Some(isobar_sdk::ir::RouteAuth {
                            disabled: true,
                            ..Default::default()
                        }),
                        ..RoutePolicy::default()
                    }
                    .boxed()
                })
                .unwrap_or_default(),
        };
        match self.mode {
            RouteMode::Plain => {
                self.ir.add_route(HTTP_LISTENER, fqdn, route);
            }
            RouteMode::Secure => {
                let plain = if permit_insecure {
                    route.clone()
                } else {
                    upgrade(&route)
                };
                self.ir.add_route(HTTP_LISTENER, fqdn, plain);
                self.ir.add_secure_route(HTTPS_LISTENER, fqdn, route);
            }
            RouteMode::RedirectOnly => {
                let plain = if permit_insecure {
                    route
                } else {
                    upgrade(&route)
                };
                self.ir.add_route(HTTP_LISTENER, fqdn, plain);
            }
        }
    }

    fn include(
        &mut self,
        parent: &ObjectKey,
        include: &Include,
        matches: &Matches,
        chain: &mut Vec<ObjectKey>,
    ) {
        let namespace = include.namespace.as_deref().unwrap_or(&parent.namespace);
        let target = ObjectKey::new(isobar_contour::HTTP_PROXY, namespace, &include.name);
        let Some(child) = self.ctx.get::<HTTPProxy>(namespace, &include.name) else {
            self.status.error(
                parent,
                ConditionType::IncludeError,
                Reason::IncludeNotFound,
                format!("include {namespace}/{} not found", include.name),
            );
            self.bad_gateway(parent, matches);
            return;
        };
        if child.spec.virtualhost.is_some() {
            self.status.error(
                parent,
                ConditionType::IncludeError,
                Reason::RootIncludesRoot,
                format!(
                    "root httpproxy cannot include another root httpproxy: {namespace}/{}",
                    include.name
                ),
            );
            self.bad_gateway(parent, matches);
            return;
        }
        if chain.len() >= crate::MAX_INCLUDE_DEPTH {
            self.status.error(
                parent,
                ConditionType::IncludeError,
                Reason::IncludeTooDeep,
                format!(
                    "include {namespace}/{} not followed: an include chain may hold at most {} proxies",
                    include.name,
                    crate::MAX_INCLUDE_DEPTH
                ),
            );
            self.bad_gateway(parent, matches);
            return;
        }
        if let Some(start) = chain.iter().position(|k| *k == target) {
            let path: Vec<String> = chain[start..]
                .iter()
                .chain(std::iter::once(&target))
                .map(|k| format!("{}/{}", k.namespace, k.name))
                .collect();
            self.status.error(
                parent,
                ConditionType::IncludeError,
                Reason::IncludeCreatesCycle,
                format!("include creates an include cycle: {}", path.join(" -> ")),
            );
            return;
        }
        self.reached.insert(target.clone());
        self.visit(&target, child, matches, chain);
    }

    /// Contour answers 502 for the conditions of an include that cannot be followed.
    fn bad_gateway(&mut self, source: &ObjectKey, matches: &Matches) {
        if let Ok(matcher) = matches.route_match(self.host.authority_regex.clone()) {
            self.add(
                Route {
                    matcher,
                    action: RouteAction::DirectResponse {
                        status: 502,
                        body: None,
                    },
                    source: source.clone(),
                    tie: None,
                    policy: None,
                },
                false,
            );
        }
    }
}
