//! The apiserver's own 403 for a watch its authorizer refused (`share/authorize.rs`), written as the
//! apiserver writes it: a JSON `Status` and a newline, or, to a client that prefers protobuf (a
//! kubelet), the `Status` in protobuf: `k8s\0` and a `runtime.Unknown` holding it, every string
//! field written even when empty, as Go's generated code writes them.

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Response, StatusCode};
use skewgate_shared::Status;

use super::super::body::ProxyBody;

/// A watch refused, and how its client asked to be answered.
#[derive(Debug)]
pub(crate) struct Refused {
    pub message: String,
    pub group: String,
    pub resource: String,
    pub name: String,
    /// The client's `Accept` puts protobuf first.
    pub protobuf: bool,
}

impl Refused {
    pub(crate) fn response(&self) -> Response<ProxyBody> {
        let (body, media) = if self.protobuf {
            (
                self.protobuf_status(),
                "application/vnd.kubernetes.protobuf",
            )
        } else {
            let status = Status::failure(403, "Forbidden", &self.message).object(
                &self.group,
                &self.resource,
                &self.name,
            );
            let mut bytes = status.to_json();
            bytes.push(b'\n');
            (bytes, "application/json")
        };
        let mut resp = Response::new(ProxyBody::full(Bytes::from(body)));
        *resp.status_mut() = StatusCode::FORBIDDEN;
        let h = resp.headers_mut();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static(media));
        h.insert(
            "x-content-type-options",
            HeaderValue::from_static("nosniff"),
        );
        resp
    }

    /// `k8s\0` + `runtime.Unknown{typeMeta{v1, Status}, raw: Status, "", ""}`.
    fn protobuf_status(&self) -> Vec<u8> {
        let mut details = Vec::new();
        text(&mut details, 1, &self.name);
        text(&mut details, 2, &self.group);
        text(&mut details, 3, &self.resource);
        varint_field(&mut details, 5, 0); // retryAfterSeconds
        text(&mut details, 6, ""); // uid
        let mut status = Vec::new();
        let list_meta = [0x0a, 0x00, 0x12, 0x00, 0x1a, 0x00]; // selfLink, resourceVersion, continue
        bytes_field(&mut status, 1, &list_meta);
        text(&mut status, 2, "Failure");
        text(&mut status, 3, &self.message);
        text(&mut status, 4, "Forbidden");
        bytes_field(&mut status, 5, &details);
        varint_field(&mut status, 6, 403);
        let mut type_meta = Vec::new();
        text(&mut type_meta, 1, "v1");
        text(&mut type_meta, 2, "Status");
        let mut out = b"k8s\0".to_vec();
        bytes_field(&mut out, 1, &type_meta);
        bytes_field(&mut out, 2, &status);
        text(&mut out, 3, ""); // contentEncoding
        text(&mut out, 4, ""); // contentType
        out
    }
}

fn varint(out: &mut Vec<u8>, v: u64) {
    prost::encoding::encode_varint(v, out);
}

fn varint_field(out: &mut Vec<u8>, field: u64, v: u64) {
    varint(out, field << 3);
    varint(out, v);
}

fn bytes_field(out: &mut Vec<u8>, field: u64, value: &[u8]) {
    varint(out, (field << 3) | 2);
    varint(out, value.len() as u64);
    out.extend_from_slice(value);
}

fn text(out: &mut Vec<u8>, field: u64, value: &str) {
    bytes_field(out, field, value.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kube-apiserver 1.36.3's answer to a kubelet (`Accept: application/vnd.kubernetes.protobuf`)
    /// refused a Secret its pods no longer mount, as it came (hex).
    const APISERVER: &str = concat!(
        "6b3873000a0c0a027631120653746174757312ec010a060a0012001a0012074661696c7572651ab20173656372657473",
        "2022746f6b656e2220697320666f7262696464656e3a2055736572202273797374656d3a6e6f64653a6e31222063616e",
        "6e6f74207761746368207265736f757263652022736563726574732220696e204150492067726f757020222220696e20",
        "746865206e616d65737061636520227368223a206e6f2072656c6174696f6e7368697020666f756e6420626574776565",
        "6e206e6f646520276e312720616e642074686973206f626a6563742209466f7262696464656e2a160a05746f6b656e12",
        "001a0773656372657473280032003093031a002200",
    );

    fn refused(protobuf: bool) -> Refused {
        Refused {
            message: "secrets \"token\" is forbidden: User \"system:node:n1\" cannot watch resource \"secrets\" in API group \"\" in the namespace \"sh\": no relationship found between node 'n1' and this object".to_owned(),
            group: String::new(),
            resource: "secrets".to_owned(),
            name: "token".to_owned(),
            protobuf,
        }
    }

    #[test]
    fn a_protobuf_refusal_is_the_apiservers_byte_for_byte() {
        let ours: String = refused(true)
            .protobuf_status()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(ours, APISERVER);
        let resp = refused(true).response();
        assert_eq!(
            resp.headers()["content-type"],
            "application/vnd.kubernetes.protobuf"
        );
        assert_eq!(
            refused(false).response().headers()["content-type"],
            "application/json"
        );
    }
}
