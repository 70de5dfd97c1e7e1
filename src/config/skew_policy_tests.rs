//! `skewPolicy` and the warnings of a table that breaks the version-skew policy, or holds the
//! leader-election Leases in a fence as long as a leader's renew deadline.

use super::tests::{BASE, one_error, parse};

#[test]
fn skew_policy_exceptions_are_said_in_so_many_words_and_warned_of() {
    let versioned = BASE.replace("  - name: v1-30\n", "  - name: v1-30\n    version: v1.30\n");
    let t = parse(&versioned).unwrap();
    assert!(
        t.skew_policy.allow_older_apiserver.is_empty(),
        "none by default"
    );
    assert!(t.warnings.is_empty(), "{:?}", t.warnings);
    let t = parse(&format!(
        "{versioned}skewPolicy:\n  allowOlderApiserver: [kubelet, kube-proxy]\n"
    ))
    .unwrap();
    let allowed = t.skew_policy.allow_older_apiserver;
    assert!(allowed.contains(crate::classify::Component::Kubelet));
    assert!(!allowed.contains(crate::classify::Component::KubeScheduler));
    let warned: Vec<String> = t.warnings.iter().map(|w| w.to_string()).collect();
    assert!(
        warned.len() == 1
            && warned[0]
                .contains("lets kubelet, kube-proxy be served by an apiserver older than itself"),
        "{warned:?}"
    );
    let e = one_error(&format!(
        "{versioned}skewPolicy:\n  allowOlderApiserver: [kubectl]\n"
    ));
    assert!(
        e.contains("skewPolicy.allowOlderApiserver[0]: \"kubectl\" is not a component"),
        "{e}"
    );
    let e = one_error(&format!(
        "{versioned}skewPolicy:\n  allowOlderApiserver: []\n"
    ));
    assert!(e.contains("is empty"), "{e}");
    let e = one_error(&format!(
        "{versioned}skewPolicy:\n  allowOlder: [kubelet]\n"
    ));
    assert!(e.contains("allowOlder"), "{e}");
    // A backend without a version, beside another: the policy cannot judge it.
    let warned: Vec<String> = parse(BASE)
        .unwrap()
        .warnings
        .iter()
        .map(|w| w.to_string())
        .collect();
    assert!(
        warned.len() == 1
            && warned[0].contains("backends[1].version")
            && warned[0].contains("version-skew policy cannot tell"),
        "{warned:?}"
    );
}

#[test]
fn a_pin_that_fences_the_leader_leases_as_long_as_a_renew_deadline_is_warned_of() {
    let versioned = BASE.replace("  - name: v1-30\n", "  - name: v1-30\n    version: v1.30\n");
    let table = |fence: &str, pin: &str| {
        versioned.replace(
            "writes:\n  default: v1-29\n",
            &format!("writes:\n  default: v1-29\n  fence: {fence}\n  pins:\n{pin}"),
        )
    };
    let moving = "    - {name: all, backend: v1-30, from: v1-29, flipAt: 2030-01-01T00:00:00Z}\n";
    let warned = |text: &str| -> Vec<String> {
        let t = parse(text).unwrap_or_else(|e| panic!("{e}"));
        t.warnings.iter().map(|w| w.to_string()).collect()
    };
    let w = warned(&table("10s", moving));
    assert!(
        w.len() == 1 && w[0].contains("leader-election Leases") && w[0].contains("under 8s"),
        "{w:?}"
    );
    // A fence under the deadline, a pin of other namespaces, or of other resources: no warning.
    assert!(warned(&table("5s", moving)).is_empty());
    let team = moving.replace("{name: all,", "{name: all, namespaces: [team-a],");
    assert!(warned(&table("10s", &team)).is_empty());
    let pods = moving.replace("{name: all,", "{name: all, resources: [pods],");
    assert!(warned(&table("10s", &pods)).is_empty());
    // A pin that moves by reload alone holds nothing (the write ledger waits only for writes in
    // flight of the same object).
    let reload = "    - {name: all, backend: v1-30, namespaces: [kube-system]}\n";
    assert!(warned(&table("10s", reload)).is_empty());
}
