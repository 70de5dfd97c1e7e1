//! Whether the apiserver would let a client watch what it asks, before it joins a shared watch:
//! a `SubjectAccessReview` of the client's user and groups for the watch's attributes, as the
//! apiserver's authorizer chain judges its own requests (the Node authorizer answers them for
//! kubelets, RBAC for the rest). Each join asks anew: a straight watch is authorized when it
//! begins and never again, and a new one is refused as soon as the authorizer changes its mind,
//! so a decision kept for the next watch could let through one the apiserver would refuse.

use std::sync::Arc;

use http::{Method, StatusCode};
use serde_json::{Value, json};

use crate::classify::RequestInfo;
use crate::identity::Identity;
use crate::upstream::{EndpointPool, own_request};

const PATH: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";

/// What the authorizer said.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Allowed,
    /// Refused, with the authorizer's reason (may be empty).
    Denied(String),
}

/// The review of `who` watching what `info` and the selectors name.
pub(crate) fn review(who: &Identity, info: &RequestInfo<'_>, query: Option<&str>) -> Value {
    let mut groups = who.groups.clone();
    // The apiserver's authenticator adds it to every user it authenticates.
    if !groups.iter().any(|g| g == "system:authenticated") {
        groups.push("system:authenticated".to_owned());
    }
    let mut attrs = json!({
        "verb": "watch",
        "group": info.api_group,
        "version": info.api_version,
        "resource": info.resource,
        "subresource": info.subresource,
        "namespace": info.namespace,
        "name": info.name,
    });
    // Selectors are attributes the authorizer may judge by (a kubelet's watch of its own node's
    // pods): given as the client wrote them.
    for (param, field) in [
        ("fieldSelector", "fieldSelector"),
        ("labelSelector", "labelSelector"),
    ] {
        if let Some(raw) = skewgate_shared::go_query::first(query.unwrap_or(""), param) {
            attrs[field] = json!({ "rawSelector": raw });
        }
    }
    json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": who.user,
            "groups": groups,
            "resourceAttributes": attrs,
        }
    })
}

/// Asks the apiserver behind `ep`: its verdict, or why it could not be asked (then the client's
/// watch goes to the apiserver on its own, which authorizes it itself).
pub(crate) async fn ask(ep: &Arc<EndpointPool>, review: Value) -> Result<Verdict, String> {
    let body = serde_json::to_vec(&review).map_err(|e| e.to_string())?;
    let (code, answer) = own_request(ep, Method::POST, PATH, Some(body)).await?;
    if code != StatusCode::CREATED && code != StatusCode::OK {
        return Err(crate::upstream::own_answered(ep, PATH, code, &answer));
    }
    let answer: Value = serde_json::from_slice(&answer).map_err(|e| e.to_string())?;
    let status = &answer["status"];
    if status["allowed"].as_bool() == Some(true) && status["denied"].as_bool() != Some(true) {
        return Ok(Verdict::Allowed);
    }
    let reason = status["reason"].as_str().unwrap_or_default().to_owned();
    Ok(Verdict::Denied(reason))
}

/// The message of the apiserver's 403 for a watch it refused (its `forbiddenMessage`, and
/// `NewForbidden`'s `<resource> "<name>" is forbidden: ...`).
pub(crate) fn forbidden_message(user: &str, info: &RequestInfo<'_>, reason: &str) -> String {
    let mut resource = info.resource.to_string();
    if !info.subresource.is_empty() {
        resource = format!("{resource}/{}", info.subresource);
    }
    let scope = if info.namespace.is_empty() {
        "at the cluster scope".to_owned()
    } else {
        format!("in the namespace {:?}", info.namespace)
    };
    let mut msg = format!(
        "User {user:?} cannot watch resource {resource:?} in API group {:?} {scope}",
        info.api_group
    );
    if !reason.is_empty() {
        msg = format!("{msg}: {reason}");
    }
    let qualified = if info.api_group.is_empty() {
        info.resource.to_string()
    } else {
        format!("{}.{}", info.resource, info.api_group)
    };
    if info.name.is_empty() {
        format!("{qualified} is forbidden: {msg}")
    } else {
        format!("{qualified} {:?} is forbidden: {msg}", info.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::classify;

    #[test]
    fn a_kubelets_watch_of_a_secret_by_name_is_reviewed_as_the_apiserver_sees_it() {
        let who = Identity {
            user: "system:node:n1".into(),
            groups: vec!["system:nodes".into()],
        };
        let query = "fieldSelector=metadata.name%3Dtoken&watch=true&resourceVersion=5";
        let info = classify("GET", "/api/v1/namespaces/a/secrets", Some(query));
        let r = review(&who, &info, Some(query));
        let spec = &r["spec"];
        assert_eq!(
            spec["groups"],
            json!(["system:nodes", "system:authenticated"])
        );
        let a = &spec["resourceAttributes"];
        assert_eq!(
            (&a["verb"], &a["resource"], &a["namespace"], &a["name"]),
            (
                &json!("watch"),
                &json!("secrets"),
                &json!("a"),
                &json!("token")
            )
        );
        assert_eq!(a["fieldSelector"]["rawSelector"], "metadata.name=token");
        assert_eq!(
            forbidden_message(
                "system:node:n1",
                &info,
                "no relationship found between node 'n1' and this object"
            ),
            "secrets \"token\" is forbidden: User \"system:node:n1\" cannot watch resource \"secrets\" in API group \"\" in the namespace \"a\": no relationship found between node 'n1' and this object"
        );
    }
}
