//! The household's agent key, and the proof with which hwdb shows an end-host agent that this
//! router is the one the household paired it with (README.md, "Pairing with agents").
//!
//! The key is 32 random bytes, kept as 64 lowercase hex characters and a newline in a file
//! that the router's services read (`--agent-key-file`); the owner copies it from the web UI
//! into the agent. An agent sends a fresh nonce and the address it sent to; the proof is
//! HMAC-SHA256(key, CONTEXT || nonce || address). Only a router holding the key can answer,
//! and an answer is good for that nonce and address only.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use hmac::{Hmac, Mac};
use sha2::Sha256;

pub const KEY_BYTES: usize = 32;
pub const NONCE_BYTES: usize = 32;
/// Separates these proofs from any other use of the key.
pub const CONTEXT: &[u8] = b"homework agent: prove this router holds the household key\0";

pub type Key = [u8; KEY_BYTES];

/// HMAC-SHA256(key, CONTEXT || nonce || addr).
pub fn proof(key: &Key, nonce: &[u8; NONCE_BYTES], addr: &str) -> [u8; 32] {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(CONTEXT);
    mac.update(nonce);
    mac.update(addr.as_bytes());
    mac.finalize().into_bytes().into()
}

pub fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Exactly `N` bytes written as 2N lowercase hex characters.
pub fn from_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let digits = text.as_bytes();
    if digits.len() != 2 * N || !digits.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    let mut out = [0u8; N];
    for (i, pair) in digits.chunks(2).enumerate() {
        out[i] = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(out)
}

/// The key in `path`; if there is no such file, a new random key written there first (temp
/// file, fsync, rename, so a crash leaves either no key or a whole one; mode 0640).
pub fn load_or_create_key(path: &Path) -> crate::Result<Key> {
    match fs::read_to_string(path) {
        Ok(text) => from_hex(text.strip_suffix('\n').unwrap_or(&text)).ok_or_else(|| {
            format!("agent key file {}: expected 64 lowercase hex characters and a newline", path.display()).into()
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut key = [0u8; KEY_BYTES];
            getrandom::fill(&mut key).map_err(|e| format!("cannot get random bytes for the agent key: {e}"))?;
            write_key(path, &key).map_err(|e| format!("cannot write the agent key file {}: {e}", path.display()))?;
            Ok(key)
        }
        Err(e) => Err(format!("cannot read the agent key file {}: {e}", path.display()).into()),
    }
}

fn write_key(path: &Path, key: &Key) -> std::io::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(format!(".tmp{}", std::process::id()));
    let tmp = dir.join(tmp_name);
    let _ = fs::remove_file(&tmp);
    let written = (|| {
        let mut f = fs::OpenOptions::new().write(true).create_new(true).mode(0o640).open(&tmp)?;
        // The same mode whatever the umask: the web UI's group reads it to show the owner.
        f.set_permissions(fs::Permissions::from_mode(0o640))?;
        f.write_all(format!("{}\n", to_hex(key)).as_bytes())?;
        f.sync_all()?;
        fs::rename(&tmp, path)?;
        fs::File::open(dir)?.sync_all()
    })();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The known answer the Go agent's tests check too (endhost-agent/internal/pairing).
    #[test]
    fn proof_known_answer() {
        let key: Key = std::array::from_fn(|i| i as u8);
        let nonce: [u8; NONCE_BYTES] = std::array::from_fn(|i| 0x40 + i as u8);
        assert_eq!(
            to_hex(&proof(&key, &nonce, "10.2.0.1:987")),
            "2954b3d3722b2a8b0de8b1cf31b9c349c391061422e1fd936dd44b5be0556083"
        );
        assert_ne!(proof(&key, &nonce, "10.2.0.1:987"), proof(&key, &nonce, "192.168.1.1:987"));
    }

    #[test]
    fn hex_is_exact() {
        assert_eq!(from_hex::<2>("0aff"), Some([0x0a, 0xff]));
        for bad in ["0AFF", "0af", "0aff0", "0g00", ""] {
            assert_eq!(from_hex::<2>(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_key_is_created_once_and_then_kept() {
        let dir = std::env::temp_dir().join(format!("hwdb-key-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let path = dir.join("state").join("agent.key");
        let key = load_or_create_key(&path).unwrap();
        let text = fs::read_to_string(&path).unwrap();
        assert_eq!(text, format!("{}\n", to_hex(&key)));
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o640);
        assert_eq!(load_or_create_key(&path).unwrap(), key, "an existing key is kept");
        assert_eq!(fs::read_dir(path.parent().unwrap()).unwrap().count(), 1, "no temp file is left");
        fs::write(&path, "not a key\n").unwrap();
        let err = load_or_create_key(&path).unwrap_err().to_string();
        assert!(err.ends_with("expected 64 lowercase hex characters and a newline"), "{err}");
        let _ = fs::remove_dir_all(&dir);
    }
}
