//! The update guard's test bed: a guard over configmaps, and a configmap stored with the
//! simulator's 1.30 field `policy`, which a 1.29 client does not know.

use serde_json::json;

use super::{Gate, Sims, gate, h1, routes};

/// A gate with writes through `writes` and reads through `reads`, and guard `name` over
/// configmaps acting by `action` (`unknownVersion: unknown`), once it knows both versions'
/// schemas; and configmap `cm` stored through 1.30 with the 1.30 field `policy`.
pub async fn configmap_guard(
    sims: &Sims,
    (writes, reads): (&str, &str),
    name: &str,
    action: &str,
    unknown: &str,
) -> Gate {
    let text = routes(
        sims,
        &format!(
            "writes:\n  default: {writes}\nreads:\n  default: {reads}\nguards:\n  - name: {name}\n    match: {{resources: [configmaps]}}\n    action: {action}\n    unknownVersion: {unknown}\n"
        ),
    );
    let gate = gate(&text).await;
    gate.knows_schemas().await;
    let r = h1()
        .post(format!(
            "{}/api/v1/namespaces/default/configmaps",
            sims.new.url()
        ))
        .json(&json!({"metadata": {"name": "cm"}, "data": {"a": "1"}, "policy": "keep"}))
        .send()
        .await
        .expect("create");
    assert_eq!(r.status(), 201);
    gate
}
