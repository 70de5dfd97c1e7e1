//! The routing identity of a bearer-token client, read from the token itself: a ServiceAccount
//! token (a JWT whose claims name the account) or a bootstrap token (`abcdef.0123456789abcdef`).
//!
//! Only for routing (`users`, `groups`, `stickyBy: user`): the token still goes upstream untouched,
//! and the apiserver still authenticates it. Its signature is not checked here, and needs not be:
//! a token the apiserver rejects gets 401 whichever backend it is steered to, so a forged claim
//! buys only the choice of which apiserver refuses it. A token whose claims skewgate cannot read
//! as the apiserver would (OIDC, webhook and static tokens: their mapping is the apiserver's
//! configuration) has no routing identity, as before.
//!
//! The names are the ones kube-apiserver's authenticators give: `system:serviceaccount:NS:NAME`
//! in `system:serviceaccounts`, `system:serviceaccounts:NS` and `system:authenticated`
//! (pkg/serviceaccount); `system:bootstrap:ID` in `system:bootstrappers` and
//! `system:authenticated` (the bootstrap token authenticator; groups a token's Secret adds are not
//! known here).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Deserialize;

use super::Identity;

/// The tokens each worker thread remembers, by a hash of the header value: a client sends the
/// same token for an hour or more, and reading one costs about 1.6 µs, a lookup about 85 ns
/// (`cargo bench --bench decide -- token-identity`). Cleared when full.
const CACHED: usize = 4096;

thread_local! {
    static CACHE: RefCell<HashMap<u64, Option<Arc<Identity>>>> = RefCell::new(HashMap::new());
}

/// `from_authorization`, remembered per worker thread. A hash collision (64 bits) could give a
/// token another's routing identity, which, as a forged claim, buys nothing but the choice of
/// which apiserver judges it.
pub fn cached(value: &[u8]) -> Option<Arc<Identity>> {
    let key = xxhash_rust::xxh3::xxh3_64(value);
    if let Some(hit) = CACHE.with_borrow(|c| c.get(&key).cloned()) {
        return hit;
    }
    let identity = from_authorization(value).map(Arc::new);
    CACHE.with_borrow_mut(|c| {
        if c.len() >= CACHED {
            c.clear();
        }
        c.insert(key, identity.clone());
    });
    identity
}

/// The longest token read: the apiserver's own limit on a header is far above any real
/// ServiceAccount token (about 1 KiB), so a longer one is not a ServiceAccount token.
const MAX_TOKEN: usize = 16 << 10;

const SA_PREFIX: &str = "system:serviceaccount:";

/// The identity `Authorization` names, if it is a bearer token skewgate can read.
pub fn from_authorization(value: &[u8]) -> Option<Identity> {
    let value = std::str::from_utf8(value).ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let token = token.trim();
    if token.len() > MAX_TOKEN {
        return None;
    }
    bootstrap(token).or_else(|| service_account(token))
}

/// `[a-z0-9]{6}.[a-z0-9]{16}`, as the bootstrap token authenticator reads it.
fn bootstrap(token: &str) -> Option<Identity> {
    let (id, secret) = token.split_once('.')?;
    let ok = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    if !(ok(id, 6) && ok(secret, 16)) {
        return None;
    }
    Some(Identity {
        user: format!("system:bootstrap:{id}"),
        groups: vec![
            "system:bootstrappers".to_owned(),
            "system:authenticated".to_owned(),
        ],
    })
}

/// The claims of a ServiceAccount token that name its account: bound tokens carry
/// `kubernetes.io.namespace` and `sub`, legacy (Secret) tokens their own keys.
#[derive(Deserialize)]
struct Claims {
    sub: Option<String>,
    #[serde(rename = "kubernetes.io")]
    bound: Option<Bound>,
    #[serde(rename = "kubernetes.io/serviceaccount/namespace")]
    legacy_namespace: Option<String>,
    #[serde(rename = "kubernetes.io/serviceaccount/service-account.name")]
    legacy_name: Option<String>,
}

#[derive(Deserialize)]
struct Bound {
    namespace: Option<String>,
    serviceaccount: Option<Named>,
}

#[derive(Deserialize)]
struct Named {
    name: Option<String>,
}

fn service_account(token: &str) -> Option<Identity> {
    let mut parts = token.split('.');
    let (_header, payload, _signature) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let json = URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
    let claims: Claims = serde_json::from_slice(&json).ok()?;
    let (namespace, name) = match (&claims.bound, &claims.legacy_namespace) {
        (Some(b), _) => (
            b.namespace.clone()?,
            b.serviceaccount.as_ref()?.name.clone()?,
        ),
        (None, Some(ns)) => (ns.clone(), claims.legacy_name.clone()?),
        (None, None) => return None,
    };
    let user = format!("{SA_PREFIX}{namespace}:{name}");
    // The subject must agree with the claims, as the apiserver's validator requires.
    if claims.sub.as_deref() != Some(user.as_str()) || !valid_name(&namespace, &name) {
        return None;
    }
    Some(Identity {
        user,
        groups: vec![
            "system:serviceaccounts".to_owned(),
            format!("system:serviceaccounts:{namespace}"),
            "system:authenticated".to_owned(),
        ],
    })
}

/// A namespace and a ServiceAccount name as the apiserver allows them (DNS labels and
/// subdomains): nothing that could read as another user when joined with `:`.
fn valid_name(namespace: &str, name: &str) -> bool {
    let ok = |s: &str, dots: bool| {
        !s.is_empty()
            && s.len() <= 253
            && s.bytes().all(|b| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || (dots && b == b'.')
            })
    };
    ok(namespace, false) && ok(name, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn jwt(claims: &serde_json::Value) -> String {
        let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"RS256","kid":"k"}"#);
        let body = URL_SAFE_NO_PAD.encode(claims.to_string());
        format!("Bearer {header}.{body}.c2lnbmF0dXJl")
    }

    #[test]
    fn a_bound_service_account_token_names_its_account_and_groups() {
        let token = jwt(&json!({
            "iss": "https://kubernetes.default.svc.cluster.local",
            "sub": "system:serviceaccount:kube-system:replicaset-controller",
            "kubernetes.io": {"namespace": "kube-system", "serviceaccount": {"name": "replicaset-controller", "uid": "u"}},
        }));
        let id = from_authorization(token.as_bytes()).expect("identity");
        assert_eq!(
            id.user,
            "system:serviceaccount:kube-system:replicaset-controller"
        );
        assert_eq!(
            id.groups,
            [
                "system:serviceaccounts",
                "system:serviceaccounts:kube-system",
                "system:authenticated"
            ]
        );
    }

    #[test]
    fn a_legacy_token_and_a_bootstrap_token_are_read_too() {
        let token = jwt(&json!({
            "iss": "kubernetes/serviceaccount",
            "sub": "system:serviceaccount:team-a:builder",
            "kubernetes.io/serviceaccount/namespace": "team-a",
            "kubernetes.io/serviceaccount/service-account.name": "builder",
        }));
        let id = from_authorization(token.as_bytes()).expect("identity");
        assert_eq!(id.user, "system:serviceaccount:team-a:builder");
        let id = from_authorization(b"bearer abcdef.0123456789abcdef").expect("bootstrap");
        assert_eq!(id.user, "system:bootstrap:abcdef");
        assert_eq!(id.groups[0], "system:bootstrappers");
    }

    #[test]
    fn what_is_not_a_readable_service_account_token_has_no_identity() {
        for bad in [
            // An OIDC token: its user is the apiserver's mapping of its claims.
            jwt(&json!({"iss": "https://idp", "sub": "alice", "email": "a@example.com"})),
            // A subject that disagrees with the claims.
            jwt(
                &json!({"sub": "system:serviceaccount:kube-system:admin", "kubernetes.io": {"namespace": "team-a", "serviceaccount": {"name": "x"}}}),
            ),
            // A name that would read as another user.
            jwt(
                &json!({"sub": "system:serviceaccount:a:b:c", "kubernetes.io": {"namespace": "a", "serviceaccount": {"name": "b:c"}}}),
            ),
            "Bearer not-a-jwt".to_owned(),
            "Bearer a.!!!.c".to_owned(),
            "Basic YWxpY2U6cHc=".to_owned(),
            "Bearer abcdef.0123456789ABCDEF".to_owned(),
            format!("Bearer {}", "a".repeat(MAX_TOKEN + 1)),
        ] {
            assert!(from_authorization(bad.as_bytes()).is_none(), "{bad}");
        }
        assert!(from_authorization(&[0xff, 0xfe]).is_none());
    }

    #[test]
    fn the_cache_answers_as_the_token_does() {
        let token = jwt(
            &json!({"sub": "system:serviceaccount:a:b", "kubernetes.io": {"namespace": "a", "serviceaccount": {"name": "b"}}}),
        );
        for _ in 0..2 {
            let id = cached(token.as_bytes()).expect("identity");
            assert_eq!(id.user, "system:serviceaccount:a:b");
            assert!(cached(b"Bearer abc").is_none());
        }
    }
}
