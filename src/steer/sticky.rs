//! The sticky hash of a rollout: which side of the percent a key falls on.
//!
//! A key's bucket (0..10,000) is a stable hash (XXH3, a fixed published algorithm, so every replica and
//! every release agrees) of the key, seeded by the rollout's name. A key goes to `to` when its bucket
//! is under the percent in hundredths, so raising the percent only ever moves keys from default to `to`.

use xxhash_rust::xxh3::{Xxh3, xxh3_64, xxh3_64_with_seed};

use super::request::SteerRequest;
use crate::config::StickyBy;

/// Number of buckets: one per hundredth of a percent.
pub(crate) const BUCKETS: u64 = 10_000;

/// The seed of a rollout's hash, from its name.
pub(crate) fn salt(rollout_name: &str) -> u64 {
    xxh3_64(rollout_name.as_bytes())
}

/// The bucket (0..10,000) of the request's key for a rollout salted with `salt`.
pub(crate) fn bucket(salt: u64, sticky_by: StickyBy, req: &SteerRequest<'_>) -> u16 {
    let hash = match sticky_by {
        StickyBy::Namespace => xxh3_64_with_seed(req.info.namespace.as_bytes(), salt),
        StickyBy::User => xxh3_64_with_seed(req.user.as_bytes(), salt),
        StickyBy::Object => {
            let info = req.info;
            hash_parts(
                salt,
                &[
                    info.namespace.as_bytes(),
                    info.api_group.as_bytes(),
                    info.resource.as_bytes(),
                    info.name.as_bytes(),
                ],
            )
        }
        StickyBy::Client => {
            let mut version = [0u8; 12];
            if let Some(v) = req.client.version {
                version[..4].copy_from_slice(&v.major.to_le_bytes());
                version[4..8].copy_from_slice(&v.minor.to_le_bytes());
                version[8..].copy_from_slice(&v.patch.to_le_bytes());
            }
            hash_parts(salt, &[req.client.name.as_bytes(), &version])
        }
    };
    (hash % BUCKETS) as u16
}

/// The bucket of a raw key, for tests.
#[cfg(test)]
pub(crate) fn bucket_of_key(salt: u64, key: &str) -> u16 {
    (xxh3_64_with_seed(key.as_bytes(), salt) % BUCKETS) as u16
}

/// Hashes parts with a separator that no part contains (0xff never occurs in UTF-8), so `a/b` + `c`
/// and `a` + `b/c` differ.
fn hash_parts(salt: u64, parts: &[&[u8]]) -> u64 {
    let mut h = Xxh3::with_seed(salt);
    for part in parts {
        h.update(part);
        h.update(&[0xff]);
    }
    h.digest()
}
