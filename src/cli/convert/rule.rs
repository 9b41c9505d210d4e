//! One HTTPProxy route (with the conditions of the includes that led to it) as an
//! HTTPRoute rule.

use super::*;

impl Converter<'_> {
    /// One HTTPRoute rule for a flattened route; `None` when it cannot be one.
    pub(super) fn rule(&mut self, route_ns: &str, f: &Flat<'_>) -> Option<Value> {
        let what = format!("HTTPProxy {}", f.from);
        let r = f.route;
        let m = self.rule_match(&what, f)?;
        let mut rule = json!({"matches": [m]});
        let mut filters = self.route_filters(&what, r);
        let backends = self.backends(&what, route_ns, f, &mut filters);
        if r.request_redirect_policy.is_none() {
            rule["backendRefs"] = json!(backends);
        }
        self.timeouts_and_the_rest(&what, r, &mut rule);
        if !filters.is_empty() {
            rule["filters"] = json!(filters);
        }
        Some(rule)
    }

    /// The match of a flattened route's conditions; `None` (reported) when a condition
    /// has no Gateway API equivalent.
    fn rule_match(&mut self, what: &str, f: &Flat<'_>) -> Option<Value> {
        let mut prefix = String::new();
        let mut path: Option<Value> = None;
        let mut headers = Vec::new();
        let mut query = Vec::new();
        for c in &f.conditions {
            if let Some(p) = &c.prefix {
                prefix = join_prefix(&prefix, p);
            }
            if let Some(e) = &c.exact {
                path = Some(json!({"type": "Exact", "value": join_prefix(&prefix, e)}));
            }
            if let Some(re) = &c.regex {
                path = Some(
                    json!({"type": "RegularExpression", "value": format!("{}{re}", escape(&prefix))}),
                );
            }
            if let Some(h) = &c.header {
                match header_match(h) {
                    Some(m) => headers.push(m),
                    None => {
                        self.left_out(what, &format!("header condition on {}", h.name), "negated or case-insensitive header matches have no equivalent; the rule is left out");
                        return None;
                    }
                }
            }
            if let Some(q) = &c.query_parameter {
                match query_match(q) {
                    Some(m) => query.push(m),
                    None => {
                        self.left_out(
                            what,
                            &format!("queryParameter condition on {}", q.name),
                            "case-insensitive matches have no equivalent; the rule is left out",
                        );
                        return None;
                    }
                }
            }
        }
        let path = path.unwrap_or_else(|| {
            let value = if prefix.is_empty() { "/".to_string() } else { prefix.clone() };
            if value != "/" && !value.ends_with('/') {
                self.out.changed.push(format!(
                    "{what}: prefix {value}: the HTTPProxy also matched {value}x…, PathPrefix only {value} and {value}/…"
                ));
            }
            json!({"type": "PathPrefix", "value": value})
        });
        let mut m = json!({"path": path});
        if !headers.is_empty() {
            m["headers"] = json!(headers);
        }
        if !query.is_empty() {
            m["queryParams"] = json!(query);
        }
        Some(m)
    }

    /// The filters of a route's own policies: header changes, a prefix rewrite, a
    /// redirect.
    fn route_filters(&mut self, what: &str, r: &api::Route) -> Vec<Value> {
        let mut filters = Vec::new();
        if let Some(h) = &r.request_headers_policy {
            filters.push(
                json!({"type": "RequestHeaderModifier", "requestHeaderModifier": modifier(h)}),
            );
        }
        if let Some(h) = &r.response_headers_policy {
            filters.push(
                json!({"type": "ResponseHeaderModifier", "responseHeaderModifier": modifier(h)}),
            );
        }
        if let Some(rewrite) = &r.path_rewrite_policy {
            match rewrite.replace_prefix.as_slice() {
                [one] => filters.push(json!({"type": "URLRewrite", "urlRewrite": {
                    "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": one.replacement}}})),
                _ => self.left_out(what, "pathRewritePolicy", "only one replacePrefix converts"),
            }
        }
        if let Some(redirect) = &r.request_redirect_policy {
            let mut to = json!({"statusCode": redirect.status_code.unwrap_or(302)});
            if let Some(s) = &redirect.scheme {
                to["scheme"] = json!(s);
            }
            if let Some(h) = &redirect.hostname {
                to["hostname"] = json!(h);
            }
            match redirect.port {
                Some(p) => to["port"] = json!(p),
                // Envoy drops the request's port when it redirects to another host;
                // Gateway API would take the listener's: say the scheme's own port.
                None if redirect.hostname.is_some() => {
                    let https = redirect.scheme.as_deref() == Some("https");
                    to["port"] = json!(if https { 443 } else { 80 });
                }
                None => {}
            }
            if let Some(p) = &redirect.path {
                to["path"] = json!({"type": "ReplaceFullPath", "replaceFullPath": p});
            } else if let Some(p) = &redirect.prefix {
                to["path"] = json!({"type": "ReplacePrefixMatch", "replacePrefixMatch": p});
            }
            filters.push(json!({"type": "RequestRedirect", "requestRedirect": to}));
        }
        filters
    }

    /// A route's backends (mirrors become filters on `filters`); a Service in another
    /// namespace than the route's needs a ReferenceGrant, noted.
    fn backends(
        &mut self,
        what: &str,
        route_ns: &str,
        f: &Flat<'_>,
        filters: &mut Vec<Value>,
    ) -> Vec<Value> {
        let r = f.route;
        let mut backends = Vec::new();
        for s in &r.services {
            if s.mirror {
                if f.namespace != route_ns {
                    self.service_grants
                        .insert((f.namespace.clone(), route_ns.to_string()));
                }
                filters.push(json!({"type": "RequestMirror", "requestMirror": {
                    "backendRef": {"name": s.name, "namespace": f.namespace, "port": s.port},
                    "percent": s.weight.filter(|w| *w > 0).unwrap_or(100).min(100)}}));
                continue;
            }
            let mut b = json!({"name": s.name, "port": s.port});
            if f.namespace != route_ns {
                b["namespace"] = json!(f.namespace);
                self.service_grants
                    .insert((f.namespace.clone(), route_ns.to_string()));
            }
            if let Some(w) = s.weight {
                b["weight"] = json!(w);
            }
            let mut own = Vec::new();
            if let Some(h) = &s.request_headers_policy {
                own.push(
                    json!({"type": "RequestHeaderModifier", "requestHeaderModifier": modifier(h)}),
                );
            }
            if let Some(h) = &s.response_headers_policy {
                own.push(json!({"type": "ResponseHeaderModifier", "responseHeaderModifier": modifier(h)}));
            }
            if !own.is_empty() {
                b["filters"] = json!(own);
            }
            for (field, set) in [
                ("protocol", s.protocol.is_some()),
                ("validation", s.validation.is_some()),
                ("slowStartPolicy", s.slow_start_policy.is_some()),
                (
                    "cookieRewritePolicies",
                    !s.cookie_rewrite_policies.is_empty(),
                ),
            ] {
                if set {
                    let why = if field == "validation" {
                        "becomes a BackendTLSPolicy (not written)"
                    } else {
                        "Gateway API has no equivalent"
                    };
                    self.left_out(what, &format!("services[{}].{field}", s.name), why);
                }
            }
            backends.push(b);
        }
        backends
    }

    /// A route's timeouts on `rule`, and every other policy reported as left out.
    fn timeouts_and_the_rest(&mut self, what: &str, r: &api::Route, rule: &mut Value) {
        if let Some(t) = &r.timeout_policy {
            if let Some(resp) = &t.response {
                match gateway_duration(resp) {
                    Some(d) => rule["timeouts"] = json!({"request": d}),
                    None => self.left_out(
                        what,
                        "timeoutPolicy.response",
                        &format!("{resp:?} has no Gateway API spelling"),
                    ),
                }
            }
            if t.idle.is_some() || t.idle_connection.is_some() {
                self.left_out(what, "timeoutPolicy.idle", "Gateway API has no equivalent");
            }
        }
        for (field, set) in [
            ("retryPolicy", r.retry_policy.is_some()),
            ("directResponsePolicy", r.direct_response_policy.is_some()),
            ("loadBalancerPolicy", r.load_balancer_policy.is_some()),
            ("healthCheckPolicy", r.health_check_policy.is_some()),
            ("rateLimitPolicy", r.rate_limit_policy.is_some()),
            (
                "internalRedirectPolicy",
                r.internal_redirect_policy.is_some(),
            ),
            (
                "cookieRewritePolicies",
                !r.cookie_rewrite_policies.is_empty(),
            ),
            ("ipAllowPolicy", !r.ip_allow_policy.is_empty()),
            ("ipDenyPolicy", !r.ip_deny_policy.is_empty()),
        ] {
            if set {
                self.left_out(what, field, "Gateway API has no equivalent");
            }
        }
        for key in r.unsupported.keys() {
            self.left_out(what, key, "Gateway API has no equivalent");
        }
    }
}

/// `parent` then `child`, as Contour joins include prefixes.
fn join_prefix(parent: &str, child: &str) -> String {
    if parent.is_empty() || parent == "/" {
        return child.to_string();
    }
    format!(
        "{}/{}",
        parent.trim_end_matches('/'),
        child.trim_start_matches('/')
    )
}

fn escape(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            let escaped = c.is_ascii_punctuation() && c != '/';
            escaped.then_some('\\').into_iter().chain([c])
        })
        .collect()
}

fn header_match(h: &api::HeaderMatchCondition) -> Option<Value> {
    if h.ignore_case || h.notpresent || h.notcontains.is_some() || h.notexact.is_some() {
        return None;
    }
    let (kind, value) = if let Some(e) = &h.exact {
        ("Exact", e.clone())
    } else if let Some(c) = &h.contains {
        ("RegularExpression", format!(".*{}.*", escape(c)))
    } else if let Some(r) = &h.regex {
        ("RegularExpression", r.clone())
    } else if h.present {
        ("RegularExpression", ".*".to_string())
    } else {
        return None;
    };
    Some(json!({"type": kind, "name": h.name, "value": value}))
}

fn query_match(q: &api::QueryParameterMatchCondition) -> Option<Value> {
    if q.ignore_case {
        return None;
    }
    let (kind, value) = if let Some(e) = &q.exact {
        ("Exact", e.clone())
    } else if let Some(r) = &q.regex {
        ("RegularExpression", r.clone())
    } else if let Some(p) = &q.prefix {
        ("RegularExpression", format!("{}.*", escape(p)))
    } else if let Some(s) = &q.suffix {
        ("RegularExpression", format!(".*{}", escape(s)))
    } else if let Some(c) = &q.contains {
        ("RegularExpression", format!(".*{}.*", escape(c)))
    } else if q.present {
        ("RegularExpression", ".*".to_string())
    } else {
        return None;
    };
    Some(json!({"type": kind, "name": q.name, "value": value}))
}

fn modifier(h: &api::HeadersPolicy) -> Value {
    let mut m = json!({});
    if !h.set.is_empty() {
        m["set"] = json!(
            h.set
                .iter()
                .map(|v| json!({"name": v.name, "value": v.value}))
                .collect::<Vec<_>>()
        );
    }
    if !h.remove.is_empty() {
        m["remove"] = json!(h.remove);
    }
    m
}

/// A Contour duration (`1m30s`, `250ms`, `infinity`) in Gateway API's spelling (`1m30s`),
/// when it has one.
fn gateway_duration(text: &str) -> Option<String> {
    if text == "infinity" || text == "0s" || text == "0" {
        return Some("0s".to_string());
    }
    // Gateway API's: one to four groups of at most five digits and a unit h, m, s or ms.
    let mut groups = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > 5 {
            return None;
        }
        rest = &rest[digits..];
        let unit = ["ms", "h", "m", "s"]
            .into_iter()
            .find(|u| rest.starts_with(u))?;
        rest = &rest[unit.len()..];
        groups += 1;
    }
    (1..=4).contains(&groups).then(|| text.to_string())
}
