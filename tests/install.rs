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
