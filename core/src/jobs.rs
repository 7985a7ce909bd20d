//! The job queue's lease tokens: only a hash of a token is stored, so no
//! reader of `micromegas.jobs` can use one.

use sha2::{Digest, Sha256};

/// The stored form of a lease token: the SHA-256 of its 16 bytes (what
/// `sha256(uuid_send(token))` gives in SQL).
pub fn lease_hash(token: &[u8; 16]) -> [u8; 32] {
    Sha256::digest(token).into()
}
