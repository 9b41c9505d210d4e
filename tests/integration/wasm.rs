//! WebAssembly processors: the shipped example, and modules that trap, loop, grow
//! past their memory limit or answer garbage (each isolated, the rest of the pipeline
//! unaffected).

use std::path::Path;

use serde_json::json;

use isobar::config::Config;
use isobar::provider::manifest::parse_file;
use isobar::runner::pipeline::{BuildOutput, Pipeline};
use isobar_sdk::condition::Reason;
use isobar_sdk::{ObjectKey, Objects};

const EXAMPLE: &str = "plugins/wasm-processors/response-header/processor.wat";

fn example() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(EXAMPLE)
        .display()
        .to_string()
}

fn store() -> Objects {
    let yaml = format!(
        "{}---\n{}---\n{}",
        crate::support::service_yaml("a", "web", 8080),
        "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {name: one, namespace: a}\nspec:\n  virtualhost: {fqdn: one.example.com}\n  routes:\n    - conditions: [{prefix: /}]\n      services: [{name: web, port: 80}]\n    - conditions: [{prefix: /api}]\n      services: [{name: web, port: 80}]\n",
        "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {name: two, namespace: a}\nspec:\n  virtualhost: {fqdn: two.example.org}\n  routes: [{services: [{name: web, port: 80}]}]\n",
    );
    let mut objects = Objects::default();
    for o in parse_file(Path::new("t.yaml"), &yaml).unwrap_or_else(|e| panic!("{e}")) {
        objects.apply(o);
    }
    objects
}

fn build_with(modules: serde_json::Value) -> Result<BuildOutput, String> {
    let mut config = Config::default();
    config.pipeline.processors.push("wasm".into());
    config
        .plugins
        .insert("wasm".into(), json!({ "modules": modules }));
    let pipeline = Pipeline::for_config(&config).map_err(|e| e.to_string())?;
    Ok(pipeline.build(&store()))
}

fn module(dir: &Path, name: &str, wat: &str) -> serde_json::Value {
    let path = dir.join(format!("{name}.wat"));
    std::fs::write(&path, wat).unwrap_or_else(|e| panic!("{e}"));
    json!({"name": name, "path": path.display().to_string(), "fuel": 5_000_000, "max-memory-mb": 4})
}

/// A module whose `isobar_process` body is `body` (it must leave an i64 on the stack).
fn with_process(body: &str, data: &str) -> String {
    format!(
        r#"(module
  (memory (export "memory") 2)
  (data (i32.const 0) "{data}")
  (func (export "isobar_abi_version") (result i32) i32.const 1)
  (func (export "isobar_alloc") (param i32) (result i32) i32.const 4096)
  (func (export "isobar_process") (param i32 i32) (result i64) {body}))"#
    )
}

/// Returns the `len` bytes at address 0 (the data segment) as the output.
fn answering(output: &str) -> String {
    let escaped = output.replace('\\', "\\\\").replace('"', "\\\"");
    with_process(&format!("i64.const {}", output.len()), &escaped)
}

fn response_headers(out: &BuildOutput, fqdn: &str) -> Vec<Vec<(String, String)>> {
    out.ir.virtual_hosts(isobar_sdk::ir::HTTP_LISTENER)[fqdn]
        .routes
        .values()
        .map(|r| {
            r.policy
                .as_ref()
                .map(|p| p.response_headers.set.clone().into_iter().collect())
                .unwrap_or_default()
        })
        .collect()
}

fn warnings(out: &BuildOutput, name: &str) -> Vec<(Reason, String)> {
    out.status
        .get(&ObjectKey::new(isobar_contour::HTTP_PROXY, "a", name))
        .map(|s| {
            s.warnings
                .iter()
                .map(|w| (w.reason, w.message.clone()))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn the_example_sets_a_response_header_on_every_route_of_selected_vhosts() {
    let out = build_with(json!([{
        "name": "response-header",
        "path": example(),
        "config": {"fqdn-suffix": ".example.com", "name": "X-Served-By", "value": "isobar 100%"},
    }]))
    .unwrap_or_else(|e| panic!("{e}"));
    let header = vec![("x-served-by".to_string(), "isobar 100%%".to_string())];
    assert_eq!(
        response_headers(&out, "one.example.com"),
        vec![header.clone(), header]
    );
    assert_eq!(
        response_headers(&out, "two.example.org"),
        vec![Vec::<(String, String)>::new()]
    );
    assert!(warnings(&out, "one").is_empty());

    // The example reports a missing setting as a condition on the objects it read.
    let out = build_with(json!([{"name": "response-header", "path": example(), "config": {}}]))
        .unwrap_or_else(|e| panic!("{e}"));
    let w = warnings(&out, "one");
    assert!(
        w.iter()
            .any(|(r, m)| *r == Reason::ProcessorReported && m.contains("config.name is required")),
        "{w:?}"
    );
}

#[test]
fn failing_modules_are_isolated_and_say_why() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let cases = [
        ("trap", with_process("unreachable", ""), "trapped"),
        (
            "spin",
            with_process("(loop $l (br $l)) i64.const 0", ""),
            "ran out of fuel",
        ),
        (
            "greedy",
            with_process("(drop (memory.grow (i32.const 1000))) i64.const 0", ""),
            "exceeded its memory limit",
        ),
        ("garbage", answering("not json"), "returned unusable output"),
        (
            "stranger",
            answering(
                r#"{"changes":[{"vhost":"nope.example.com","response-headers-set":{"x":"y"}}]}"#,
            ),
            "does not exist",
        ),
        (
            "badheader",
            answering(
                r#"{"changes":[{"vhost":"one.example.com","response-headers-set":{"bad header":"y"}}]}"#,
            ),
            "not a header name",
        ),
        (
            "outside",
            with_process("i64.const 0x7fff000000000010", ""),
            "outside memory",
        ),
    ];
    for (name, wat, why) in cases {
        let before = isobar_sdk::telemetry::totals();
        // The failing module runs first; the example after it still applies.
        let out = build_with(json!([
            module(dir.path(), name, &wat),
            {"name": "response-header", "path": example(),
             "config": {"name": "x-ok", "value": "yes"}},
        ]))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        let w = warnings(&out, "one");
        assert!(
            w.iter()
                .any(|(r, m)| *r == Reason::ProcessorFailed && m.contains(name) && m.contains(why)),
            "{name}: {w:?}"
        );
        // Nothing of the failed module applied; the example's header did.
        assert_eq!(
            response_headers(&out, "one.example.com")[0],
            vec![("x-ok".to_string(), "yes".to_string())],
            "{name}"
        );
        assert!(
            out.status
                .is_valid(&ObjectKey::new(isobar_contour::HTTP_PROXY, "a", "one"))
        );
        let after = isobar_sdk::telemetry::totals();
        let counted = |list: &[((String, String), u64)]| {
            list.iter()
                .filter(|((p, e), _)| p == "wasm" && e.ends_with(&format!(":{name}")))
                .map(|(_, n)| *n)
                .sum::<u64>()
        };
        assert_eq!(counted(&after), counted(&before) + 1, "{name}: metric");
    }
}

#[test]
fn a_module_that_cannot_load_stops_start_up() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let imports = module(
        dir.path(),
        "imports",
        r#"(module (import "env" "f" (func)) (memory (export "memory") 1))"#,
    );
    let error = build_with(json!([imports])).err().unwrap_or_default();
    assert!(
        error.contains("plugins.wasm: modules[0] (imports)") && error.contains("import"),
        "{error}"
    );
    let v2 = module(
        dir.path(),
        "v2",
        &with_process("i64.const 0", "").replace("i32.const 1)", "i32.const 2)"),
    );
    let error = build_with(json!([v2])).err().unwrap_or_default();
    assert!(error.contains("ABI version 2"), "{error}");
    let huge = module(
        dir.path(),
        "huge",
        &with_process("i64.const 0", "").replace(
            "(memory (export \"memory\") 2)",
            "(memory (export \"memory\") 1000)",
        ),
    );
    let error = build_with(json!([huge])).err().unwrap_or_default();
    assert!(error.contains("memory"), "{error}");
}
