//! The `shareWatches` section: what loads, and the place and words of its errors.

use super::tests::{BASE, one_error, parse};

fn text(rule: &str) -> String {
    format!(
        "{BASE}shareWatches:\n  - name: mounts\n    match: {{resources: [configmaps, secrets], groups: [\"system:nodes\"]}}\n{rule}"
    )
}

#[test]
fn a_rule_loads_by_name_by_default() {
    let t = parse(&text("")).unwrap();
    assert_eq!(t.shares.len(), 1);
    assert_eq!(t.shares[0].name, "mounts");
    assert!(t.shares[0].by_name, "byName by default");
    let t = parse(&text("    selectors: any\n")).unwrap();
    assert!(!t.shares[0].by_name);
    assert!(
        parse(BASE).unwrap().shares.is_empty(),
        "nothing is shared unless a rule says so"
    );
}

#[test]
fn bad_rules_are_located_and_change_nothing() {
    let e = one_error(&text("    selectors: all\n"));
    assert!(
        e.ends_with("shareWatches[0].selectors: \"all\" is neither byName nor any"),
        "{e}"
    );
    let e = one_error(&format!(
        "{BASE}shareWatches:\n  - name: w\n    match: {{verbs: [get]}}\n"
    ));
    assert!(
        e.contains("shareWatches[0].match.verbs: a shareWatches rule selects watches only"),
        "{e}"
    );
    let e = one_error(&format!(
        "{BASE}shareWatches:\n  - {{name: w, match: {{resources: [secrets]}}}}\n  - {{name: w, match: {{resources: [pods]}}}}\n"
    ));
    assert!(e.contains("duplicate shareWatches name \"w\""), "{e}");
    let e = one_error(&format!(
        "{BASE}shareWatches:\n  - {{name: w, shared: yes}}\n"
    ));
    assert!(e.contains("shared"), "{e}");
}

#[test]
fn a_rule_without_resources_is_warned_of() {
    let t = parse(&format!(
        "{BASE}shareWatches:\n  - {{name: all, match: {{groups: [\"system:nodes\"]}}}}\n"
    ))
    .unwrap();
    let warned: Vec<String> = t.warnings.iter().map(|w| w.to_string()).collect();
    assert!(
        warned.iter().any(|w| w.contains("shareWatches[0]")
            && w.contains("every watch its clients make is shared")),
        "{warned:?}"
    );
}
