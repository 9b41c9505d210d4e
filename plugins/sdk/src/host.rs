//! Host names as Envoy virtual host domains.
//!
//! Envoy rejects a whole RouteConfiguration over one bad or duplicate domain, so every
//! host is normalised (lower case, no trailing dot) and checked here first.

/// A host a virtual host can serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// The normalised host: `*` for any host, `*.example.com` for a wildcard.
    pub fqdn: String,
    /// For wildcards: a regex `:authority` must fully match, so `*` covers one label only
    /// (Envoy's own `*.example.com` would also match `a.b.example.com`).
    pub authority_regex: Option<String>,
}

/// Parses a host as written in an Ingress rule or an HTTPProxy `fqdn`.
pub fn parse_host(raw: &str) -> Result<Host, String> {
    let fqdn = raw.trim_end_matches('.').to_ascii_lowercase();
    if fqdn.is_empty() || fqdn == "*" {
        return Ok(Host {
            fqdn: "*".to_string(),
            authority_regex: None,
        });
    }
    let (wildcard, rest) = match fqdn.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, fqdn.as_str()),
    };
    if rest.len() > 253 || rest.split('.').any(|label| !valid_label(label)) {
        return Err(format!("host {raw:?} is not a valid DNS name"));
    }
    let authority_regex = wildcard.then(|| {
        format!(
            "(?i)[a-z0-9]([-a-z0-9]*[a-z0-9])?\\.{}(:[0-9]+)?",
            rest.replace('.', "\\.")
        )
    });
    Ok(Host {
        fqdn,
        authority_regex,
    })
}

/// Whether `label` is one DNS label of a host name as Kubernetes takes it (RFC 1123,
/// lower case).
pub fn valid_label(label: &str) -> bool {
    !label.is_empty()
        && label.len() <= 63
        && label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !label.starts_with('-')
        && !label.ends_with('-')
}

#[cfg(test)]
mod tests;
