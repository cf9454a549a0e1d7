//! The JSON contract: every committed `schema/<kind>.schema.json` is what `latscope schema KIND`
//! prints, and every kind the command accepts has its committed file. (Real output is validated
//! against these files in each command's own tests, through `lab::validate`.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::lab;

use latscope::schema_kinds as kinds;

#[test]
fn every_committed_schema_matches_latscope_schema() {
    let mut checked = 0;
    for entry in std::fs::read_dir(lab::schema::dir()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let kind = name
            .strip_suffix(".schema.json")
            .unwrap_or_else(|| panic!("schema/{name}: not a <kind>.schema.json file"));
        let (code, out, err) = lab::run(&["schema", kind]);
        assert_eq!(
            code, 0,
            "schema/{name} has no `latscope schema {kind}`: {err}"
        );
        let committed = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            out.trim(),
            committed.trim(),
            "schema/{name} is stale: run `latscope schema {kind} > schema/{name}`"
        );
        checked += 1;
    }
    assert_eq!(checked, kinds().len(), "one committed file per kind");
}

#[test]
fn every_kind_of_latscope_schema_has_a_committed_file() {
    let kinds = kinds();
    assert!(kinds.len() >= 16, "{kinds:?}");
    for kind in kinds {
        let path = lab::schema::dir().join(format!("{kind}.schema.json"));
        assert!(
            path.exists(),
            "no schema/{kind}.schema.json: run `latscope schema {kind} > schema/{kind}.schema.json`"
        );
    }
}
