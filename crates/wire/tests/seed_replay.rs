//! Stable-toolchain stand-in for the fuzzers: replay the seed corpus (and the cargo-fuzz corpus,
//! if one was grown locally) through the same entry points as `fuzz/fuzz_targets/*`, plus every
//! truncation and a few thousand deterministic mutations of each seed. Nothing may panic.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use latscope_wire::fuzzing;

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// xorshift64: deterministic mutations.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn mutate(seed: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut m = seed.to_vec();
    if m.is_empty() {
        return m;
    }
    for _ in 0..1 + rng.next() % 8 {
        let i = (rng.next() as usize) % m.len();
        match rng.next() % 4 {
            0 => m[i] ^= 1 << (rng.next() % 8),
            1 => m[i] = rng.next() as u8,
            2 => m[i] = [0, 0xff, 0x7f, 0x80][(rng.next() % 4) as usize],
            _ => m.truncate(i.max(1)),
        }
    }
    m
}

fn replay(target: &str, f: fn(&[u8]), mutations: usize) -> usize {
    let seeds = files(&root().join("seeds").join(target));
    assert!(!seeds.is_empty(), "no seeds for {target}");
    let mut rng = Rng(0x5eed_1234_abcd_ef01);
    let mut n = 0;
    for p in &seeds {
        let seed = std::fs::read(p).unwrap();
        let step = (seed.len() / 256).max(1);
        for cut in (0..seed.len()).step_by(step) {
            f(&seed[..cut]);
            n += 1;
        }
        for _ in 0..mutations {
            f(&mutate(&seed, &mut rng));
            n += 1;
        }
    }
    // A corpus grown by `scripts/fuzz.sh` is replayed as is (files may come and go while a
    // fuzzer runs; unreadable ones are skipped).
    for p in files(&root().join("corpus").join(target)).iter().take(5000) {
        if let Ok(input) = std::fs::read(p) {
            f(&input);
            n += 1;
        }
    }
    n
}

#[test]
fn capfile_seeds_never_panic() {
    // Two seeds × (≈256 cuts + 400 mutations): over a thousand inputs from committed files alone.
    assert!(replay("capfile", fuzzing::capfile, 400) > 1000);
}

#[test]
fn packet_seeds_never_panic() {
    assert!(replay("packet", fuzzing::packet, 600) > 1000);
}
