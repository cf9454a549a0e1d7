//! Errors of the eBPF side (the binary maps each to an exit code in `src/exit.rs`).

/// Why `latscope stack` could not start or read its maps.
#[derive(Debug, thiserror::Error)]
pub enum StackError {
    /// Missing CAP_BPF / CAP_PERFMON (or root).
    #[error(
        "loading BPF programs was refused ({0}): latscope stack needs CAP_BPF and CAP_PERFMON (or root); \
         run it with sudo or `setcap cap_bpf,cap_perfmon,cap_net_admin+ep $(which latscope)`. \
         Everything else in latscope works without them"
    )]
    Privilege(String),
    /// The kernel has no BTF, so CO-RE programs cannot be relocated.
    #[error(
        "this kernel exposes no BTF (/sys/kernel/btf/vmlinux is missing; it needs CONFIG_DEBUG_INFO_BTF=y): \
         latscope stack cannot run here. Everything else in latscope works"
    )]
    NoBtf,
    /// libbpf refused the object itself.
    #[error("cannot load the BPF object: {0}")]
    Load(String),
    /// No probe could be attached with any implementation.
    #[error("no probe could be attached: {0}")]
    NothingAttached(String),
    /// Reading a map failed.
    #[error("reading BPF maps: {0}")]
    Read(String),
    /// A local system call failed (timestamping socket, cgroup mount).
    #[error("{0}")]
    System(String),
}

impl StackError {
    /// Classify a failed load of the map owner: EPERM means privileges.
    pub(crate) fn from_load(e: &libbpf_rs::Error, log: &[String]) -> StackError {
        let text = e.to_string();
        if text.contains("Operation not permitted") || text.contains("Permission denied") {
            StackError::Privilege(text)
        } else {
            StackError::Load(match log.last() {
                Some(l) => format!("{text}: {l}"),
                None => text,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn privilege_and_btf_say_what_still_works() {
        for e in [
            StackError::Privilege("missing CAP_BPF".into()),
            StackError::NoBtf,
        ] {
            assert!(e.to_string().contains("latscope works"), "{e}");
        }
        assert!(
            StackError::Privilege("x".into())
                .to_string()
                .contains("CAP_PERFMON")
        );
    }
}
