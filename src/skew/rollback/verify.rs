//! The older apiserver's own word on what it drops (`--dry-run`): for each field finding, one object
//! that holds the field, read through the newer backend, is sent to the older as a server-side
//! dry-run update (`?dryRun=All`, its status through `/status` when the field is in its status);
//! what the older answers it would store, set against what was sent, is what it drops. The
//! OpenAPI tells the fields a version does not know; a feature gate off in the older version drops
//! fields it describes (v1.35.6 drops a pod's whole `allocatedResourcesStatus`, whose `message`
//! alone its OpenAPI lacks), and only the apiserver tells those.

use std::time::Duration;

use http::{HeaderValue, Method};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::scan::Source;
use super::{Finding, Stake};
use crate::skew::KindFields;
use crate::upstream::own_send_with_groups;

/// What the dry-run showed of one finding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DryRun {
    /// The object sent: `namespace/name`, or `name`.
    pub object: String,
    /// The outermost fields the older would not store (`status.containerStatuses[].x`).
    #[serde(default)]
    pub dropped: Vec<String>,
    /// Why it could not be told, if so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Sends one dry-run per field finding to `to`, each object read through `through`.
pub(super) async fn verify(
    findings: &mut [Finding],
    (to, through): (&Source, &Source),
    groups: &[HeaderValue],
) {
    for finding in findings.iter_mut() {
        let Stake::Field { field } = &finding.stake else {
            continue;
        };
        let Some(at) = finding.namespaces.first() else {
            continue;
        };
        let Some(name) = at.names.first() else {
            continue;
        };
        let path = finding.resource.object_path(&at.namespace, name);
        let object = match at.namespace.as_str() {
            "" => name.clone(),
            ns => format!("{ns}/{name}"),
        };
        let status = field.starts_with("status.");
        let outcome = dry_run(&path, status, (to, through), groups).await;
        finding.dry_run = Some(match outcome {
            Ok(dropped) => DryRun {
                object,
                dropped,
                error: None,
            },
            Err(e) => DryRun {
                object,
                dropped: Vec::new(),
                error: Some(e),
            },
        });
    }
}

async fn dry_run(
    path: &str,
    status: bool,
    (to, through): (&Source, &Source),
    groups: &[HeaderValue],
) -> Result<Vec<String>, String> {
    let timeout = Duration::from_secs(30);
    let (code, body) = own_send_with_groups(
        through.endpoint(),
        (Method::GET, path, None),
        groups,
        timeout,
    )
    .await?;
    if !code.is_success() {
        return Err(format!(
            "reading {path} through {}: {code}",
            through.backend.name
        ));
    }
    let sent: Value = serde_json::from_slice(&body).map_err(|e| format!("{path}: {e}"))?;
    let target = match status {
        true => format!("{path}/status?dryRun=All"),
        false => format!("{path}?dryRun=All"),
    };
    let request = (Method::PUT, target.as_str(), Some(body.to_vec()));
    let (code, answer) = own_send_with_groups(to.endpoint(), request, groups, timeout).await?;
    if !code.is_success() {
        let message = serde_json::from_slice::<Value>(&answer)
            .ok()
            .and_then(|v| v["message"].as_str().map(str::to_owned))
            .unwrap_or_default();
        return Err(format!(
            "the dry-run through {} answered {code} {message}",
            to.backend.name
        ));
    }
    let stored: Value = serde_json::from_slice(&answer).map_err(|e| format!("{target}: {e}"))?;
    Ok(dropped(&sent, &stored))
}

/// The outermost fields `sent` has and `stored` does not, `metadata` aside (the apiserver's own).
pub(crate) fn dropped(sent: &Value, stored: &Value) -> Vec<String> {
    let (sent, stored) = (KindFields::of_object(sent), KindFields::of_object(stored));
    let mut out: Vec<String> = Vec::new();
    for path in sent.fields.keys() {
        if path == "metadata" || path.starts_with("metadata.") || stored.fields.contains_key(path) {
            continue;
        }
        let under = out
            .iter()
            .any(|o| path.starts_with(o.as_str()) && path[o.len()..].starts_with(['.', '[']));
        if !under {
            out.push(path.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn the_outermost_field_not_stored_is_the_drop() {
        let sent = json!({"metadata": {"resourceVersion": "1"}, "status": {"containerStatuses": [
            {"name": "c", "allocatedResourcesStatus": [{"name": "d", "resources": [{"message": "ok"}]}]}
        ]}});
        let stored = json!({"metadata": {"resourceVersion": "2"}, "status": {"containerStatuses": [{"name": "c"}]}});
        assert_eq!(
            super::dropped(&sent, &stored),
            ["status.containerStatuses[].allocatedResourcesStatus"]
        );
        assert!(super::dropped(&stored, &stored).is_empty());
    }
}
