use super::*;

/// Found by coverage-guided fuzzing (`tests/fuzz`, target `manifest`): a JSON file
/// cut short after a newline was reported at a line past its end.
#[test]
fn a_json_file_cut_short_names_its_last_line() {
    let line = parse_file(Path::new("cut.json"), "{\n")
        .err()
        .map(|e| e.line);
    assert_eq!(line, Some(Some(1)));
}

#[test]
fn deep_flow_nesting_is_refused_at_once() {
    let deep = format!("a: {}{}\n", "[".repeat(100_000), "]".repeat(100_000));
    let started = std::time::Instant::now();
    let err = parse_file(Path::new("deep.yaml"), &deep).err();
    assert!(
        err.as_ref()
            .is_some_and(|e| e.message.contains("nested more than 128")),
        "{err:?}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(1));
    // Brackets in quotes, comments and block scalars are text, not nesting.
    let text = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: a, namespace: b}}\ndata:\n  q: \"{0}\"\n  s: '{0}'\n  # {0}\n  lua: |\n    {0}\n    {0}\n  r: [[[1]]]\n",
        "[".repeat(200)
    );
    assert_eq!(too_deep(&text), None);
    assert_eq!(too_deep(&format!("a:\n  b: {}", "{".repeat(129))), Some(2));
}

#[test]
fn documents_report_their_start_line() {
    let docs = documents("a: 1\n---\nb: 2\n--- # c\nc: 3\n");
    let starts: Vec<usize> = docs.iter().map(|d| d.0).collect();
    assert_eq!(starts, vec![1, 3, 5]);
}

#[test]
fn a_syntax_error_names_the_line() {
    let text = "apiVersion: v1\nkind: Service\nmetadata: {name: a}\n---\napiVersion: v1\nkind: [\n";
    let err = parse_file(Path::new("x.yaml"), text).err();
    assert_eq!(err.map(|e| e.line), Some(Some(6)));
}

#[test]
fn a_bad_field_names_the_object_and_path() {
    let text = "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {name: p}\nspec:\n  routes: 7\n";
    let err = parse_file(Path::new("x.yaml"), text)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("x.yaml:1") && err.contains("HTTPProxy p") && err.contains("spec.routes"),
        "{err}"
    );
}

#[test]
fn unknown_kinds_are_skipped() {
    let text = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n";
    assert_eq!(
        parse_file(Path::new("x.yaml"), text).map(|o| o.len()),
        Ok(0)
    );
}
