//! The routes of one root HTTPProxy and of every proxy it includes, down the chain.

use std::collections::BTreeSet;

use isobar_sdk::api::{HTTPProxy, Include, ReplacePrefix, Route as ProxyRoute};
use isobar_sdk::condition::{ConditionType, Reason};
use isobar_sdk::host::Host;
use isobar_sdk::ir::{
    ClusterOptions, HTTP_LISTENER, HTTPS_LISTENER, Mirror, PathMatch, Route, RouteAction,
    RouteMatch, RoutePolicy, WeightedCluster,
};
use isobar_sdk::resolve::{PortRef, service_cluster};
use isobar_sdk::{BuildContext, Ir, Kind, ObjectKey, StatusReport};

use crate::check_unsupported;
use crate::conditions::Matches;
use crate::policy::{self, PolicyError};
use crate::tls::RouteMode;

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
    pub default_rate_limits: Option<&'c isobar_sdk::api::GlobalRateLimitPolicy>,
    /// The root's JWT providers (`None`: it has none).
    pub jwt: Option<&'c crate::jwt::Providers>,
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
        let mut vhost_filter = None;
        let mut vhost_cors = None;
        let mut vhost_limit = None;
        let mut vhost_global = Vec::new();
        if let Some(vhost) = &spec.virtualhost {
            let mut problems = Vec::new();
            // The vhost's own global policy, else (unless it opts out) the default.
            let own = vhost
                .rate_limit_policy
                .as_ref()
                .and_then(|r| r.global.as_ref());
            let (policy, what) = match (own, self.default_rate_limits) {
                (Some(own), _) if !own.disabled => {
                    (Some(own), "Spec.VirtualHost.RateLimitPolicy is invalid")
                }
                (Some(_), _) => (None, ""),
                (None, default) => (default, "Default Global RateLimit Policy is invalid"),
            };
            if let Some(policy) = policy {
                match policy::global_rate_limit(policy) {
                    Ok(descriptors) => vhost_global = descriptors,
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
                Ok(filter) => vhost_filter = filter,
                Err(e) => problems.push(e),
            }
            if let Some(c) = &vhost.cors_policy {
                match policy::cors(c) {
                    Ok(c) => vhost_cors = Some(c),
                    Err(e) => problems.push(e),
                }
            }
            if let Some(r) = &vhost.rate_limit_policy {
                match policy::local_rate_limit("spec.virtualhost", r) {
                    Ok(r) => vhost_limit = r,
                    Err(e) => problems.push(e),
                }
            }
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
            let fqdn = &self.host.fqdn;
            for vhost in self.ir.virtual_hosts_of_mut(fqdn) {
                vhost.ip_filter = vhost_filter.clone();
                vhost.cors = vhost_cors.clone().map(Box::new);
                vhost.rate_limit = vhost_limit.clone().map(Box::new);
                if !vhost_global.is_empty() {
                    vhost
                        .extensions
                        .get_or_insert_with(Default::default)
                        .rate_limits = vhost_global.clone();
                }
            }
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
        let target = ObjectKey::new(Kind::HTTPProxy, namespace, &include.name);
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

    /// One route (two when a prefix rewrite needs its trailing-slash twin), or `None`
    /// when it makes the proxy invalid.
    fn route(
        &mut self,
        key: &ObjectKey,
        index: usize,
        route: &ProxyRoute,
        matches: &Matches,
    ) -> Option<Vec<Route>> {
        let at = || format!("spec.routes[{index}]");
        let mut ok = check_unsupported(self.status, key, at, &route.unsupported, || {
            crate::fields_of(route)
        });

        for (i, cond) in route.conditions.iter().enumerate() {
            ok &= check_unsupported(
                self.status,
                key,
                || format!("{}.conditions[{i}]", at()),
                &cond.unsupported,
                || crate::fields_of(cond),
            );
        }
        if let Some(timeouts) = &route.timeout_policy {
            ok &= check_unsupported(
                self.status,
                key,
                || format!("{}.timeoutPolicy", at()),
                &timeouts.unsupported,
                || crate::fields_of(timeouts),
            );
        }
        let mut errors: Vec<PolicyError> = Vec::new();
        let matcher = matches
            .and(&route.conditions, false)
            .and_then(|m| m.route_match(self.host.authority_regex.clone()))
            .map_err(|(reason, message)| errors.push((ConditionType::RouteError, reason, message)))
            .ok();

        let actions = usize::from(!route.services.is_empty())
            + usize::from(route.request_redirect_policy.is_some())
            + usize::from(route.direct_response_policy.is_some());
        if actions != 1 {
            errors.push((
                ConditionType::RouteError,
                Reason::RouteActionCountNotValid,
                "must set exactly one of route.services or route.requestRedirectPolicy or route.directResponsePolicy".to_string(),
            ));
        }
        let (mut policy, action) = policy::route_policy(key, route, &mut errors);
        if let Some(defaults) = self.auth {
            policy.auth = defaults.route(route.auth_policy.as_deref());
        }
        match crate::jwt::Providers::route(self.jwt, route.jwt_verification_policy.as_deref()) {
            Ok(requirement) => policy.jwt_requirement = requirement,
            Err((reason, message)) => {
                errors.push((ConditionType::JWTVerificationError, reason, message));
            }
        }

        let mirrors = route.services.iter().filter(|s| s.mirror).count();
        if mirrors > 1 {
            errors.push((
                ConditionType::ServiceError,
                Reason::OnlyOneMirror,
                "only one service per route may be nominated as mirror".to_string(),
            ));
        }
        let cluster_options = self.cluster_options(key, index, route, &mut policy, &mut errors);
        let weighted = self.backends(
            key,
            index,
            route,
            &cluster_options,
            &mut policy,
            &mut errors,
            &mut ok,
        );

        let rewrites = route
            .path_rewrite_policy
            .as_ref()
            .map(|p| p.replace_prefix.as_slice())
            .unwrap_or_default();
        let mut twin = None;
        if let Some(matcher) = &matcher
            && !rewrites.is_empty()
        {
            match prefix_rewrite(&matcher.path, rewrites) {
                Ok(Some((replacement, slash_twin))) => {
                    policy.prefix_rewrite = Some(replacement);
                    twin = slash_twin;
                }
                Ok(None) => {}
                Err(e) => errors.push(e),
            }
        }

        for (type_, reason, message) in &errors {
            self.status
                .error(key, *type_, *reason, format!("{}: {message}", at()));
        }
        let matcher = matcher?;
        if !ok || !errors.is_empty() {
            return None;
        }
        let action = action.unwrap_or_else(|| forward_or_503(weighted));
        let mut out = Vec::with_capacity(2);
        if let Some((prefix, replacement)) = twin {
            out.push(Route {
                matcher: RouteMatch {
                    path: PathMatch::Prefix(prefix),
                    ..matcher.clone()
                },
                action: action.clone(),
                source: key.clone(),
                tie: None,
                policy: RoutePolicy {
                    prefix_rewrite: Some(replacement),
                    ..policy.clone()
                }
                .boxed(),
            });
        }
        out.push(Route {
            matcher,
            action,
            source: key.clone(),
            tie: None,
            policy: policy.boxed(),
        });
        Some(out)
    }

    /// The options of the clusters a route sends to (load balancing, idle connection
    /// timeout, health check); the route's hash policies go to `policy`.
    fn cluster_options(
        &mut self,
        key: &ObjectKey,
        index: usize,
        route: &ProxyRoute,
        policy: &mut RoutePolicy,
        errors: &mut Vec<PolicyError>,
    ) -> ClusterOptions {
        let at = || format!("spec.routes[{index}]");
        let mut cluster_options = ClusterOptions::default();
        if let Some(lb) = &route.load_balancer_policy {
            let (lb_policy, hashes, warning) = policy::load_balancer(lb);
            cluster_options.lb_policy = lb_policy;
            policy.hash_policies = hashes;
            if let Some(message) = warning {
                self.status.warning(
                    key,
                    ConditionType::RouteError,
                    Reason::IgnoredField,
                    format!("{}: {message}", at()),
                );
            }
        }
        if let Some(idle) = route
            .timeout_policy
            .as_ref()
            .and_then(|t| t.idle_connection.as_ref())
        {
            match isobar_sdk::policy::timeout(idle) {
                Ok(d) => cluster_options.idle_connection_timeout = Some(d),
                Err(e) => errors.push((
                    ConditionType::RouteError,
                    Reason::TimeoutPolicyNotValid,
                    format!("route.timeoutPolicy.idleConnection failed to parse: {e}"),
                )),
            }
        }
        if let Some(h) = &route.health_check_policy {
            match policy::health_check(h) {
                Ok(h) => cluster_options.health_check = Some(Box::new(h)),
                Err(e) => errors.push(e),
            }
        }
        cluster_options
    }

    /// The clusters a route's services send to, with their weights and service-level
    /// policies (a mirror goes to `policy`); `ok` turns false on unsupported fields.
    #[allow(clippy::too_many_arguments)]
    fn backends(
        &mut self,
        key: &ObjectKey,
        index: usize,
        route: &ProxyRoute,
        cluster_options: &ClusterOptions,
        policy: &mut RoutePolicy,
        errors: &mut Vec<PolicyError>,
        ok: &mut bool,
    ) -> Vec<WeightedCluster> {
        let at = || format!("spec.routes[{index}]");
        let mut weighted = Vec::with_capacity(route.services.len());
        for (i, service) in route.services.iter().enumerate() {
            let sat = || format!("{}.services[{i}]", at());
            *ok &= check_unsupported(self.status, key, sat, &service.unsupported, || {
                crate::fields_of(service)
            });
            let port = match i32::try_from(service.port) {
                Ok(p) if (1..=65535).contains(&p) => p,
                _ => {
                    errors.push((
                        ConditionType::ServiceError,
                        Reason::ServicePortInvalid,
                        format!(
                            "{}: service {:?}: port must be in the range 1-65535, {} was supplied",
                            sat(),
                            service.name,
                            service.port
                        ),
                    ));
                    continue;
                }
            };
            let weight = match service.weight.map(u32::try_from) {
                None => 0,
                Some(Ok(w)) => w,
                Some(Err(_)) => {
                    errors.push((
                        ConditionType::ServiceError,
                        Reason::RouteNotValid,
                        format!(
                            "{}: weight {} must be from 0 to 4294967295",
                            sat(),
                            service.weight.unwrap_or_default()
                        ),
                    ));
                    continue;
                }
            };
            let service_scope = |field: &'static str, response: bool| policy::HeaderScope {
                field,
                namespace: &key.namespace,
                service: Some((&service.name, service.port)),
                response,
            };
            let mut target = WeightedCluster {
                weight,
                ..Default::default()
            };
            if let Some(h) = &service.request_headers_policy {
                match policy::headers(h, &service_scope("service.requestHeadersPolicy", false)) {
                    Ok(h) => {
                        target.request_headers = h.policy;
                        target.host_rewrite = h.host;
                    }
                    Err(e) => errors.push(e),
                }
            }
            if !service.cookie_rewrite_policies.is_empty() {
                match policy::cookie_rewrites(&service.cookie_rewrite_policies) {
                    Ok(c) => target.cookie_rewrites = c,
                    Err(e) => errors.push(e),
                }
            }
            if let Some(h) = &service.response_headers_policy {
                match policy::headers(h, &service_scope("service.responseHeadersPolicy", true)) {
                    Ok(h) => target.response_headers = h.policy,
                    Err(e) => errors.push(e),
                }
            }
            self.default_headers
                .apply(&mut target, (&key.namespace, &service.name, port));
            let mut options = cluster_options.clone();
            if let Some(slow) = &service.slow_start_policy {
                match policy::slow_start(slow, options.lb_policy) {
                    Ok(slow) => options.slow_start = Some(Box::new(slow)),
                    Err(e) => {
                        errors.push(e);
                        continue;
                    }
                }
            }
            if let Some(p) = &service.protocol {
                match policy::protocol(p) {
                    Ok(p) => options.protocol = Some(p),
                    Err(e) => {
                        errors.push(e);
                        continue;
                    }
                }
            }
            if let Some(v) = &service.validation {
                match policy::upstream_validation(self.ctx, &key.namespace, v) {
                    Ok(v) => options.upstream_validation = Some(Box::new(v)),
                    Err((type_, reason, message)) => {
                        errors.push((type_, reason, format!("services[{i}]: {message}")));
                        continue;
                    }
                }
            }
            // Contour's SNI: the Host the upstream is sent (service-level rewrite first).
            options.sni = target
                .host_rewrite
                .as_ref()
                .or(policy.host_rewrite.as_ref())
                .filter(|h| !h.starts_with('%'))
                .cloned();
            match service_cluster(
                self.ctx.objects,
                &key.namespace,
                &service.name,
                PortRef::Number(port),
                options,
                self.ctx.external_names(),
            ) {
                Ok(cluster) => {
                    target.cluster = cluster.name.clone();
                    self.ir.add_cluster(cluster);
                    if service.mirror {
                        let percent = match weight {
                            0 => 100,
                            w => w.min(100),
                        };
                        policy.mirrors = vec![Mirror {
                            cluster: target.cluster,
                            per_million: percent * 10_000,
                        }];
                    } else {
                        weighted.push(target);
                    }
                }
                Err(e) => self.status.error(
                    key,
                    ConditionType::ServiceError,
                    Reason::ServiceUnresolvedReference,
                    format!("{}: {e}", sat()),
                ),
            }
        }
        weighted
    }
}

/// Contour's `replacePrefix`: the entry whose `prefix` equals the route's prefix wins,
/// else the entry without a prefix. A prefix `/p` (not ending in `/`) rewritten to `R`
/// also gets a twin route `/p/` → `R/`, so `/p/x` does not become `R//x`.
type Rewrite = (String, Option<(String, String)>);

fn prefix_rewrite(
    path: &PathMatch,
    entries: &[ReplacePrefix],
) -> Result<Option<Rewrite>, PolicyError> {
    let PathMatch::Prefix(prefix) = path else {
        return Err((
            ConditionType::PrefixReplaceError,
            Reason::MustHavePrefix,
            "cannot specify prefix replacements without a prefix condition".to_string(),
        ));
    };
    for (i, a) in entries.iter().enumerate() {
        if entries[..i].iter().any(|b| b.prefix == a.prefix) {
            return Err((
                ConditionType::PrefixReplaceError,
                Reason::DuplicateReplacement,
                format!("duplicate replacement prefix {:?}", a.prefix),
            ));
        }
        if !a.replacement.starts_with('/')
            || (!a.prefix.is_empty() && !a.prefix.starts_with('/'))
            || !isobar_sdk::headers::is_header_value(&a.replacement)
            || !isobar_sdk::headers::is_header_value(&a.prefix)
        {
            return Err((
                ConditionType::PrefixReplaceError,
                Reason::MustHavePrefix,
                "prefix and replacement must start with / and hold no control characters"
                    .to_string(),
            ));
        }
    }
    let chosen = entries
        .iter()
        .find(|e| {
            e.prefix.trim_end_matches('/') == prefix.trim_end_matches('/') && !e.prefix.is_empty()
        })
        .or_else(|| entries.iter().find(|e| e.prefix.is_empty()));
    let Some(entry) = chosen else {
        return Ok(None);
    };
    let replacement = entry.replacement.clone();
    if prefix.ends_with('/') {
        return Ok(Some((replacement, None)));
    }
    let twin_replacement = if replacement.ends_with('/') {
        replacement.clone()
    } else {
        format!("{replacement}/")
    };
    Ok(Some((
        replacement,
        Some((format!("{prefix}/"), twin_replacement)),
    )))
}

/// Contour's weights: all zero (or unset) means an even split; otherwise zero-weight
/// services get no traffic. Weights adding up to more than `u32::MAX`, which Envoy
/// refuses (the whole response with them), are divided down to the same split.
pub(crate) fn settle_weights(weighted: &mut Vec<WeightedCluster>) {
    if weighted.iter().all(|w| w.weight == 0) {
        weighted.iter_mut().for_each(|w| w.weight = 1);
    } else {
        weighted.retain(|w| w.weight > 0);
    }
    WeightedCluster::fit_weights(weighted);
}

/// No resolvable service at all answers 503; see [`settle_weights`] for the rest.
fn forward_or_503(mut weighted: Vec<WeightedCluster>) -> RouteAction {
    if weighted.is_empty() {
        return RouteAction::DirectResponse {
            status: 503,
            body: None,
        };
    }
    settle_weights(&mut weighted);
    // Held until the build's IR is dropped, for every route at once.
    weighted.shrink_to_fit();
    RouteAction::Forward(weighted)
}
