use super::*;
use crate::Kind;

fn route(path: &str, status: u32) -> Route {
    Route {
        matcher: RouteMatch::path(PathMatch::Prefix(path.to_string())),
        action: RouteAction::DirectResponse { status, body: None },
        source: ObjectKey::new(Kind::Ingress, "ns", "p"),
        tie: None,
        policy: None,
    }
}

/// Routes added in any order read back in the order of their matches, one per match
/// (the later replaces the earlier), whether a vhost has a few or many.
#[test]
fn routes_are_ordered_by_match_and_replaced_by_an_equal_one() {
    for count in [3, FEW_ROUTES, FEW_ROUTES + 1, 200] {
        let mut routes = Routes::default();
        let mut reference = BTreeMap::new();
        for i in (0..count).rev().chain([1, 0]) {
            let replaced = routes.insert(route(&format!("/{i:03}"), 200 + i as u32));
            let previous = reference.insert(format!("/{i:03}"), 200 + i as u32);
            assert_eq!(replaced.is_some(), previous.is_some(), "{count} routes");
        }
        let read: Vec<(String, u32)> = routes
            .values()
            .map(|r| match (&r.matcher.path, &r.action) {
                (PathMatch::Prefix(p), RouteAction::DirectResponse { status, .. }) => {
                    (p.clone(), *status)
                }
                _ => unreachable!(),
            })
            .collect();
        let expected: Vec<(String, u32)> = reference.into_iter().collect();
        assert_eq!(read, expected, "{count} routes");
        assert_eq!(routes.len(), count);
        let probe = RouteMatch::path(PathMatch::Prefix("/001".to_string()));
        assert!(routes.get(&probe).is_some());
        // The same routes added in order compare equal, however they are held.
        let mut sorted = Routes::default();
        for i in 0..count {
            sorted.insert(route(&format!("/{i:03}"), 200 + i as u32));
        }
        assert_eq!(sorted, routes);
    }
}
