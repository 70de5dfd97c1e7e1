//! The rehearsal's writers (`rehearsal.rs`): kubectl-like JSON writers of configmaps through
//! skewgate throughout, and from step 6 an old client's full updates of the sentinel pod's
//! status; every answer recorded with the step it came in.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::rehearsal::{Answers, NS, Rehearsal, SENTINEL};

impl Rehearsal<'_> {
    /// kubectl-like JSON writers through skewgate: merge patches and full updates of four
    /// configmaps, each answer recorded with the step it came in.
    pub fn start_writers(&self) {
        for i in 0..4 {
            let name = format!("cm-{i}");
            let (ok, out) =
                self.kubectl(&["-n", NS, "create", "configmap", &name, "--from-literal=n=0"]);
            assert!(ok || out.contains("AlreadyExists"), "{out}");
        }
        let url = format!(
            "https://{}/api/v1/namespaces/{NS}/configmaps",
            self.gate.addr
        );
        let w = self.writer_state();
        let pair_dir = (self.pair.pki("admin.crt"), self.pair.pki("admin.key"));
        let acknowledged = self.acknowledged.clone();
        let handle = std::thread::spawn(move || {
            let mut n = 0u64;
            while !w.stop.load(Ordering::Relaxed) {
                n += 1;
                let name = format!("cm-{}", n % 4);
                let patch = format!("{{\"data\":{{\"n\":\"{n}\"}}}}");
                let code = write(
                    &pair_dir,
                    "PATCH",
                    "application/merge-patch+json",
                    &patch,
                    &format!("{url}/{name}"),
                );
                w.note(&format!("patch configmap {name}"), code);
                if code == 200 {
                    acknowledged.lock().expect("acks").insert(name.clone(), n);
                }
                let (got, body) = read(&pair_dir, &format!("{url}/{name}"));
                if got == 200
                    && let Ok(mut cm) = serde_json::from_str::<Value>(&body)
                {
                    cm["data"]["seen"] = Value::from(n.to_string());
                    let code = write(
                        &pair_dir,
                        "PUT",
                        "application/json",
                        &cm.to_string(),
                        &format!("{url}/{name}"),
                    );
                    w.note(&format!("update configmap {name}"), code);
                    if code == 200 {
                        acknowledged.lock().expect("acks").insert(name.clone(), n);
                    }
                }
            }
        });
        self.writers.borrow_mut().push(handle);
    }

    /// A writer of the sentinel pod's status, as an old client that reads it and writes it back
    /// whole: through v1.36 nothing is lost; through v1.35 (after the rollback's flip) the guard
    /// refuses it, and the field v1.35 cannot store stays.
    pub fn start_status_writer(&self) {
        let url = format!(
            "https://{}/api/v1/namespaces/default/pods/{SENTINEL}",
            self.gate.addr
        );
        let w = WriterState {
            stop: self.status_stop.clone(),
            ..self.writer_state()
        };
        let pair_dir = (self.pair.pki("admin.crt"), self.pair.pki("admin.key"));
        let handle = std::thread::spawn(move || {
            let mut n = 0u64;
            while !w.stop.load(Ordering::Relaxed) {
                n += 1;
                let (got, body) = read(&pair_dir, &url);
                let Ok(mut pod) = serde_json::from_str::<Value>(&body) else {
                    continue;
                };
                if got != 200 {
                    continue;
                }
                pod["status"]["conditions"] = serde_json::json!([{"type": "example.com/Seen", "status": "True", "reason": format!("N{n}")}]);
                let code = write(
                    &pair_dir,
                    "PUT",
                    "application/json",
                    &pod.to_string(),
                    &format!("{url}/status"),
                );
                w.note("update pod status", code);
                std::thread::sleep(Duration::from_millis(500));
            }
        });
        *self.status_writer.borrow_mut() = Some(handle);
    }

    fn writer_state(&self) -> WriterState {
        WriterState {
            stop: self.stop.clone(),
            step: self.step.clone(),
            answers: self.answers.clone(),
        }
    }

    pub fn stop_writers(&self) {
        self.stop.store(true, Ordering::Relaxed);
        for handle in self.writers.borrow_mut().drain(..) {
            handle.join().expect("a writer");
        }
    }
}

struct WriterState {
    stop: Arc<AtomicBool>,
    step: Arc<Mutex<String>>,
    answers: Answers,
}

impl WriterState {
    fn note(&self, what: &str, code: u16) {
        let step = self.step.lock().expect("step").clone();
        self.answers
            .lock()
            .expect("answers")
            .push((step, what.to_owned(), code));
    }
}

const KUBECTL_35: &str = "kubectl/v1.35.6 (linux/amd64) kubernetes/rehearsal";

/// A write as kubectl v1.35 makes it, with the admin certificate: its status code.
fn write((crt, key): &(String, String), method: &str, kind: &str, body: &str, url: &str) -> u16 {
    let kind = format!("content-type: {kind}");
    let args = [
        "-A",
        KUBECTL_35,
        "-X",
        method,
        "-H",
        &kind,
        "--data-binary",
        body,
        url,
    ];
    crate::harness::curl_code_with((crt, key), &args)
}

/// A GET as kubectl v1.35 makes it: the status code and the body.
fn read((crt, key): &(String, String), url: &str) -> (u16, String) {
    let out = std::process::Command::new("curl")
        .args(["-sk", "--cert", crt, "--key", key, "-A", KUBECTL_35])
        .args(["-w", "\n%{http_code}", url])
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}
