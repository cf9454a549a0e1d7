//! The lab's guards remove what they made: a temp dir, and namespaces with the processes
//! started in them, also when the test that made them panics.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::lab;

use std::process::Command;

#[test]
fn temp_dir_is_removed_on_drop() {
    let dir = lab::TempDir::new();
    std::fs::create_dir_all(dir.path("a/b")).unwrap();
    std::fs::write(dir.path("a/b/f"), "x").unwrap();
    let path = dir.0.clone();
    assert!(path.join("a/b/f").exists());
    drop(dir);
    assert!(!path.exists(), "{} left behind", path.display());
}

fn namespaces() -> String {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn namespaces_and_their_processes_are_removed_when_a_test_panics() {
    require_root!();
    let (tx, rx) = std::sync::mpsc::channel();
    let result = std::thread::spawn(move || {
        let mut pair = lab::netns::NetnsPair::routed("cln", 93, 1500);
        pair.spawn_cmd(&pair.b.clone(), &["sleep", "60"]);
        let names = vec![
            pair.a.clone(),
            pair.b.clone(),
            pair.router.clone().unwrap().0,
        ];
        let pid = pair.exec(&pair.b, &["sh", "-c", "pgrep -n -x sleep"]);
        tx.send((names, pid.trim().to_string())).unwrap();
        panic!("the test fails while its lab is up");
    })
    .join();
    assert!(result.is_err(), "the thread panicked");
    let (names, pid) = rx.recv().unwrap();
    let listed = namespaces();
    for name in &names {
        assert!(
            !listed.contains(name.as_str()),
            "{name} left behind: {listed}"
        );
    }
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .unwrap_or_default()
                .trim()
                != "sleep",
        "the process started in the lab (pid {pid}) still runs"
    );
}
