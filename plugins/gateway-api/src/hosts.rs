//! Host names as Gateway API matches them: a listener's hostname against a route's.

/// Whether `pattern` (a host or `*.suffix`) covers `host` (a host or `*.suffix`): equal,
/// or a wildcard whose suffix `host` ends with (`*.example.com` covers
/// `a.b.example.com` and `*.b.example.com`, not `example.com`).
pub fn covers(pattern: &str, host: &str) -> bool {
    if pattern == host {
        return true;
    }
    match pattern.strip_prefix('*') {
        Some(suffix) => host.len() > suffix.len() && host.ends_with(suffix),
        None => false,
    }
}

/// The hosts a route with `route` hostnames serves on a listener with `listener`'s:
/// each route hostname the listener covers, or the listener's hostname where a route
/// wildcard covers it; `*` when neither names any. Empty: they do not intersect.
pub fn intersect(listener: Option<&str>, route: &[String]) -> Vec<String> {
    let route: Vec<String> = route.iter().map(|h| h.to_ascii_lowercase()).collect();
    let mut out: Vec<String> = match (listener, route.as_slice()) {
        (None, []) => vec!["*".to_string()],
        (Some(l), []) => vec![l.to_ascii_lowercase()],
        (None, hosts) => hosts.to_vec(),
        (Some(l), hosts) => {
            let l = l.to_ascii_lowercase();
            hosts
                .iter()
                .filter_map(|h| {
                    if covers(&l, h) {
                        Some(h.clone())
                    } else if covers(h, &l) {
                        Some(l.clone())
                    } else {
                        None
                    }
                })
                .collect()
        }
    };
    out.sort();
    out.dedup();
    out
}

/// Whether `host` is a host name Gateway API accepts: RFC 1123 labels, lower-cased,
/// optionally led by a `*.` wildcard label, and not an IP address.
pub fn valid(host: &str) -> bool {
    let name = host.strip_prefix("*.").unwrap_or(host);
    if name.is_empty() || name.len() > 253 || name.parse::<std::net::IpAddr>().is_ok() {
        return false;
    }
    name.split('.').all(isobar_sdk::host::valid_label)
}

#[cfg(test)]
mod tests;
