//! Envoy resource names, as Contour spells them (dashboards and golden files depend on them).

use sha1::{Digest, Sha1};

fn sha1_hex(data: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = Sha1::digest(data);
    let mut out = String::with_capacity(40);
    for b in digest {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    out
}

/// Joins parts with `/`; a result longer than `limit` is cut and given a short hash suffix
/// so it stays unique.
pub fn hashname(limit: usize, parts: &[&str]) -> String {
    let joined = parts.join("/");
    if joined.len() <= limit {
        return joined;
    }
    let hash = &sha1_hex(joined.as_bytes())[..6];
    let mut cut = limit.saturating_sub(hash.len() + 1);
    while !joined.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}-{hash}", &joined[..cut])
}

/// The first 10 hex digits of sha1(`data`): a short, stable tag of what a name stands
/// for.
pub fn short_hash(data: &str) -> String {
    sha1_hex(data.as_bytes())[..10].to_string()
}

/// `ns/svc/port/<10 hex of sha1(options)>`; options that change the cluster's Envoy
/// config go into `options`, so two routes needing different clusters never share one.
pub fn cluster_name(namespace: &str, service: &str, port: i32, options: &str) -> String {
    /// The first 10 hex digits of sha1(""): most clusters have no options.
    const NO_OPTIONS: &str = "da39a3ee5e";
    let digest;
    let hash = if options.is_empty() {
        NO_OPTIONS
    } else {
        digest = sha1_hex(options.as_bytes());
        &digest[..10]
    };
    hashname(60, &[namespace, service, &port.to_string(), hash])
}

/// The ClusterLoadAssignment name: `ns/svc/portname`, or `ns/svc` for an unnamed port.
pub fn eds_name(namespace: &str, service: &str, port_name: &str) -> String {
    if port_name.is_empty() {
        format!("{namespace}/{service}")
    } else {
        format!("{namespace}/{service}/{port_name}")
    }
}

pub fn alt_stat_name(namespace: &str, service: &str, port: i32) -> String {
    format!("{namespace}_{service}_{port}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_options_give_contours_hash() {
        assert_eq!(
            cluster_name("default", "web", 80, ""),
            "default/web/80/da39a3ee5e"
        );
    }

    #[test]
    fn long_names_are_cut_with_a_hash() {
        let long = "n".repeat(80);
        let name = cluster_name(&long, "svc", 80, "");
        assert_eq!(name.len(), 60);
        assert_ne!(name, cluster_name(&format!("{long}x"), "svc", 80, ""));
    }

    #[test]
    fn unnamed_ports_drop_the_port_segment() {
        assert_eq!(eds_name("ns", "svc", ""), "ns/svc");
        assert_eq!(eds_name("ns", "svc", "http"), "ns/svc/http");
    }
}
