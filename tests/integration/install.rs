//! `scripts/install.sh` puts latscope, its man pages and its completions under a prefix, and
//! what it installs works: the binary runs from there, `man` renders the pages, and bash accepts
//! the completion script and completes subcommands with it.

use std::path::Path;
use std::process::Command;

fn sh(cmd: &str) -> (bool, String) {
    let out = Command::new("bash")
        .arg("-c")
        .arg(cmd)
        .output()
        .expect("bash runs");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn install_script_puts_binary_man_pages_and_completions_under_the_prefix() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let prefix = std::env::temp_dir().join(format!("latscope-install-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&prefix);
    let (ok, out) = sh(&format!(
        "bash {}/scripts/install.sh {}",
        root.display(),
        prefix.display()
    ));
    assert!(ok, "install.sh failed: {out}");
    assert!(out.contains("install: latscope"), "{out}");

    let bin = prefix.join("bin/latscope");
    let (ok, out) = sh(&format!("{} --version", bin.display()));
    assert!(ok && out.starts_with("latscope "), "{out}");

    // One page per subcommand, and man renders them.
    let man1 = prefix.join("share/man/man1");
    for page in [
        "latscope.1",
        "latscope-rr.1",
        "latscope-diagnose.1",
        "latscope-http.1",
    ] {
        assert!(
            man1.join(page).is_file(),
            "{page} missing in {}",
            man1.display()
        );
    }
    let (ok, out) = sh(&format!(
        "MANWIDTH=100 man -l {}/latscope-rr.1 2>&1 | col -b",
        man1.display()
    ));
    if ok && !out.contains("not found") {
        assert!(out.contains("latscope-rr"), "{out}");
        assert!(
            out.contains("--sizes"),
            "the rr page lacks its options: {out}"
        );
    }

    // bash parses the script and completes `latscope d` to demo/diagnose.
    let bash = prefix.join("share/bash-completion/completions/latscope");
    let (ok, out) = sh(&format!(
        ". {} && COMP_WORDS=(latscope di) COMP_CWORD=1 COMP_LINE='latscope di' COMP_POINT=11 \
         && _latscope latscope di latscope && printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        bash.display()
    ));
    assert!(ok, "{out}");
    assert!(out.lines().any(|l| l == "diagnose"), "{out}");
    assert!(prefix.join("share/zsh/site-functions/_latscope").is_file());
    assert!(
        prefix
            .join("share/fish/vendor_completions.d/latscope.fish")
            .is_file()
    );
    let _ = std::fs::remove_dir_all(&prefix);
}

/// The demo command's build step says what it builds and roughly how long before cargo's own
/// progress, asks setup for the demo's needs only, and says when it is done. Run in a copy of
/// the script with stand-ins for setup, cargo and install (the real ones take minutes).
#[test]
fn demo_script_announces_the_build_and_times_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fake = std::env::temp_dir().join(format!("latscope-demo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&fake);
    std::fs::create_dir_all(fake.join("scripts")).unwrap();
    std::fs::create_dir_all(fake.join("bin")).unwrap();
    std::fs::copy(root.join("scripts/demo.sh"), fake.join("scripts/demo.sh")).unwrap();
    std::fs::write(
        fake.join("Cargo.lock"),
        "[[package]]\nname = \"a\"\n[[package]]\nname = \"b\"\n[[package]]\nname = \"c\"\n",
    )
    .unwrap();
    let log = fake.join("calls.log");
    let w = |p: &str, text: String| std::fs::write(fake.join(p), text).unwrap();
    w(
        "scripts/setup.sh",
        format!("echo \"setup $*\" >> {}\n", log.display()),
    );
    w(
        "scripts/install.sh",
        format!("echo install >> {}\n", log.display()),
    );
    // cargo: records its arguments, "compiles", and leaves a binary that says it ran.
    w(
        "bin/cargo",
        format!(
            "#!/bin/sh\necho \"cargo $*\" >> {log}\necho '   Compiling a v1' >&2\n\
             mkdir -p target/release\nprintf '#!/bin/sh\\necho \"latscope $*\"\\n' > target/release/latscope\n\
             chmod +x target/release/latscope\n",
            log = log.display()
        ),
    );
    sh(&format!("chmod +x {}/bin/cargo", fake.display()));
    let run = || {
        sh(&format!(
            "HOME={f} PATH={f}/bin:$PATH bash {f}/scripts/demo.sh 2>&1",
            f = fake.display()
        ))
    };
    let (ok, out) = run();
    assert!(ok, "{out}");
    let lines: Vec<&str> = out.lines().collect();
    let announce = lines
        .iter()
        .position(|l| l.starts_with("demo: building latscope (release): 3 crates from scratch"))
        .unwrap_or_else(|| panic!("no build announcement naming the crates: {out}"));
    assert!(lines[announce].contains("minutes"), "{out}");
    let compiling = lines.iter().position(|l| l.contains("Compiling")).unwrap();
    assert!(announce < compiling, "announced before cargo starts: {out}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("demo: built target/release/latscope in ")),
        "{out}"
    );
    assert_eq!(lines.last(), Some(&"latscope demo"), "{out}");
    let calls = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        calls.lines().collect::<Vec<_>>(),
        ["setup --demo", "cargo build --release --locked", "install"],
        "{calls}"
    );
    // A second run finds the earlier build and says it only recompiles what changed.
    let (ok, out) = run();
    assert!(ok && out.contains("an earlier build is there"), "{out}");
    let _ = std::fs::remove_dir_all(&fake);
}
