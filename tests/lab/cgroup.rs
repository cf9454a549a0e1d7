//! A cgroup with a CPU bandwidth limit, for servers that run out of CPU quota (the diagnose
//! lab's CPU-starved scenarios, the agent fleet's throttled peer). Removed on drop.

use std::path::PathBuf;
use std::time::Duration;

use super::unique;

/// A cgroup with a CPU bandwidth limit of `quota_us` per 100 ms period, on cgroup v2
/// (`cpu.max`) when the unified hierarchy has the cpu controller, else on v1's cpu hierarchy
/// (`cpu.cfs_quota_us`). Removed on drop (after its processes are gone).
pub struct CpuCgroup {
    pub dir: PathBuf,
}

fn v1_cpu_root() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() > 3 && f[2] == "cgroup" && f[3].split(',').any(|o| o == "cpu"))
            .then(|| PathBuf::from(f[1]))
    })
}

fn v2_root() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    let root = mounts.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() > 2 && f[2] == "cgroup2").then(|| PathBuf::from(f[1]))
    })?;
    let ctl = std::fs::read_to_string(root.join("cgroup.controllers")).ok()?;
    ctl.split_whitespace().any(|c| c == "cpu").then_some(root)
}

impl CpuCgroup {
    pub fn new(quota_us: u32) -> CpuCgroup {
        let name = unique("cg");
        if let Some(root) = v2_root() {
            let _ = std::fs::write(root.join("cgroup.subtree_control"), "+cpu");
            let dir = root.join(&name);
            std::fs::create_dir(&dir).expect("mkdir cgroup v2");
            std::fs::write(dir.join("cpu.max"), format!("{quota_us} 100000")).expect("cpu.max");
            return CpuCgroup { dir };
        }
        let root = v1_cpu_root().expect("no cgroup cpu controller (v1 or v2) on this host");
        let dir = root.join(&name);
        std::fs::create_dir(&dir).expect("mkdir cgroup v1");
        std::fs::write(dir.join("cpu.cfs_period_us"), "100000").expect("cfs_period_us");
        std::fs::write(dir.join("cpu.cfs_quota_us"), quota_us.to_string()).expect("cfs_quota_us");
        CpuCgroup { dir }
    }

    pub fn add(&self, pid: u32) {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string()).expect("cgroup.procs");
    }
}

impl Drop for CpuCgroup {
    fn drop(&mut self) {
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
