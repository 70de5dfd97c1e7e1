//! A bearer token's routing identity: any `Authorization` value a client can send.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(id) = skewgate::identity::read_token_identity(data) else {
        return;
    };
    // A ServiceAccount names namespace and account, a bootstrap token its id: never more parts.
    let parts: Vec<&str> = id.user.split(':').collect();
    match parts.as_slice() {
        ["system", "serviceaccount", ns, name] => {
            assert!(!ns.is_empty() && !name.is_empty());
            assert_eq!(id.groups[1], format!("system:serviceaccounts:{ns}"));
        }
        ["system", "bootstrap", id_part] => assert_eq!(id_part.len(), 6),
        _ => panic!("unexpected user {:?}", id.user),
    }
    assert!(id.groups.iter().any(|g| g == "system:authenticated"));
    // The cache answers as the token does.
    let cached = skewgate::identity::token_identity(data);
    assert_eq!(cached.map(|c| c.user.clone()), Some(id.user));
});
