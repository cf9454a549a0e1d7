//! The Debian package (`scripts/build-deb.sh`), built from the binary under test: its control
//! fields (Depends names exactly the packages of the libraries the binary links), its files (the
//! stripped binary, one man page per subcommand, completions, the units, the conffiles), then — as
//! root — installed on this host, used (`latscope --version`, `man -w`, `systemd-analyze verify`,
//! the agent's check of its packaged configuration, an upgrade that keeps an edited conffile),
//! removed and purged, leaving nothing behind. And the registry build of the image
//! (deploy/container/Containerfile) installs what the binary links and builds with what
//! scripts/setup.sh installs; its last stage is the offline image's (tests/integration/deploy_kits.rs runs
//! that).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::lab;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn text(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Run a command; panic with its output unless it succeeds; its stdout.
fn ok(program: &str, args: &[&str]) -> String {
    let mut all = vec![program];
    all.extend_from_slice(args);
    text(&lab::sh(&all))
}

fn version() -> String {
    let v = ok(lab::BIN, &["--version"]);
    v.trim().strip_prefix("latscope ").unwrap().to_string()
}

/// Build the package from the binary under test into `dir`; its path.
fn build_deb(dir: &Path) -> PathBuf {
    let out = Command::new("bash")
        .arg("scripts/build-deb.sh")
        .args(["--binary", lab::BIN, "--out"])
        .arg(dir)
        .current_dir(root())
        .output()
        .unwrap();
    lab::assert_success(&out);
    let arch = ok("dpkg", &["--print-architecture"]);
    let deb = dir.join(format!("latscope_{}_{}.deb", version(), arch.trim()));
    assert!(
        text(&out).starts_with(&format!("build-deb: {}", deb.display())),
        "{}",
        text(&out)
    );
    deb
}

/// The package names of a Depends field (versions and alternatives' syntax removed).
fn depends_names(field: &str) -> BTreeSet<String> {
    field
        .split(',')
        .map(|d| {
            let name = d.split(['(', '|']).next().unwrap().trim();
            assert!(
                d.contains("(>= "),
                "{d}: no version (dpkg-shlibdeps gives one)"
            );
            name.to_string()
        })
        .collect()
}

/// The packages whose files the binary links (its DT_NEEDED libraries, resolved by ldd, owned
/// per dpkg): what Depends must name, found without dpkg-shlibdeps.
fn linked_packages(binary: &Path) -> BTreeSet<String> {
    let needed: BTreeSet<String> = ok("readelf", &["-d", binary.to_str().unwrap()])
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .map(|l| {
            l.split('[')
                .nth(1)
                .unwrap()
                .trim_end_matches(']')
                .to_string()
        })
        .collect();
    assert!(needed.contains("libpcap.so.0.8"), "{needed:?}");
    let ldd = ok("ldd", &[binary.to_str().unwrap()]);
    let mut packages = BTreeSet::new();
    for soname in &needed {
        let path = ldd
            .lines()
            .find_map(|l| {
                let l = l.trim();
                if l.starts_with(&format!("{soname} => ")) {
                    l.split(' ').nth(2).map(str::to_string)
                } else if l.starts_with('/') && l.split(' ').next()?.ends_with(soname.as_str()) {
                    l.split(' ').next().map(str::to_string)
                } else {
                    None
                }
            })
            .unwrap_or_else(|| panic!("ldd does not resolve {soname}:\n{ldd}"));
        // dpkg knows a file by the path its package ships, /lib or /usr/lib (merged /usr).
        let alt = match path.strip_prefix("/usr") {
            Some(p) => p.to_string(),
            None => format!("/usr{path}"),
        };
        let owner = [&path, &alt]
            .iter()
            .find_map(|p| {
                let o = Command::new("dpkg").args(["-S", p]).output().ok()?;
                o.status.success().then(|| text(&o))
            })
            .unwrap_or_else(|| panic!("no package owns {path}"));
        let pkg = owner.split(':').next().unwrap().trim().to_string();
        packages.insert(pkg);
    }
    packages
}

/// The subcommands `latscope --help` lists (its "Commands:" section, less `help`).
fn subcommands() -> Vec<String> {
    let help = ok(lab::BIN, &["--help"]);
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        // a command's name at two spaces; its description's continuation lines further in
        .filter(|l| !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

/// The package's files and directories (paths as installed: "/usr/bin/latscope").
fn deb_paths(deb: &Path) -> Vec<String> {
    let listing = ok("dpkg-deb", &["-c", deb.to_str().unwrap()]);
    listing
        .lines()
        .map(|l| {
            let p = l.split_whitespace().nth(5).unwrap();
            p.trim_start_matches('.').trim_end_matches('/').to_string()
        })
        .filter(|p| !p.is_empty())
        .collect()
}

/// Check the package without installing it: control fields, Depends, its files.
fn check_deb_contents(deb: &Path, work: &Path) {
    let field = |f: &str| {
        ok("dpkg-deb", &["-f", deb.to_str().unwrap(), f])
            .trim()
            .to_string()
    };
    assert_eq!(field("Package"), "latscope");
    assert_eq!(field("Version"), version());
    let x = work.join("x");
    ok(
        "dpkg-deb",
        &["-x", deb.to_str().unwrap(), x.to_str().unwrap()],
    );
    let bin = x.join("usr/bin/latscope");
    assert_eq!(
        depends_names(&field("Depends")),
        linked_packages(&bin),
        "Depends must name the packages of the libraries the binary links, and nothing else"
    );
    // The stripped binary runs, and is the one under test.
    assert_eq!(
        ok(bin.to_str().unwrap(), &["--version"]).trim(),
        format!("latscope {}", version())
    );
    let sections = ok("readelf", &["-S", bin.to_str().unwrap()]);
    assert!(
        !sections.contains(".symtab") && !sections.contains(".debug_info"),
        "not stripped"
    );
    // One man page per subcommand, and the top-level one.
    let commands = subcommands();
    assert!(
        commands.len() >= 15 && commands.contains(&"rr".to_string()),
        "{commands:?}"
    );
    let mut want: BTreeSet<String> = commands
        .iter()
        .map(|c| format!("latscope-{c}.1.gz"))
        .collect();
    want.insert("latscope.1.gz".into());
    let pages: BTreeSet<String> = std::fs::read_dir(x.join("usr/share/man/man1"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(pages, want);
    for f in [
        "usr/share/bash-completion/completions/latscope",
        "usr/share/zsh/vendor-completions/_latscope",
        "usr/share/fish/vendor_completions.d/latscope.fish",
        "usr/share/doc/latscope/copyright",
        "lib/systemd/system/latscope-agent.service",
        "lib/systemd/system/latscope-serve.service",
    ] {
        assert!(
            std::fs::metadata(x.join(f)).is_ok_and(|m| m.len() > 0),
            "{f} missing or empty"
        );
    }
    let copyright = std::fs::read_to_string(x.join("usr/share/doc/latscope/copyright")).unwrap();
    assert!(
        copyright.contains("\n rustls v0.23."),
        "the crates' licenses: {copyright}"
    );
    // Every file under /etc is a conffile, and every conffile is in the package.
    let control = work.join("control");
    ok(
        "dpkg-deb",
        &["-e", deb.to_str().unwrap(), control.to_str().unwrap()],
    );
    let conffiles: BTreeSet<String> = std::fs::read_to_string(control.join("conffiles"))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let etc: BTreeSet<String> = deb_paths(deb)
        .into_iter()
        .filter(|p| p.starts_with("/etc/") && x.join(&p[1..]).is_file())
        .collect();
    assert_eq!(conffiles, etc);
    assert!(conffiles.contains("/etc/latscope/agent.toml"));
    // The units run the packaged binary.
    for unit in ["latscope-agent.service", "latscope-serve.service"] {
        let u = std::fs::read_to_string(x.join("lib/systemd/system").join(unit)).unwrap();
        let exec = u
            .lines()
            .find_map(|l| l.strip_prefix("ExecStart="))
            .unwrap();
        assert!(exec.starts_with("/usr/bin/latscope "), "{unit}: {exec}");
    }
}

/// Paths of this host that hold traces of an installed latscope package: files named
/// *latscope* under /etc and /var (not the container store or temp files), and every path the
/// package ships.
fn traces(package_paths: &[String]) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut stack = vec![PathBuf::from("/etc"), PathBuf::from("/var")];
    let skip = [
        "/var/lib/containers",
        "/var/tmp",
        "/var/log",
        "/var/cache/apt",
    ];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if skip.iter().any(|s| p.starts_with(s)) {
                continue;
            }
            if p.file_name()
                .unwrap()
                .to_string_lossy()
                .contains("latscope")
            {
                found.insert(p.display().to_string());
            }
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(p);
            }
        }
    }
    for p in package_paths {
        // Directories the system has anyway (/usr/share/man/man1) are not traces.
        if Path::new(p).symlink_metadata().is_ok() && !Path::new(p).is_dir() {
            found.insert(p.clone());
        }
    }
    found
}

/// dpkg's status of latscope ("install ok installed", …), None when dpkg does not know it.
fn dpkg_status() -> Option<String> {
    let o = Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", "latscope"])
        .output()
        .unwrap();
    let s = text(&o);
    (o.status.success() && !s.contains("not-installed")).then_some(s)
}

/// Purges the package when the test ends, also when it fails half way, and removes
/// /var/lib/private if the test made it (systemd makes it for the first DynamicUser= service
/// with a StateDirectory=; the purge leaves the directory itself, as it leaves /var/lib).
struct Installed {
    made_private: bool,
}

impl Drop for Installed {
    fn drop(&mut self) {
        if dpkg_status().is_some() {
            let _ = Command::new("dpkg").args(["--purge", "latscope"]).output();
        }
        if self.made_private {
            let _ = std::fs::remove_dir("/var/lib/private");
        }
    }
}

#[test]
fn debian_package_installs_works_and_purges_without_a_trace() {
    let work = lab::TempDir::new();
    let deb = build_deb(&work.0);
    check_deb_contents(&deb, &work.0);
    if !lab::is_root() {
        eprintln!(
            "skipped installing the package: needs root (dpkg -i); its contents were checked"
        );
        return;
    }
    // Never touch a latscope the host's owner installed.
    assert_eq!(
        dpkg_status(),
        None,
        "a latscope package is installed on this host: the test would remove it"
    );
    let paths = deb_paths(&deb);
    let before = traces(&paths);
    assert!(
        !before.iter().any(|p| p.starts_with("/etc/latscope")
            || p.contains("/var/lib/latscope")
            || p.contains("/var/lib/private/latscope")
            || p.starts_with("/usr/bin/latscope")),
        "leftovers of another install: {before:?}"
    );
    let _purge = Installed {
        made_private: !Path::new("/var/lib/private").exists(),
    };
    ok("dpkg", &["--install", deb.to_str().unwrap()]);
    assert_eq!(dpkg_status().as_deref(), Some("install ok installed"));
    // Every file is what the package's md5sums say (dpkg prints the ones that differ).
    assert_eq!(ok("dpkg", &["--verify", "latscope"]), "");
    assert_eq!(
        ok("/usr/bin/latscope", &["--version"]).trim(),
        format!("latscope {}", version())
    );
    // man finds the pages where the package put them (and the unit's Documentation= pages).
    for page in ["latscope-rr", "latscope-agent", "latscope-serve"] {
        let path = Command::new("man")
            .args(["-w", page])
            .env("MANPATH", "/usr/share/man")
            .output()
            .unwrap();
        assert_eq!(
            text(&path).trim(),
            format!("/usr/share/man/man1/{page}.1.gz")
        );
    }
    let rendered = Command::new("man")
        .args(["-l", "/usr/share/man/man1/latscope-rr.1.gz"])
        .env("MANWIDTH", "100")
        .output()
        .unwrap();
    assert!(text(&rendered).contains("--sizes"), "{}", text(&rendered));
    // The units are valid, and name a binary that is there (--man=no: the pages were found
    // above, and checking them here would leave formatted copies in /var/cache/man).
    let verify = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .args([
            "/lib/systemd/system/latscope-agent.service",
            "/lib/systemd/system/latscope-serve.service",
        ])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&verify.stderr);
    assert!(
        verify.status.success() && !said.contains("latscope"),
        "systemd-analyze verify: {said}"
    );
    // The packaged configuration is one the agent accepts.
    let check = ok(
        "/usr/bin/latscope",
        &["agent", "--check", "--config", "/etc/latscope/agent.toml"],
    );
    assert!(check.contains(": ok"), "{check}");
    // bash completes with the packaged script.
    let bash = Command::new("bash")
        .arg("-c")
        .arg(". /usr/share/bash-completion/completions/latscope && COMP_WORDS=(latscope di) COMP_CWORD=1 \
              COMP_LINE='latscope di' COMP_POINT=11 && _latscope latscope di latscope && printf '%s\\n' \"${COMPREPLY[@]}\"")
        .output()
        .unwrap();
    assert!(
        text(&bash).lines().any(|l| l == "diagnose"),
        "{}",
        text(&bash)
    );

    // What an operator and the service leave: the unit enabled, the agent's state, an edited
    // peer list — which an upgrade (here: the same version again) keeps.
    ok("systemctl", &["enable", "latscope-agent.service"]);
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create("/var/lib/private/latscope")
            .unwrap();
    }
    std::fs::write("/var/lib/private/latscope/findings.jsonl", "{}\n").unwrap();
    std::os::unix::fs::symlink("private/latscope", "/var/lib/latscope").unwrap();
    let mut peers = std::fs::read_to_string("/etc/latscope/peers").unwrap();
    peers.push_str("192.0.2.7 test-peer\n");
    std::fs::write("/etc/latscope/peers", &peers).unwrap();
    ok("dpkg", &["--install", deb.to_str().unwrap()]);
    assert_eq!(
        std::fs::read_to_string("/etc/latscope/peers").unwrap(),
        peers
    );

    // Removed: the program goes, the configuration stays; purged: nothing is left.
    ok("dpkg", &["--remove", "latscope"]);
    assert!(!Path::new("/usr/bin/latscope").exists());
    assert!(Path::new("/etc/latscope/peers").exists());
    assert_eq!(dpkg_status().as_deref(), Some("deinstall ok config-files"));
    ok("dpkg", &["--purge", "latscope"]);
    assert_eq!(dpkg_status(), None);
    let after = traces(&paths);
    assert_eq!(
        after, before,
        "the purge left these behind (or removed what was there)"
    );
    let man = Command::new("man")
        .args(["-w", "latscope-rr"])
        .env("MANPATH", "/usr/share/man")
        .output()
        .unwrap();
    assert!(
        !man.status.success(),
        "man still finds latscope-rr: {}",
        text(&man)
    );
}

/// The Containerfile's stages, by name: (name, its instructions with continuation lines joined).
fn containerfile_stages() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(root().join("deploy/container/Containerfile")).unwrap();
    let joined = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("\\\n", " ");
    let mut stages: Vec<(String, String)> = vec![];
    for line in joined.lines() {
        if let Some(from) = line.strip_prefix("FROM ") {
            let name = from.split(" AS ").nth(1).unwrap_or("").trim().to_string();
            stages.push((name, String::new()));
        } else if let Some((_, body)) = stages.last_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    stages
}

/// The packages an `apt-get install` line of a stage names.
fn apt_installs(stage: &str) -> BTreeSet<String> {
    stage
        .split("apt-get install")
        .skip(1)
        .flat_map(|rest| {
            rest.split("&&")
                .next()
                .unwrap()
                .split_whitespace()
                .filter(|w| !w.starts_with('-'))
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn containerfile_builds_with_setups_packages_and_installs_what_the_binary_links() {
    let stages = containerfile_stages();
    let names: Vec<&str> = stages.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["build", "runtime", ""],
        "build → runtime → the image"
    );
    let (build, runtime, last) = (&stages[0].1, &stages[1].1, &stages[2].1);
    // The build stage installs what setup.sh installs to compile and link: the libraries'
    // development packages, clang, pkg-config.
    let setup: BTreeSet<String> = std::fs::read_dir(root().join("scripts/packages.d"))
        .unwrap()
        .flat_map(|e| {
            std::fs::read_to_string(e.unwrap().path())
                .unwrap()
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .map(|l| l.split('#').next().unwrap().trim().to_string())
        // the libraries' development packages (dpkg-dev is a tool)
        .filter(|l| (l.ends_with("-dev") && l.contains("lib")) || l == "clang" || l == "pkg-config")
        .collect();
    let built_with = apt_installs(build);
    assert!(
        setup.is_subset(&built_with),
        "the build stage lacks {:?}",
        setup.difference(&built_with).collect::<Vec<_>>()
    );
    // The runtime stage installs the packages of the libraries the binary links, but for those
    // every Debian image has (the essential packages depend on libc6; apt, through libstdc++6,
    // on libgcc-s1), and the CA bundle.
    let runtime_installs = apt_installs(runtime);
    for pkg in linked_packages(Path::new(lab::BIN)) {
        let in_every_image = pkg == "libc6" || pkg == "libgcc-s1";
        assert!(
            in_every_image || runtime_installs.contains(&pkg),
            "the runtime stage does not install {pkg}"
        );
    }
    assert!(runtime_installs.contains("ca-certificates"));
    // It assembles the image's files with the script scripts/build-image.sh runs, and the last
    // stage is those files alone (scripts/build-image.sh builds exactly that stage).
    assert!(
        runtime.contains("bash /image-rootfs.sh /latscope /rootfs"),
        "{runtime}"
    );
    assert!(
        runtime.contains("COPY scripts/lib/image-rootfs.sh "),
        "{runtime}"
    );
    assert!(last.contains("COPY --from=runtime /rootfs/ /"), "{last}");
    assert!(!last.contains("RUN "), "the image has no shell to RUN with");
    let build_script = std::fs::read_to_string(root().join("scripts/build-image.sh")).unwrap();
    assert!(build_script.contains("--build-context \"runtime=$work/runtime\""));
    assert!(
        build_script.contains(
            "bash scripts/lib/image-rootfs.sh \"$work/latscope\" \"$work/runtime/rootfs\""
        )
    );
}
