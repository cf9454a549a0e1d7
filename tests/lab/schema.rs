//! The committed JSON schemas (`schema/<kind>.schema.json`) as the oracle for real output. The
//! `schema` test checks that every committed file is what `latscope schema KIND` prints, so
//! validating against the file is validating against the code.

use std::path::PathBuf;

/// The directory of the committed schemas.
pub fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("schema")
}

/// Parse stdout as one JSON document and validate it against `schema/<kind>.schema.json`.
pub fn json_checked(stdout: &str, kind: &str) -> serde_json::Value {
    let doc: serde_json::Value =
        serde_json::from_str(stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"));
    validate(&doc, kind);
    doc
}

/// Panic with every violation when `doc` does not match `schema/<kind>.schema.json`.
pub fn validate(doc: &serde_json::Value, kind: &str) {
    let path = dir().join(format!("{kind}.schema.json"));
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("schema file"))
            .expect("schema JSON");
    let validator = jsonschema::validator_for(&schema).expect("valid schema");
    let errors: Vec<String> = validator
        .iter_errors(doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{kind} output violates its schema: {errors:?}\n{doc}"
    );
}
