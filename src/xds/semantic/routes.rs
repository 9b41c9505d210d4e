//! Envoy's rules for route tables, vhosts and routes.

use super::*;

impl Rules {
    // Route tables (source/common/router/config_impl.cc, header_parser.cc).

    pub(super) fn route_table(&mut self, table: &RouteConfiguration, path: &str) {
        let path = format!("{path}RouteConfiguration");
        if !self.entries_only {
            self.domains(
                &path,
                &table.name,
                table.virtual_hosts.iter().map(|v| v.domains.as_slice()),
            );
        }
        let limit = table
            .max_direct_response_body_size_bytes
            .map_or(DIRECT_RESPONSE_MAX, |m| m.value as usize);
        self.headers(
            &format!("{path}.request_headers_to_add"),
            &table.request_headers_to_add,
            &table.request_headers_to_remove,
        );
        self.headers(
            &format!("{path}.response_headers_to_add"),
            &table.response_headers_to_add,
            &table.response_headers_to_remove,
        );
        for (i, vhost) in table.virtual_hosts.iter().enumerate() {
            self.virtual_host(vhost, &format!("{path}.virtual_hosts[{i}]."), limit);
        }
    }

    /// RouteMatcher: one `*` per table; each domain (lower-cased) in one vhost only.
    pub(super) fn domains<'a>(
        &mut self,
        path: &str,
        table: &str,
        vhosts: impl Iterator<Item = &'a [String]>,
    ) {
        let mut wildcard = false;
        let mut seen = BTreeSet::new();
        for (i, domains) in vhosts.enumerate() {
            for domain in domains {
                let at = format!("{path}.virtual_hosts[{i}].domains");
                if domain == "*" {
                    if wildcard {
                        self.fail(
                            &at,
                            "route.single-wildcard-domain",
                            format!("only a single wildcard domain is permitted in route {table}"),
                        );
                    }
                    wildcard = true;
                } else if !seen.insert(domain.to_ascii_lowercase()) {
                    self.fail(
                        &at,
                        "route.unique-domains",
                        format!("duplicate entry of domain {domain} in route {table}"),
                    );
                }
            }
        }
    }

    pub(super) fn virtual_host(&mut self, vhost: &VirtualHost, path: &str, body_limit: usize) {
        let path = format!("{path}VirtualHost({})", vhost.name);
        self.headers(
            &format!("{path}.request_headers_to_add"),
            &vhost.request_headers_to_add,
            &vhost.request_headers_to_remove,
        );
        self.headers(
            &format!("{path}.response_headers_to_add"),
            &vhost.response_headers_to_add,
            &vhost.response_headers_to_remove,
        );
        for (i, route) in vhost.routes.iter().enumerate() {
            self.route(route, &format!("{path}.routes[{i}]"), body_limit);
        }
    }

    pub(super) fn route(
        &mut self,
        r: &envoy_types::pb::envoy::config::route::v3::Route,
        path: &str,
        limit: usize,
    ) {
        self.headers(
            &format!("{path}.request_headers_to_add"),
            &r.request_headers_to_add,
            &r.request_headers_to_remove,
        );
        self.headers(
            &format!("{path}.response_headers_to_add"),
            &r.response_headers_to_add,
            &r.response_headers_to_remove,
        );
        if let Some(m) = &r.r#match {
            self.route_match(m, path);
        }
        match &r.action {
            Some(route::Action::Route(action)) => {
                let rewrites = usize::from(!action.prefix_rewrite.is_empty())
                    + usize::from(action.regex_rewrite.is_some())
                    + usize::from(action.path_rewrite_policy.is_some());
                if rewrites > 1 {
                    self.fail(
                        path,
                        "route.one-rewrite",
                        "specify only one of prefix_rewrite, regex_rewrite or path_rewrite_policy",
                    );
                }
                if let Some(rewrite) = &action.regex_rewrite
                    && let Some(re) = &rewrite.pattern
                {
                    self.regex(&format!("{path}.route.regex_rewrite"), re);
                }
                if let Some(route_action::ClusterSpecifier::WeightedClusters(w)) =
                    &action.cluster_specifier
                {
                    self.weighted_clusters(w, path);
                }
                for (i, mirror) in action.request_mirror_policies.iter().enumerate() {
                    if mirror.cluster.is_empty() == mirror.cluster_header.is_empty() {
                        self.fail(
                            &format!("{path}.route.request_mirror_policies[{i}]"),
                            "route.mirror-cluster",
                            "exactly one of cluster or cluster_header in request mirror policy need to be specified",
                        );
                    }
                }
                self.duplicate_upgrades(
                    &format!("{path}.route.upgrade_configs"),
                    "route.duplicate-upgrade",
                    action
                        .upgrade_configs
                        .iter()
                        .map(|u| u.upgrade_type.as_str()),
                );
                if let Some(back_off) = action
                    .retry_policy
                    .as_ref()
                    .and_then(|p| p.retry_back_off.as_ref())
                    && let (Some(base), Some(max)) =
                        (&back_off.base_interval, &back_off.max_interval)
                    && (max.seconds, max.nanos) < (base.seconds, base.nanos)
                {
                    self.fail(
                        &format!("{path}.route.retry_policy.retry_back_off"),
                        "route.retry-back-off",
                        "max_interval must be greater than or equal to the base_interval",
                    );
                }
            }
            Some(route::Action::DirectResponse(direct)) => {
                let size = direct.body.as_ref().and_then(|b| match &b.specifier {
                    Some(data_source::Specifier::InlineBytes(b)) => Some(b.len()),
                    Some(data_source::Specifier::InlineString(s)) => Some(s.len()),
                    _ => None,
                });
                if let Some(size) = size
                    && size > limit
                {
                    self.fail(
                        &format!("{path}.direct_response.body"),
                        "route.direct-response-size",
                        format!("response body size is {size} bytes; maximum is {limit}"),
                    );
                }
            }
            _ => {}
        }
    }

    /// A route's match: its regular expressions and string matchers.
    fn route_match(
        &mut self,
        m: &envoy_types::pb::envoy::config::route::v3::RouteMatch,
        path: &str,
    ) {
        if let Some(
            envoy_types::pb::envoy::config::route::v3::route_match::PathSpecifier::SafeRegex(re),
        ) = &m.path_specifier
        {
            self.regex(&format!("{path}.match.safe_regex"), re);
        }
        for (i, h) in m.headers.iter().enumerate() {
            #[allow(deprecated)] // Envoy still compiles the deprecated safe_regex_match.
            use envoy_types::pb::envoy::config::route::v3::header_matcher::HeaderMatchSpecifier;
            let at = format!("{path}.match.headers[{i}]");
            #[allow(deprecated)]
            match &h.header_match_specifier {
                Some(HeaderMatchSpecifier::SafeRegexMatch(re)) => self.regex(&at, re),
                Some(HeaderMatchSpecifier::StringMatch(s)) => self.string_matcher(&at, s),
                _ => {}
            }
        }
        for (i, q) in m.query_parameters.iter().enumerate() {
            use envoy_types::pb::envoy::config::route::v3::query_parameter_matcher::QueryParameterMatchSpecifier;
            if let Some(QueryParameterMatchSpecifier::StringMatch(s)) =
                &q.query_parameter_match_specifier
            {
                self.string_matcher(&format!("{path}.match.query_parameters[{i}]"), s);
            }
        }
    }

    /// Weighted clusters: each named once (a name or a header), each weighted, the
    /// weights' sum above 0 and within 32 bits.
    fn weighted_clusters(
        &mut self,
        w: &envoy_types::pb::envoy::config::route::v3::WeightedCluster,
        path: &str,
    ) {
        let mut sum: u64 = 0;
        for (i, c) in w.clusters.iter().enumerate() {
            let at = format!("{path}.route.weighted_clusters.clusters[{i}]");
            let header = !c.cluster_header.is_empty();
            match (c.name.is_empty(), header) {
                (true, false) => self.fail(
                    &at,
                    "route.weighted-cluster-name",
                    "at least one of name or cluster_header need to be specified",
                ),
                (false, true) => self.fail(
                    &at,
                    "route.weighted-cluster-name",
                    "only one of name or cluster_header can be specified",
                ),
                _ => {}
            }
            match &c.weight {
                Some(weight) => sum += u64::from(weight.value),
                None => self.fail(&at, "route.weighted-cluster-weights", "weight is required"),
            }
            self.headers(
                &format!("{at}.request_headers_to_add"),
                &c.request_headers_to_add,
                &c.request_headers_to_remove,
            );
            self.headers(
                &format!("{at}.response_headers_to_add"),
                &c.response_headers_to_add,
                &c.response_headers_to_remove,
            );
        }
        if sum == 0 {
            self.fail(
                &format!("{path}.route.weighted_clusters"),
                "route.weighted-cluster-weights",
                "sum of weights in the weighted_cluster must be greater than 0",
            );
        } else if sum > u64::from(u32::MAX) {
            self.fail(
                &format!("{path}.route.weighted_clusters"),
                "route.weighted-cluster-weights",
                format!("the sum of weights exceeds {}", u32::MAX),
            );
        }
    }

    /// HeaderParser: no `:`-headers or Host added or removed, `append` and a
    /// non-default `append_action` not both, values valid substitution formats.
    pub(super) fn headers(&mut self, path: &str, add: &[HeaderValueOption], remove: &[String]) {
        let modifiable = |name: &str| !name.starts_with(':') && !name.eq_ignore_ascii_case("host");
        for (i, option) in add.iter().enumerate() {
            let at = format!("{path}[{i}]");
            let Some(header) = &option.header else {
                continue;
            };
            if !modifiable(&header.key) {
                self.fail(
                    &at,
                    "headers.not-modifiable",
                    format!(
                        ":-prefixed or host headers may not be modified ({})",
                        header.key
                    ),
                );
            }
            #[allow(deprecated)] // Envoy refuses the deprecated field beside its successor.
            let both = option.append.is_some() && option.append_action != 0;
            if both {
                self.fail(
                    &at,
                    "headers.append-and-append-action",
                    "both append and append_action are set and it's not allowed",
                );
            }
            if let Err(position) = substitution_format(&header.value) {
                self.fail(
                    &at,
                    "headers.substitution-format",
                    format!(
                        "couldn't find valid command at position {position} in {:?} (a literal % is written %%)",
                        header.value
                    ),
                );
            }
        }
        let removed = path.replace("_to_add", "_to_remove");
        for (i, name) in remove.iter().enumerate() {
            if !modifiable(name) {
                self.fail(
                    &format!("{removed}[{i}]"),
                    "headers.not-modifiable",
                    format!(":-prefixed or host headers may not be removed ({name})"),
                );
            }
        }
    }

    /// Upgrade types named twice (case-insensitively), in a route or a connection manager.
    pub(super) fn duplicate_upgrades<'a>(
        &mut self,
        path: &str,
        family: &str,
        types: impl Iterator<Item = &'a str>,
    ) {
        let mut seen = BTreeSet::new();
        for (i, t) in types.enumerate() {
            if !seen.insert(t.to_ascii_lowercase()) {
                self.fail(
                    &format!("{path}[{i}]"),
                    family,
                    format!("upgrade {t} twice"),
                );
            }
        }
    }

    pub(super) fn string_matcher(&mut self, path: &str, matcher: &StringMatcher) {
        if let Some(string_matcher::MatchPattern::SafeRegex(re)) = &matcher.match_pattern {
            if matcher.ignore_case {
                self.fail(
                    path,
                    "regex.ignore-case",
                    "ignore_case has no effect for safe_regex",
                );
            }
            self.regex(&format!("{path}.safe_regex"), re);
        }
    }

    pub(super) fn regex(&mut self, path: &str, re: &RegexMatcher) {
        if let Err(e) = re2(&re.regex) {
            self.fail(path, "regex.re2", e);
        }
    }
}
