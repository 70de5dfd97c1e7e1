//! The invariants the fuzz target `protobuf_body` checks, for bytes a client sends as a protobuf
//! update and an apiserver answers for the stored object: no panic; a body that decodes encodes
//! to bytes that decode to the same object; putting every field of another object of the same
//! kind back into it leaves a body that decodes.

use prost_reflect::ReflectMessage as _;

use super::Body;
use crate::skew::{KindFields, losses};

/// The first byte splits the rest into a body and a stored object.
pub(crate) fn drive(input: &[u8]) {
    let Some((&split, rest)) = input.split_first() else {
        return;
    };
    let at = usize::from(split).min(rest.len());
    let (stored, sent) = rest.split_at(at);
    for bytes in [stored, sent] {
        let Ok(body) = Body::decode(bytes) else {
            continue;
        };
        let (view, _) = body.view_checked();
        assert_eq!(body.view(), view, "checked or not, the same view");
        let again = Body::decode(&body.encode()).expect("a re-encoded body decodes");
        assert_eq!(again.view(), view, "re-encoding changes nothing");
    }
    let (Ok(stored), Ok(mut sent)) = (Body::decode(stored), Body::decode(sent)) else {
        return;
    };
    if stored.object.descriptor() != sent.object.descriptor() {
        return;
    }
    let stored_view = stored.view();
    // Every field the stored object has is one the client does not know.
    let newer = KindFields::of_object(&stored_view);
    let lost = losses(&newer, &KindFields::default(), &stored_view, &sent.view());
    sent.restore(&stored, &lost);
    Body::decode(&sent.encode()).expect("a restored body decodes");
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::protobuf::encode_json;

    /// Seeds of the fuzz target's corpus: a pod's status with and without a field, in either
    /// place; a body and an object of different kinds; truncated and empty input.
    #[test]
    fn seeds_hold_the_invariants() {
        let with = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"volumes": [{"name": "v", "configMap": {"name": "c"}}]},
            "status": {"containerStatuses": [{"name": "c", "allocatedResourcesStatus": [
                {"name": "d", "resources": [{"resourceID": "r", "message": "ok"}]}]}]}});
        let without = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "status": {"containerStatuses": [{"name": "c"}]}});
        let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "l"}, "spec": {"holderIdentity": "a"}});
        let (with, without, lease) = (
            encode_json(&with).expect("pod"),
            encode_json(&without).expect("pod"),
            encode_json(&lease).expect("lease"),
        );
        // SKEWGATE_FUZZ_SEEDS=fuzz/corpus/protobuf_body writes them for cargo fuzz.
        let seeds = std::env::var("SKEWGATE_FUZZ_SEEDS").ok();
        let pairs = [(&with, &without), (&without, &with), (&with, &lease)];
        for (n, (stored, sent)) in pairs.into_iter().enumerate() {
            let mut input = vec![u8::try_from(stored.len()).expect("small")];
            input.extend(stored.iter().chain(sent.iter()));
            drive(&input);
            drive(&input[..input.len() / 2]);
            if let Some(dir) = &seeds {
                std::fs::create_dir_all(dir).expect("seed folder");
                std::fs::write(format!("{dir}/seed-{n}"), &input).expect("seed");
            }
        }
        drive(&[]);
        drive(&[0]);
    }
}
