//! The Kubernetes `Status` object a failed request is answered with (`kind: Status`, `status:
//! Failure`), in kube-apiserver's field order, with `details.retryAfterSeconds` when the answer
//! carries `Retry-After`.

use serde::Serialize;

/// A failure `Status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status<'a> {
    kind: &'static str,
    api_version: &'static str,
    metadata: Metadata,
    status: &'static str,
    message: &'a str,
    reason: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<Details>,
    code: u16,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
struct Metadata {}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
struct Details {
    #[serde(skip_serializing_if = "str::is_empty")]
    name: String,
    #[serde(skip_serializing_if = "str::is_empty")]
    group: String,
    #[serde(skip_serializing_if = "str::is_empty")]
    kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_after_seconds: Option<u32>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    causes: Vec<Cause>,
}

/// One reason of a failure, as `details.causes` lists them (kubectl prints each).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Cause {
    /// A machine-readable reason, such as `FieldValueForbidden`.
    pub reason: String,
    /// For a person.
    pub message: String,
    /// The field, as a path (`spec.template.spec.sidecarPolicy`).
    pub field: String,
}

impl<'a> Status<'a> {
    /// A failure with HTTP status `code`, a `reason` such as `TooManyRequests`, and a `message` for a
    /// person.
    pub fn failure(code: u16, reason: &'a str, message: &'a str) -> Status<'a> {
        Status {
            kind: "Status",
            api_version: "v1",
            metadata: Metadata {},
            status: "Failure",
            message,
            reason,
            details: None,
            code,
        }
    }

    /// The same, saying that the client may retry after `seconds` (as the `Retry-After` header sent
    /// with it does), so that clients reading only the body know too.
    pub fn retry_after(mut self, seconds: u32) -> Status<'a> {
        self.details
            .get_or_insert_with(Details::default)
            .retry_after_seconds = Some(seconds);
        self
    }

    /// The same, with a cause per field.
    pub fn causes(mut self, causes: Vec<Cause>) -> Status<'a> {
        self.details.get_or_insert_with(Details::default).causes = causes;
        self
    }

    /// The same, naming the object it is about as the apiserver does (`details.name`, `group`, and
    /// `kind`, which holds the resource).
    pub fn object(mut self, group: &str, resource: &str, name: &str) -> Status<'a> {
        let d = self.details.get_or_insert_with(Details::default);
        d.name = name.to_owned();
        d.group = group.to_owned();
        d.kind = resource.to_owned();
        self
    }

    /// The JSON body.
    pub fn to_json(&self) -> Vec<u8> {
        // A struct of strings and numbers always serializes.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// The JSON value, to embed (a watch's `ERROR` event carries one as its object).
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_as_kube_apiserver_writes_it() {
        let s = Status::failure(429, "TooManyRequests", "slow down").retry_after(1);
        assert_eq!(
            String::from_utf8(s.to_json()).unwrap(),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"slow down","reason":"TooManyRequests","details":{"retryAfterSeconds":1},"code":429}"#
        );
        let plain = Status::failure(404, "NotFound", "gone").to_value();
        assert!(plain.get("details").is_none());
        assert_eq!(plain["code"], 404);
    }
}
