//! Optional authentication between clients and `latscope serve`: a shared secret (a key file on
//! both sides) proven by an HMAC-SHA256 challenge–response, so the secret never crosses the wire
//! and a recorded exchange cannot be replayed.
//!
//! ```text
//! server hello:  challenge = 32 fresh random bytes (hex), one per connection
//! client hello:  auth = { nonce: 32 random bytes (hex),
//!                         mac: hex(HMAC-SHA256(key, "latscope auth v1" ‖ challenge ‖ nonce)) }
//! ```
//!
//! The server recomputes the MAC and compares in constant time (`hmac`'s `verify_slice`). The
//! client's nonce makes the MAC depend on both sides, so a server cannot use a client as an
//! oracle that signs values the server chose alone. What authentication does not give: privacy
//! or integrity of the test traffic itself (as with iperf3, nothing is encrypted), and UDP echo
//! probes (`ping --udp`, same-length answers, no amplification) stay open.

use std::fmt;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::NetError;

/// Bytes of the server's challenge and of the client's nonce.
pub const NONCE_BYTES: usize = 32;
/// Largest key file read (a passphrase or a random key; anything longer is a wrong file).
pub const MAX_KEY_BYTES: u64 = 4096;
/// The environment variable clients read when `--auth-file` is not given.
pub const AUTH_FILE_ENV: &str = "LATSCOPE_AUTH_FILE";
/// Domain separation: a MAC made for this protocol is useless anywhere else.
const CONTEXT: &[u8] = b"latscope auth v1";

type HmacSha256 = Hmac<Sha256>;

/// The client's answer to a challenge, carried in its hello.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthProof {
    /// The client's random nonce, hex.
    pub nonce: String,
    /// HMAC-SHA256(key, context ‖ challenge ‖ nonce), hex.
    pub mac: String,
}

/// A shared secret, kept only as its keyed HMAC state. Its `Debug` never shows the secret.
#[derive(Clone)]
pub struct AuthKey {
    keyed: HmacSha256,
    len: usize,
}

impl fmt::Debug for AuthKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AuthKey({} bytes)", self.len)
    }
}

impl AuthKey {
    /// A key from its bytes (trailing whitespace, such as the newline of `echo KEY > file`, is
    /// not part of it). Err: an empty key.
    pub fn from_bytes(bytes: &[u8]) -> Result<AuthKey, NetError> {
        let end = bytes
            .iter()
            .rposition(|b| !b.is_ascii_whitespace())
            .map_or(0, |i| i + 1);
        if end == 0 {
            return Err(NetError::Invalid(
                "the key is empty: put a secret in the file, e.g. `head -c 32 /dev/urandom | base64 > FILE`"
                    .into(),
            ));
        }
        // HMAC takes keys of any length (RFC 2104: longer ones are hashed first).
        let keyed = HmacSha256::new_from_slice(&bytes[..end])
            .map_err(|e| NetError::Invalid(format!("unusable key: {e}")))?;
        Ok(AuthKey { keyed, len: end })
    }

    /// Read a key file. Refused: a file other users can read (the secret would not be one), a
    /// file that is not a regular file, larger than [`MAX_KEY_BYTES`], or empty.
    pub fn from_file(path: &Path) -> Result<AuthKey, NetError> {
        let shown = path.display();
        let file = std::fs::File::open(path)
            .map_err(|e| NetError::Invalid(format!("cannot read the key file {shown}: {e}")))?;
        let meta = file
            .metadata()
            .map_err(|e| NetError::Invalid(format!("cannot read the key file {shown}: {e}")))?;
        if !meta.is_file() {
            return Err(NetError::Invalid(format!(
                "the key file {shown} is not a regular file"
            )));
        }
        if meta.mode() & 0o007 != 0 {
            return Err(NetError::Invalid(format!(
                "the key file {shown} is readable by every user: `chmod 600 {shown}`"
            )));
        }
        if meta.len() > MAX_KEY_BYTES {
            return Err(NetError::Invalid(format!(
                "the key file {shown} is {} bytes: a key is at most {MAX_KEY_BYTES}",
                meta.len()
            )));
        }
        let mut bytes = Vec::new();
        file.take(MAX_KEY_BYTES)
            .read_to_end(&mut bytes)
            .map_err(|e| NetError::Invalid(format!("cannot read the key file {shown}: {e}")))?;
        AuthKey::from_bytes(&bytes)
            .map_err(|e| NetError::Invalid(format!("the key file {shown}: {e}")))
    }

    fn mac(&self, challenge: &[u8], nonce: &[u8]) -> HmacSha256 {
        let mut mac = self.keyed.clone();
        mac.update(CONTEXT);
        mac.update(challenge);
        mac.update(nonce);
        mac
    }

    /// The client's proof for a server's challenge (hex, as in the server hello).
    pub fn prove(&self, challenge_hex: &str) -> Result<AuthProof, NetError> {
        let challenge = from_hex(challenge_hex).ok_or_else(|| {
            NetError::Protocol("the server's authentication challenge is not hex".into())
        })?;
        let nonce = random_bytes::<NONCE_BYTES>()
            .map_err(|e| NetError::io("drawing an authentication nonce", e))?;
        let mac = self.mac(&challenge, &nonce).finalize().into_bytes();
        Ok(AuthProof {
            nonce: to_hex(&nonce),
            mac: to_hex(&mac),
        })
    }

    /// Whether `proof` answers `challenge` with this key; the MAC is compared in constant time.
    pub fn verify(&self, challenge: &[u8], proof: &AuthProof) -> bool {
        let (Some(nonce), Some(mac)) = (from_hex(&proof.nonce), from_hex(&proof.mac)) else {
            return false;
        };
        if nonce.len() != NONCE_BYTES {
            return false;
        }
        self.mac(challenge, &nonce).verify_slice(&mac).is_ok()
    }
}

/// A fresh challenge for one connection.
pub fn challenge() -> std::io::Result<[u8; NONCE_BYTES]> {
    random_bytes()
}

/// `N` bytes from the kernel's CSPRNG (getrandom(2), which blocks only until the pool is
/// initialised at boot). Err rather than a predictable value.
pub fn random_bytes<const N: usize>() -> std::io::Result<[u8; N]> {
    let mut b = [0u8; N];
    let mut got = 0;
    while got < N {
        // SAFETY: `b[got..]` is valid for writes of `N - got` bytes.
        let n = unsafe { libc::getrandom(b[got..].as_mut_ptr().cast(), N - got, 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        got += n as usize;
    }
    Ok(b)
}

/// Lower-case hex.
pub fn to_hex(b: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(b.len() * 2);
    for &x in b {
        s.push(DIGITS[usize::from(x >> 4)] as char);
        s.push(DIGITS[usize::from(x & 15)] as char);
    }
    s
}

/// Parse hex (either case); None for odd lengths or other characters.
pub fn from_hex(s: &str) -> Option<Vec<u8>> {
    let s = s.as_bytes();
    if s.len() % 2 != 0 {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    s.chunks_exact(2)
        .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> AuthKey {
        AuthKey::from_bytes(s.as_bytes()).expect("key")
    }

    #[test]
    fn right_key_verifies_wrong_key_does_not() {
        let c = challenge().expect("random");
        let proof = key("correct horse").prove(&to_hex(&c)).expect("proof");
        assert!(key("correct horse\n").verify(&c, &proof));
        assert!(!key("correct horsf").verify(&c, &proof));
        // Another challenge (a replay on a new connection) fails.
        let c2 = challenge().expect("random");
        assert_ne!(c, c2);
        assert!(!key("correct horse").verify(&c2, &proof));
    }

    #[test]
    fn malformed_proofs_fail() {
        let c = [7u8; NONCE_BYTES];
        let good = key("k").prove(&to_hex(&c)).expect("proof");
        for bad in [
            AuthProof {
                nonce: "zz".into(),
                mac: good.mac.clone(),
            },
            AuthProof {
                nonce: good.nonce.clone(),
                mac: good.mac[..10].into(),
            },
            AuthProof {
                nonce: good.nonce[..32].into(),
                mac: good.mac.clone(),
            },
            AuthProof {
                nonce: String::new(),
                mac: String::new(),
            },
        ] {
            assert!(!key("k").verify(&c, &bad), "{bad:?}");
        }
        assert!(key("k").verify(&c, &good));
    }

    #[test]
    fn hex_roundtrip() {
        let b = [0u8, 1, 0xab, 0xff];
        assert_eq!(to_hex(&b), "0001abff");
        assert_eq!(from_hex("0001ABff"), Some(b.to_vec()));
        assert_eq!(from_hex("0"), None);
        assert_eq!(from_hex("0g"), None);
    }

    #[test]
    fn key_files_are_checked() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("latscope-auth-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let p = dir.join("key");
        std::fs::write(&p, "s3cret\n").expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let k = AuthKey::from_file(&p).expect("a private key file loads");
        let c = [1u8; NONCE_BYTES];
        let proof = key("s3cret").prove(&to_hex(&c)).expect("proof");
        assert!(
            k.verify(&c, &proof),
            "the file's key is its content without the newline"
        );
        assert_eq!(format!("{k:?}"), "AuthKey(6 bytes)");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let e = AuthKey::from_file(&p)
            .expect_err("world-readable")
            .to_string();
        assert!(e.contains("chmod 600"), "{e}");
        std::fs::write(&p, "\n").expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        assert!(AuthKey::from_file(&p).is_err(), "empty key");
        assert!(AuthKey::from_file(&dir.join("missing")).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
