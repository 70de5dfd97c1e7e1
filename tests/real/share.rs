//! Shared watches against the real apiserver: kubelets' watches of the ConfigMap and Secret their
//! pods mount, served from one upstream watch, are what each kubelet would get straight; the
//! apiserver's Node authorizer, asked before each joins, refuses a kubelet whose pod no longer
//! mounts the Secret and a kubelet's watch of another node's pods, with the apiserver's own 403,
//! while the others' watches go on.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::harness::{Pair, direct, gate_with, within};
use crate::process::Serving;

const NS: &str = "sw";

/// The route file's rules: kubelets' mounts, and their pods by node.
const ROUTES: &str = "writes:\n  default: new\nreads:\n  default: new\nshareWatches:\n  - name: kubelet-mounts\n    match: {resources: [configmaps, secrets], groups: [\"system:nodes\"]}\n  - name: node-pods\n    match: {resources: [pods], groups: [\"system:nodes\"]}\n    selectors: any\n";

/// A kubelet's client certificate for node `n`, signed by the pair's CA: its (cert, key) files.
fn node_cert(pair: &Pair, n: &str) -> (String, String) {
    let dir = crate::common::temp_dir("node-certs");
    let (crt, key) = (dir.join(format!("{n}.crt")), dir.join(format!("{n}.key")));
    let csr = dir.join(format!("{n}.csr"));
    let ext = dir.join(format!("{n}.ext"));
    std::fs::write(
        &ext,
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n",
    )
    .expect("ext");
    let subject = format!("/O=system:nodes/CN=system:node:{n}");
    let ok = Command::new("openssl")
        .args([
            "req", "-newkey", "rsa:2048", "-nodes", "-subj", &subject, "-keyout",
        ])
        .arg(&key)
        .arg("-out")
        .arg(&csr)
        .stderr(Stdio::null())
        .status()
        .expect("openssl")
        .success()
        && Command::new("openssl")
            .args(["x509", "-req", "-days", "30", "-in"])
            .arg(&csr)
            .args(["-CA", &pair.pki("ca.crt"), "-CAkey", &pair.pki("ca.key")])
            .arg("-CAcreateserial")
            .arg("-out")
            .arg(&crt)
            .arg("-extfile")
            .arg(&ext)
            .stderr(Stdio::null())
            .status()
            .expect("openssl")
            .success();
    assert!(ok, "a certificate for node {n}");
    (crt.display().to_string(), key.display().to_string())
}

/// A kubelet's watch, as curl streams it: its process and output file.
struct Watch {
    child: Child,
    out: std::path::PathBuf,
}

impl Watch {
    /// `node` watching `path?query` at `base` for at most `secs`.
    fn open(
        node: &(String, String),
        base: &str,
        path_query: &str,
        accept: Option<&str>,
        secs: u64,
    ) -> Watch {
        let out = crate::common::temp_dir("watch").join("out");
        let mut cmd = Command::new("curl");
        cmd.args(["-skN", "--cert", &node.0, "--key", &node.1])
            .args(["-A", "kubelet/v1.36.3 (linux/amd64) kubernetes/test"])
            .args(["--max-time", &secs.to_string(), "-o"])
            .arg(&out);
        if let Some(a) = accept {
            cmd.args(["-H", &format!("Accept: {a}")]);
        }
        let child = cmd
            .arg(format!("{base}{path_query}"))
            .spawn()
            .expect("curl");
        Watch { child, out }
    }

    fn bytes(&self) -> Vec<u8> {
        std::fs::read(&self.out).unwrap_or_default()
    }

    /// Its JSON events, each line as it came, bookmarks left out (the apiserver sends them on its
    /// own clock: each minute, and 2 s before a watch's timeout).
    fn changes(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.bytes())
            .lines()
            .filter(|l| !l.starts_with("{\"type\":\"BOOKMARK\""))
            .map(str::to_owned)
            .collect()
    }

    fn wait(mut self) -> Watch {
        let _ = self.child.wait();
        self
    }
}

/// The resourceVersion of an object, straight from the new apiserver.
fn rv_of(pair: &Pair, kind: &str, name: &str) -> String {
    let (ok, rv) = direct(
        pair,
        "new",
        &[
            "-n",
            NS,
            "get",
            kind,
            name,
            "-o",
            "jsonpath={.metadata.resourceVersion}",
        ],
    );
    assert!(ok, "{rv}");
    rv
}

fn patch(pair: &Pair, kind: &str, name: &str, v: &str) {
    let field = if kind == "secret" {
        "stringData"
    } else {
        "data"
    };
    let body = format!("{{\"{field}\":{{\"v\":\"{v}\"}}}}");
    let (ok, text) = direct(pair, "new", &["-n", NS, "patch", kind, name, "-p", &body]);
    assert!(ok, "{text}");
}

/// The namespace, a ConfigMap and a Secret, and a pod on each of nodes n1 and n2 mounting both.
fn objects(pair: &Pair) {
    let dir = crate::common::temp_dir("share-objects");
    let file = dir.join("objects.yaml");
    let pod = |n: &str| {
        format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: p-{n}, namespace: {NS}}}\nspec:\n  nodeName: {n}\n  containers: [{{name: c, image: busybox}}]\n  volumes:\n  - {{name: s, secret: {{secretName: token}}}}\n  - {{name: m, configMap: {{name: mount}}}}\n"
        )
    };
    let text = format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NS}}}\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: default, namespace: {NS}}}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: mount, namespace: {NS}}}\ndata: {{v: \"0\"}}\n---\napiVersion: v1\nkind: Secret\nmetadata: {{name: token, namespace: {NS}}}\nstringData: {{v: \"0\"}}\n{}{}",
        pod("n1"),
        pod("n2")
    );
    std::fs::write(&file, text).expect("objects");
    let (ok, text) = direct(pair, "new", &["apply", "-f", &file.display().to_string()]);
    assert!(ok, "{text}");
    let rbac = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/kubeadm/share-watches-rbac.yaml"
    );
    let (ok, text) = direct(pair, "new", &["apply", "-f", rbac]);
    assert!(ok, "{text}");
}

fn metric(gate: &Serving, prefix: &str) -> f64 {
    let (_, text) = crate::harness::admin_get(gate, "/metrics");
    crate::common::metric(&text, prefix)
}

pub fn shared_watches_are_what_each_kubelet_gets_straight(pair: &Pair) {
    objects(pair);
    let (gate, _) = gate_with(pair, ROUTES, &[]);
    let through = format!("https://{}", gate.addr);
    let straight = pair.var("NEW_URL").to_owned();
    let (n1, n2, n3) = (
        node_cert(pair, "n1"),
        node_cert(pair, "n2"),
        node_cert(pair, "n1"),
    );
    let start = rv_of(pair, "configmap", "mount");
    let cm = |rv: &str, secs: u64| {
        format!(
            "/api/v1/namespaces/{NS}/configmaps?fieldSelector=metadata.name%3Dmount&watch=true&allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds={secs}"
        )
    };
    // The same start, straight and through skewgate by two kubelets, JSON and protobuf.
    let protobuf = Some("application/vnd.kubernetes.protobuf,application/json");
    let s = Watch::open(&n1, &straight, &cm(&start, 15), None, 20);
    let a = Watch::open(&n1, &through, &cm(&start, 15), None, 20);
    let b = Watch::open(&n2, &through, &cm(&start, 15), None, 20);
    let ps = Watch::open(&n1, &straight, &cm(&start, 15), protobuf, 20);
    let pb = Watch::open(&n2, &through, &cm(&start, 15), protobuf, 20);
    assert!(
        within(10, || metric(&gate, "skewgate_shared_watch_clients ")
            == 3.0),
        "three kubelets joined"
    );
    patch(pair, "configmap", "mount", "1");
    let after_first = rv_of(pair, "configmap", "mount");
    patch(pair, "configmap", "mount", "2");
    // Behind the shared watch (it listed after the first change, and the second has been sent):
    // replayed from its start.
    assert!(within(10, || a.changes().len() == 2 && b.changes().len() == 2));
    let behind = Watch::open(&n3, &through, &cm(&after_first, 6), None, 10);
    let behind_straight = Watch::open(&n3, &straight, &cm(&after_first, 6), None, 10);
    assert!(within(10, || metric(
        &gate,
        "skewgate_shared_watch_replayed_events_total"
    ) >= 1.0));
    let (ok, text) = direct(pair, "new", &["-n", NS, "delete", "configmap", "mount"]);
    assert!(ok, "{text}");
    let (ok, text) = direct(
        pair,
        "new",
        &[
            "-n",
            NS,
            "create",
            "configmap",
            "mount",
            "--from-literal=v=3",
        ],
    );
    assert!(ok, "{text}");
    let [s, a, b, ps, pb] = [s, a, b, ps, pb].map(Watch::wait);
    let straight_events = s.changes();
    let rv = |l: &String| {
        let v: serde_json::Value = serde_json::from_str(l).unwrap_or_default();
        format!(
            "{} {}",
            v["type"], v["object"]["metadata"]["resourceVersion"]
        )
    };
    println!(
        "shared watch from {start}: straight {:?}; n1 through skewgate {:?}",
        straight_events.iter().map(rv).collect::<Vec<_>>(),
        a.changes().iter().map(rv).collect::<Vec<_>>()
    );
    assert!(straight_events.len() >= 4, "{straight_events:?}");
    assert_eq!(a.changes(), straight_events, "kubelet n1 through skewgate");
    assert_eq!(b.changes(), straight_events, "kubelet n2 through skewgate");
    assert!(!ps.bytes().is_empty());
    assert_eq!(
        protobuf_changes(&pb.bytes()),
        protobuf_changes(&ps.bytes()),
        "protobuf, byte for byte"
    );
    assert_eq!(behind.wait().changes(), behind_straight.wait().changes());

    // A start older than the watch cache keeps: the apiserver's own 410. (A pair up for less than
    // a few minutes may still hold resourceVersion 1: then both replay all since.)
    let gone = |base: &str| {
        Watch::open(&n1, base, &cm("1", 2), None, 5)
            .wait()
            .changes()
    };
    let (s410, t410) = (gone(&straight), gone(&through));
    let expired = s410.first().is_some_and(|l| l.contains("\"code\":410"));
    println!(
        "a watch from resourceVersion 1: 410 {expired}, {} events",
        s410.len()
    );
    assert_eq!(t410, s410, "a watch from resourceVersion 1");
    a_restart_mid_watch_loses_nothing(pair, (&n1, &n2));
    kubelets_are_authorized_as_themselves(pair, &gate, (&n1, &n2));
    drop(gate);
    judged_by_the_audit_log(pair);
}

/// The change frames of a protobuf watch (4-byte length, `WatchEvent`), bookmarks left out.
fn protobuf_changes(mut b: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while b.len() >= 4 {
        let len = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
        let Some(frame) = b.get(4..4 + len) else {
            break;
        };
        if !frame.windows(8).any(|w| w == b"BOOKMARK") {
            out.push(frame.to_vec());
        }
        b = &b[4 + len..];
    }
    out
}

/// n1's pod is deleted: its new watch of the Secret is refused, with the apiserver's own 403,
/// while n2's open watch goes on; and a watch of another node's pods is refused.
fn kubelets_are_authorized_as_themselves(
    pair: &Pair,
    gate: &Serving,
    (n1, n2): (&(String, String), &(String, String)),
) {
    let through = format!("https://{}", gate.addr);
    let straight = pair.var("NEW_URL").to_owned();
    let start = rv_of(pair, "secret", "token");
    let secret = format!(
        "/api/v1/namespaces/{NS}/secrets?fieldSelector=metadata.name%3Dtoken&watch=true&resourceVersion={start}&timeoutSeconds=6"
    );
    let open = Watch::open(n2, &through, &secret, None, 10);
    assert!(within(10, || metric(
        gate,
        "skewgate_shared_watch_clients "
    ) >= 1.0));
    let (ok, text) = direct(
        pair,
        "new",
        &[
            "-n",
            NS,
            "delete",
            "pod",
            "p-n1",
            "--grace-period=0",
            "--force",
        ],
    );
    assert!(ok, "{text}");
    let refused = |base: &str| {
        let w = Watch::open(n1, base, &secret, None, 5).wait();
        String::from_utf8_lossy(&w.bytes()).into_owned()
    };
    assert!(
        within(10, || refused(&straight).contains("\"code\":403")),
        "straight, n1 is refused once its pod is gone"
    );
    let (s, t) = (refused(&straight), refused(&through));
    assert!(s.contains("no relationship found between node 'n1'"), "{s}");
    assert_eq!(t, s, "skewgate answers the apiserver's own 403");
    // To a kubelet, which asks for protobuf, the 403 is protobuf, byte for byte.
    let kubelet = Some("application/vnd.kubernetes.protobuf,application/json");
    let in_protobuf = |base: &str| Watch::open(n1, base, &secret, kubelet, 5).wait().bytes();
    let (s, t) = (in_protobuf(&straight), in_protobuf(&through));
    assert!(s.starts_with(b"k8s\0"), "{s:?}");
    assert_eq!(t, s, "the apiserver's own 403, in protobuf");
    patch(pair, "secret", "token", "1");
    let events = open.wait().changes();
    assert_eq!(events.len(), 1, "n2's watch goes on: {events:?}");
    let pods = "/api/v1/pods?fieldSelector=spec.nodeName%3Dn2&watch=true&resourceVersion=1&timeoutSeconds=1";
    let other = |base: &str| {
        String::from_utf8_lossy(&Watch::open(n1, base, pods, None, 5).wait().bytes()).into_owned()
    };
    let (s, t) = (other(&straight), other(&through));
    assert!(s.contains("\"code\":403"), "{s}");
    assert_eq!(t, s, "a watch of another node's pods");
    assert!(
        metric(
            gate,
            "skewgate_shared_watch_denied_total{rule=\"node-pods\"}"
        ) >= 1.0
    );
    assert!(
        metric(
            gate,
            "skewgate_shared_watch_denied_total{rule=\"kubelet-mounts\"}"
        ) >= 1.0
    );
}

/// skewgate restarted mid-watch: the kubelet's watch ends; watching again from the last version
/// it saw, through the new skewgate, it has every change a straight watch has.
fn a_restart_mid_watch_loses_nothing(
    pair: &Pair,
    (n1, n2): (&(String, String), &(String, String)),
) {
    let straight = pair.var("NEW_URL").to_owned();
    let start = rv_of(pair, "configmap", "mount");
    let cm = |rv: &str, secs: u64| {
        format!(
            "/api/v1/namespaces/{NS}/configmaps?fieldSelector=metadata.name%3Dmount&watch=true&resourceVersion={rv}&timeoutSeconds={secs}"
        )
    };
    let whole = Watch::open(n1, &straight, &cm(&start, 20), None, 25);
    let (first, _) = gate_with(pair, ROUTES, &[]);
    let before = Watch::open(
        n2,
        &format!("https://{}", first.addr),
        &cm(&start, 30),
        None,
        30,
    );
    assert!(within(10, || metric(
        &first,
        "skewgate_shared_watch_clients "
    ) == 1.0));
    patch(pair, "configmap", "mount", "r1");
    assert!(
        within(10, || !before.changes().is_empty()),
        "the change before the restart"
    );
    drop(first);
    let seen = before.wait().changes();
    patch(pair, "configmap", "mount", "r2");
    let last: serde_json::Value =
        serde_json::from_str(seen.last().expect("an event")).expect("JSON");
    let resume = last["object"]["metadata"]["resourceVersion"]
        .as_str()
        .expect("rv")
        .to_owned();
    let (second, _) = gate_with(pair, ROUTES, &[]);
    let after = Watch::open(
        n2,
        &format!("https://{}", second.addr),
        &cm(&resume, 4),
        None,
        8,
    );
    std::thread::sleep(Duration::from_millis(500));
    patch(pair, "configmap", "mount", "r3");
    let mut union = seen;
    union.extend(after.wait().changes());
    assert_eq!(
        union,
        whole.wait().changes(),
        "across a restart of skewgate"
    );
}

/// The apiserver saw skewgate's watches, not the kubelets': of the configmap watches in the
/// namespace, n2's (only ever through skewgate) are none, once skewgate's have ended.
fn judged_by_the_audit_log(pair: &Pair) {
    let watches = |user: &str| {
        pair.audit("new")
            .iter()
            .filter(|e| {
                e["verb"] == "watch"
                    && e["stage"] == "ResponseComplete"
                    && e["objectRef"]["namespace"] == NS
                    && e["objectRef"]["resource"] == "configmaps"
                    && e["user"]["username"] == user
            })
            .count()
    };
    assert!(
        within(20, || watches("skewgate") >= 2),
        "skewgate's own watches, ended"
    );
    let (node, own) = (watches("system:node:n2"), watches("skewgate"));
    println!("audit: configmap watches in {NS} by system:node:n2 {node}, by skewgate {own}");
    assert_eq!(node, 0, "n2 watched only through skewgate");
}
