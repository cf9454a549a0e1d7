//! Compiles the BPF programs in `src/bpf/` (CO-RE, against the vendored `vmlinux.h`) and
//! generates the libbpf-rs skeletons that `src/skel.rs` includes from `OUT_DIR`:
//! `stack.bpf.c` (latscope stack) and `runq.bpf.c` (run-queue latency).

use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

const SOURCES: &[(&str, &str)] = &[
    ("src/bpf/stack.bpf.c", "stack.skel.rs"),
    ("src/bpf/runq.bpf.c", "runq.skel.rs"),
];

fn main() {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    for (src, skel) in SOURCES {
        SkeletonBuilder::new()
            .source(src)
            // libbpf-cargo adds -D__TARGET_ARCH_<arch> and the libbpf API headers itself.
            .clang_args(["-Isrc/bpf", "-Wall"])
            .build_and_generate(out_dir.join(skel))
            .unwrap_or_else(|e| {
                panic!("compile {src} (needs clang; see scripts/packages.d/ebpf.txt): {e}")
            });
    }
    println!("cargo:rerun-if-changed=src/bpf");
}
