//! The committed fuzz seeds (`fuzz/seeds/<target>/` in the repository), for the stable
//! seed-replay tests each parsing crate runs under `cargo test`: every seed, cut at many lengths,
//! goes through the same entry point its cargo-fuzz target calls.

use std::io;
use std::path::{Path, PathBuf};

/// The directory of `target`'s seeds in this source tree.
pub fn dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/seeds")
        .join(target)
}

/// Call `f` with every seed of `target` cut at up to `cuts` evenly spaced lengths from 0 to its
/// whole length (every length when the seed is shorter), and return how many seeds there were.
/// `f` also gets the seed's file name, so a test can check a known seed's answer.
pub fn replay_prefixes(
    target: &str,
    cuts: usize,
    mut f: impl FnMut(&str, &[u8]),
) -> io::Result<usize> {
    let mut n = 0;
    for entry in std::fs::read_dir(dir(target))? {
        let path = entry?.path();
        let seed = std::fs::read(&path)?;
        let name = path
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let step = (seed.len() / cuts.max(1)).max(1);
        for cut in (0..seed.len()).step_by(step).chain([seed.len()]) {
            f(&name, &seed[..cut]);
        }
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    #[test]
    fn every_length_of_short_seeds_and_the_whole_of_each() {
        let mut lens = Vec::new();
        let n =
            super::replay_prefixes("serve_control", usize::MAX, |_, b| lens.push(b.len())).unwrap();
        assert!(n > 0);
        assert!(lens.contains(&0));
        let mut few = Vec::new();
        super::replay_prefixes("serve_control", 4, |_, b| few.push(b.len())).unwrap();
        assert!(few.len() <= lens.len());
        assert!(super::replay_prefixes("no such target", 1, |_, _| ()).is_err());
    }
}
