use super::*;

/// The regular expressions the CEL expression uses, with their weights: (first
/// label's, label before the last's).
fn patterns(shards: usize) -> Vec<(usize, regex::Regex, regex::Regex)> {
    let mut out = Vec::new();
    for p in 0..positions(shards) {
        for (bit, class) in [(0, BIT0), (1, BIT1)] {
            let c = regex_class(class);
            let compile = |re: String| regex::Regex::new(&re).unwrap_or_else(|e| panic!("{e}"));
            out.push((
                1usize << (2 * p + bit),
                compile(format!("^[^.:]*{c}[^.:]{{{p}}}([.:]|$)")),
                compile(format!("{c}[^.:]{{{p}}}[.][^.:]+[.]?(:[0-9]*)?$")),
            ));
        }
    }
    out
}

/// The shard of a host among `shards` by those regular expressions.
fn by_patterns(
    patterns: &[(usize, regex::Regex, regex::Regex)],
    host: &str,
    shards: usize,
) -> usize {
    let (mut first, mut second) = (0, 0);
    for (weight, one, two) in patterns {
        first += usize::from(one.is_match(host)) * weight;
        second += usize::from(two.is_match(host)) * weight;
    }
    (first + second) % shards
}

/// Every shard count a listener can have.
fn counts() -> impl Iterator<Item = usize> {
    (0..)
        .map(|i| MIN_SHARDS << i)
        .take_while(|n| *n <= MAX_SHARDS)
}

/// The expression Envoy evaluates is made of those very patterns.
#[test]
fn the_cel_expression_holds_the_patterns() {
    for shards in counts() {
        let expression = shard_expression(shards);
        assert!(
            expression.ends_with(&format!(") % {shards}")),
            "{expression}"
        );
        let patterns = patterns(shards);
        assert_eq!(expression.matches("matches(").count(), patterns.len() * 2);
        for (_, one, two) in patterns {
            assert!(expression.contains(&format!("matches('{}')", one.as_str())));
            assert!(expression.contains(&format!("matches('{}')", two.as_str())));
        }
    }
}

/// Isobar's computation and the patterns Envoy evaluates agree on every host shape:
/// ports, trailing dots, case, IP literals, one label, empty labels, odd characters.
#[test]
fn the_shard_of_a_host_is_the_one_envoy_computes() {
    let mut hosts: Vec<String> = [
        "",
        "a",
        "ab",
        "abc",
        "localhost",
        "localhost:8080",
        "foo.example.com",
        "Foo.Example.COM:8080",
        "foo.example.com.",
        "foo.example.com.:80",
        "a.b",
        "a.b.",
        ".",
        "..",
        "a..b",
        "a..",
        ".a",
        "[::1]:80",
        "[::1]",
        "10.0.0.1",
        "10.0.0.1:443",
        "x:y",
        "a.b:c:80",
        "a.b:",
        "a.b:x",
        "a-b_c.d-e.f",
        "ÿé.ü.com",
        "*.example.com",
        "site-1.example.com",
        "site-22.example.com",
        "www.a.com",
        "www.b.com",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // Pseudo-random hosts over an alphabet with the separators.
    let alphabet: Vec<char> = "aZ09.:-_mN5.x:".chars().collect();
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..20_000 {
        let mut host = String::new();
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let len = (state % 14) as usize;
        for i in 0..len {
            let pick = ((state >> (i * 4)) as usize) % alphabet.len();
            host.push(alphabet[pick]);
        }
        hosts.push(host);
    }
    for shards in counts() {
        let patterns = patterns(shards);
        for host in &hosts {
            let k = shard_of(host, shards);
            assert_eq!(k, by_patterns(&patterns, host, shards), "{host:?} {shards}");
            // The encoder keeps one number per host for every count.
            assert_eq!(k, host_hash(host) % shards, "{host:?} {shards}");
        }
    }
}

/// A host's shard does not depend on its case, a port or a trailing dot, and the
/// shards of many tenants' hosts spread over all of them.
#[test]
fn a_hosts_shard_ignores_case_port_and_trailing_dot_and_hosts_spread() {
    for host in ["foo.example.com", "site-123.tenants.example.org", "a.b"] {
        let k = host_hash(host);
        assert_eq!(host_hash(&host.to_ascii_uppercase()), k);
        assert_eq!(host_hash(&format!("{host}:8443")), k);
        assert_eq!(host_hash(&format!("{host}.")), k);
        assert_eq!(host_hash(&format!("{host}.:80")), k);
    }
    for (hosts, shards) in [(10_000, 64), (100_000, 512), (200_000, 1024)] {
        let mut counts = vec![0usize; shards];
        for i in 0..hosts {
            counts[shard_of(&format!("site-{i}.example.com"), shards)] += 1;
        }
        let (min, max) = (
            counts.iter().min().copied().unwrap_or(0),
            counts.iter().max().copied().unwrap_or(0),
        );
        assert!(min > 0 && max < hosts / shards * 4, "{shards}: {counts:?}");
    }
}

/// A listener's shard count follows its vhosts, about 200 a shard, and is kept
/// while it is near enough.
#[test]
fn the_shard_count_follows_the_vhosts_and_holds_near_a_boundary() {
    assert_eq!(shard_count(1_000, 0), 64);
    assert_eq!(shard_count(10_000, 0), 64);
    assert_eq!(shard_count(25_600, 0), 128);
    assert_eq!(shard_count(100_000, 0), 512);
    assert_eq!(shard_count(1_000_000, 0), 1024);
    // Growing one vhost at a time from 64 shards: kept up to twice the average.
    assert_eq!(shard_count(25_600, 64), 64);
    assert_eq!(shard_count(25_601, 64), 128);
    // Shrinking: kept down to a quarter of it.
    assert_eq!(shard_count(100_000, 512), 512);
    assert_eq!(shard_count(25_600, 512), 512);
    assert_eq!(shard_count(25_599, 512), 128);
    assert_eq!(shard_count(10, 64), 64);
    assert_eq!(shard_count(5_000_000, 1024), 1024);
    // A count no listener could have is replaced.
    assert_eq!(shard_count(10_000, 100), 64);
    for (vhosts, was) in [(0, 0), (50_000, 64), (300_000, 128)] {
        let n = shard_count(vhosts, was);
        assert!(n.is_power_of_two() && (MIN_SHARDS..=MAX_SHARDS).contains(&n));
    }
}
