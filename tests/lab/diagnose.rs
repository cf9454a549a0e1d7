//! Running `latscope diagnose` and reading its document.

use serde_json::Value;

/// `latscope diagnose TARGET -d 1s ARGS --json`, which must end with 0 (nothing found) or 1
/// (findings); its exit code and its document, checked against the schema.
pub fn json(target: &str, extra: &[&str]) -> (i32, Value) {
    let mut args = vec!["diagnose", target, "-d", "1s"];
    args.extend(extra);
    args.push("--json");
    let t0 = std::time::Instant::now();
    let (code, out, err) = super::run(&args);
    let wall_ms = t0.elapsed().as_millis() as u64;
    assert!(code == 0 || code == 1, "diagnose failed ({code}): {err}");
    let doc = super::json_checked(&out, "diagnose");
    // Every step that ran here says how long it took, within the run's own time.
    for s in doc["steps"].as_array().unwrap() {
        if s["measured_at"] == "server" {
            continue;
        }
        let took = s["took_ms"]
            .as_u64()
            .unwrap_or_else(|| panic!("no took_ms: {s}"));
        assert!(
            took <= wall_ms,
            "{s} took longer than the run's {wall_ms} ms"
        );
    }
    (code, doc)
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
