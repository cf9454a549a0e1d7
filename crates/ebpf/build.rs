//! Compiles `src/bpf/stack.bpf.c` (CO-RE, against the vendored `vmlinux.h`) and generates the
//! libbpf-rs skeleton that `src/skel.rs` includes from `OUT_DIR`.

use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

const SRC: &str = "src/bpf/stack.bpf.c";

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"))
        .join("stack.skel.rs");
    SkeletonBuilder::new()
        .source(SRC)
        // libbpf-cargo adds -D__TARGET_ARCH_<arch> and the libbpf API headers itself.
        .clang_args(["-Isrc/bpf", "-Wall"])
        .build_and_generate(&out)
        .expect("compile src/bpf/stack.bpf.c (needs clang; see scripts/packages.d/ebpf.txt)");
    println!("cargo:rerun-if-changed=src/bpf");
}
