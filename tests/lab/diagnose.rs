//! Running `latscope diagnose` and reading its document.

use serde_json::Value;

/// `latscope diagnose TARGET -d 1s ARGS --json`, which must end with 0 (nothing found) or 1
/// (findings); its exit code and its document, checked against the schema.
pub fn json(target: &str, extra: &[&str]) -> (i32, Value) {
    let mut args = vec!["diagnose", target, "-d", "1s"];
    args.extend(extra);
    args.push("--json");
    let (code, out, err) = super::run(&args);
    assert!(code == 0 || code == 1, "diagnose failed ({code}): {err}");
    (code, super::json_checked(&out, "diagnose"))
}

/// The step named `name` of a diagnose document.
pub fn step<'a>(doc: &'a Value, name: &str) -> &'a Value {
    doc["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no step {name}: {doc}"))
}
