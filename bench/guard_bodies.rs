//! The guard's own work on one update's body, JSON beside protobuf, without the network (the GET
//! of the stored object costs the same in either): read the body and the stored object, judge
//! (the losses), and for `preserve` put the lost field back and write the body again. The object
//! is a pod as a kubelet writes its status (two containers, probes, volumes, managedFields,
//! conditions), about 5 KB as JSON; the body lacks one field the stored object has.

use std::time::Instant;

use serde_json::{Value, json};
use skewgate::protobuf::{Body, encode_json};
use skewgate::skew::{KindFields, losses, restore};

fn container(name: &str) -> Value {
    json!({"name": name, "image": format!("registry.example.com/{name}:1.2.3"),
        "command": ["/bin/server", "--port=8080"],
        "env": [{"name": "MODE", "value": "production"}, {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
        "resources": {"limits": {"cpu": "500m", "memory": "256Mi", "example.com/dev": "1"}, "requests": {"cpu": "100m", "memory": "128Mi", "example.com/dev": "1"}},
        "volumeMounts": [{"name": "config", "mountPath": "/etc/config", "readOnly": true}],
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 10},
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 5},
        "imagePullPolicy": "IfNotPresent", "terminationMessagePath": "/dev/termination-log"})
}

fn status(name: &str, message: bool) -> Value {
    let mut resource = json!({"resourceID": "dev-0", "health": "Healthy"});
    if message {
        resource["message"] = json!("ok");
    }
    json!({"name": name, "image": format!("registry.example.com/{name}:1.2.3"),
        "imageID": format!("registry.example.com/{name}@sha256:0123456789abcdef"),
        "containerID": "containerd://0123456789abcdef", "ready": true, "restartCount": 1, "started": true,
        "state": {"running": {"startedAt": "2026-11-28T09:00:00Z"}},
        "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled", "startedAt": "2026-11-28T08:00:00Z", "finishedAt": "2026-11-28T08:59:00Z"}},
        "allocatedResourcesStatus": [{"name": "example.com/dev", "resources": [resource]}]})
}

fn pod(message: bool) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-7d9c8b6f5-x2x9k", "generateName": "web-7d9c8b6f5-", "namespace": "team-a",
            "uid": "6a2c97d9-c0e7-49c1-8fb6-576ea8cc54c1", "resourceVersion": "123456",
            "creationTimestamp": "2026-11-28T08:00:00Z",
            "labels": {"app": "web", "pod-template-hash": "7d9c8b6f5", "tier": "frontend"},
            "annotations": {"example.com/owner": "team-a", "kubectl.kubernetes.io/restartedAt": "2026-11-27T10:00:00Z"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9c8b6f5", "uid": "1b2c97d9-c0e7-49c1-8fb6-576ea8cc54c1", "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [{"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1", "time": "2026-11-28T08:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}}},
                              {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": "2026-11-28T09:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:conditions": {}}}, "subresource": "status"}]},
        "spec": {"containers": [container("web"), container("sidecar")],
            "volumes": [{"name": "config", "configMap": {"name": "web-config", "defaultMode": 420}}],
            "nodeName": "node-0042", "serviceAccountName": "web", "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler",
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]},
        "status": {"phase": "Running", "hostIP": "10.0.0.42", "podIP": "10.244.1.17", "qosClass": "Burstable",
            "startTime": "2026-11-28T08:00:00Z",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-28T09:00:00Z"},
                           {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-28T08:00:00Z"}],
            "containerStatuses": [status("web", message), status("sidecar", message)]}})
}

/// µs per update, over `n`, of `work`.
fn per_update(n: usize, mut work: impl FnMut()) -> f64 {
    for _ in 0..n / 10 {
        work();
    }
    let t = Instant::now();
    for _ in 0..n {
        work();
    }
    t.elapsed().as_secs_f64() * 1e6 / n as f64
}

pub fn run(n: usize) {
    let (stored, sent) = (pod(true), pod(false));
    let message = "status.containerStatuses[].allocatedResourcesStatus[].resources[].message";
    let newer = KindFields::of_object(&stored);
    let mut older = newer.clone();
    older.fields.remove(message);
    let (stored_json, sent_json) = (
        stored.to_string().into_bytes(),
        sent.to_string().into_bytes(),
    );
    let stored_pb = encode_json(&stored).expect("encodes");
    let sent_pb = encode_json(&sent).expect("encodes");
    let json_judge = |preserve: bool| {
        let stored: Value = serde_json::from_slice(&stored_json).expect("JSON");
        let mut body: Value = serde_json::from_slice(&sent_json).expect("JSON");
        let lost = losses(&newer, &older, &stored, &body);
        assert_eq!(lost.len(), 2);
        if preserve {
            restore(&mut body, &stored, &lost);
            std::hint::black_box(serde_json::to_vec(&body).expect("JSON"));
        }
    };
    let pb_judge = |preserve: bool| {
        let stored = Body::decode(&stored_pb).expect("decodes");
        let mut body = Body::decode(&sent_pb).expect("decodes");
        let ((stored_view, a), (body_view, b)) = (stored.view_checked(), body.view_checked());
        assert!(a.is_none() && b.is_none());
        let lost = losses(&newer, &older, &stored_view, &body_view);
        assert_eq!(lost.len(), 2);
        if preserve {
            body.restore(&stored, &lost);
            std::hint::black_box(body.encode());
        }
    };
    println!(
        "the guard's own work on one pod's status update ({} B as JSON, {} B as protobuf), {n} each\n",
        sent_json.len(),
        sent_pb.len()
    );
    println!(
        "  {:<22} {:>10} {:>10} {:>10}",
        "", "JSON µs", "protobuf µs", "× JSON"
    );
    for (name, preserve) in [("read and judge", false), ("… and preserve", true)] {
        let json = per_update(n, || json_judge(preserve));
        let pb = per_update(n, || pb_judge(preserve));
        println!("  {name:<22} {json:>10.1} {pb:>10.1} {:>10.2}", pb / json);
    }
    // Where the protobuf side's time goes: decoding both objects, then their JSON views.
    let decode = per_update(n, || {
        let decoded = (Body::decode(&stored_pb).ok(), Body::decode(&sent_pb).ok());
        std::hint::black_box(decoded);
    });
    let (stored_body, sent_body) = (
        Body::decode(&stored_pb).expect("decodes"),
        Body::decode(&sent_pb).expect("decodes"),
    );
    let view = per_update(n, || {
        std::hint::black_box((stored_body.view(), sent_body.view()));
    });
    println!("  (protobuf: decoding both {decode:.1} µs, their views {view:.1} µs)");
    println!();
}
