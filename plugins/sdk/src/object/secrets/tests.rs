use super::*;

fn secret(n: usize, version: usize) -> Secret {
    let text = |what: &str| format!("{what} {n} {version} {}", "x".repeat(n * 37 % 1500));
    let mut secret = Secret {
        type_: (!n.is_multiple_of(3)).then(|| "Opaque".to_string()),
        ..Default::default()
    };
    secret.data = Some(BTreeMap::from([
        (
            "tls.crt".to_string(),
            k8s_openapi::ByteString(text("data crt").into_bytes()),
        ),
        (
            "ca.crt".to_string(),
            k8s_openapi::ByteString(text("ca").into_bytes()),
        ),
        ("unread".to_string(), k8s_openapi::ByteString(b"u".to_vec())),
    ]));
    // `stringData` wins over `data` for the same key, as on the API server.
    secret.string_data = Some(BTreeMap::from([(
        "tls.crt".to_string(),
        text("string crt"),
    )]));
    secret
}

/// Through replacements and removals the buffer is compacted, holds no more than
/// twice what is stored, and every stored Secret reads back as it arrived.
#[test]
fn the_buffer_keeps_what_each_secret_needs_through_compaction() {
    let mut store = Unchecked::default();
    let id = |n: usize| ("ns".to_string(), format!("s{n}"));
    let mut versions = BTreeMap::new();
    let mut compactions = 0;
    for round in 0..4 {
        for n in 0..150 {
            if round > 0 && n % 5 == round {
                assert!(store.remove(&id(n)).is_some() == versions.remove(&n).is_some());
                continue;
            }
            let before = store.bytes.len();
            assert!(store.insert(id(n), &secret(n, round), None));
            compactions += usize::from(store.bytes.len() < before);
            versions.insert(n, round);
            // The same again changes nothing and leaves no bytes behind.
            let len = store.bytes.len();
            assert!(!store.insert(id(n), &secret(n, round), None));
            assert_eq!(store.bytes.len(), len);
        }
        assert!(store.garbage <= store.bytes.len() / 2 || store.bytes.len() <= COMPACT_MIN);
    }
    assert!(compactions > 0, "the test never compacted the buffer");
    assert_eq!(store.len(), versions.len());
    for (n, version) in &versions {
        assert_eq!(
            store.check(&id(*n)),
            Some(SecretCheck::of(&secret(*n, *version))),
            "s{n}"
        );
    }
    // A dropped version is compared by its digest.
    let digest = store.remove(&id(1));
    assert!(!store.insert(id(1), &secret(1, 3), digest));
    assert!(store.insert(id(1), &secret(1, 4), digest));
}
