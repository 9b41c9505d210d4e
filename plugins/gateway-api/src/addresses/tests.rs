use super::*;

fn key(name: &str) -> ObjectKey {
    ObjectKey::new(crate::kinds::GATEWAY, "infra", name)
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap_or(IpAddr::from([0, 0, 0, 0]))
}

#[test]
fn pools_hold_their_ranges() {
    let pool =
        Pool::parse(&["127.0.10.0/30".to_string(), "fd00::8/127".to_string()]).unwrap_or_default();
    assert_eq!(pool.len(), 6);
    assert!(pool.contains(ip("127.0.10.3")) && !pool.contains(ip("127.0.10.4")));
    assert!(pool.contains(ip("fd00::9")) && !pool.contains(ip("127.0.0.1")));
    assert_eq!(pool.nth(4), Some(ip("fd00::8")));
    assert!(Pool::parse(&["127.0.0.1/33".to_string()]).is_err());
    assert!(Pool::parse(&["not an address".to_string()]).is_err());
}

/// Each Gateway gets an address of its own, keeps it whatever Gateways come before
/// it, and gets the one it asks for when that one is free and in the pool.
#[test]
fn gateways_get_addresses_of_their_own() {
    let pool = Pool::parse(&["127.0.10.0/24".to_string()]).unwrap_or_default();
    let mut a = Assigner::new(&pool);
    let first = a.place(&key("a"), &[]);
    let second = a.place(&key("b"), &[]);
    assert!(matches!(first, Placement::Own(_)) && matches!(second, Placement::Own(_)));
    assert_ne!(first, second);
    let mut alone = Assigner::new(&pool);
    assert_eq!(
        alone.place(&key("b"), &[]),
        second,
        "b's address depends on a"
    );

    let asked = |value| Asked {
        type_: None,
        value: Some(value),
    };
    let mut a = Assigner::new(&pool);
    assert_eq!(
        a.place(&key("c"), &[asked("127.0.10.7")]),
        Placement::Own(ip("127.0.10.7"))
    );
    assert!(matches!(
        a.place(&key("d"), &[asked("127.0.10.7")]),
        Placement::NotUsable(_)
    ));
    assert!(matches!(
        a.place(&key("d"), &[asked("10.0.0.1")]),
        Placement::NotUsable(_)
    ));
    let fake = Asked {
        type_: Some("test/fake-invalid-type"),
        value: Some("fake"),
    };
    assert!(matches!(
        a.place(&key("e"), &[fake]),
        Placement::Unsupported(_)
    ));
    let none = Pool::default();
    let mut shared = Assigner::new(&none);
    assert_eq!(shared.place(&key("f"), &[]), Placement::Shared);
}
