use super::*;

fn prefix(p: &str) -> MatchCondition {
    MatchCondition {
        prefix: Some(p.to_string()),
        ..Default::default()
    }
}

#[test]
fn include_prefixes_concatenate_and_collapse_slashes() {
    let root = Matches::default();
    let inc = root.and(&[prefix("/api/")], true).unwrap_or_default();
    let route = inc.and(&[prefix("/v1")], false).unwrap_or_default();
    let m = route.route_match(None).map(|m| m.path);
    assert_eq!(m, Ok(PathMatch::Prefix("/api/v1".to_string())));
    let bare = inc
        .and(&[], false)
        .unwrap_or_default()
        .route_match(None)
        .map(|m| m.path);
    assert_eq!(bare, Ok(PathMatch::Prefix("/api/".to_string())));
}

#[test]
fn exact_and_regex_are_refused_in_includes() {
    let cond = MatchCondition {
        exact: Some("/x".to_string()),
        ..Default::default()
    };
    let err = Matches::default().and(&[cond], true).err().map(|e| e.0);
    assert_eq!(err, Some(Reason::PathMatchConditionsNotValid));
}
