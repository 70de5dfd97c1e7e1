//! The whole upgrade rehearsed on the real pair (issue 60): deploy/kubeadm's own route files, in
//! the order deploy/UPGRADE.md gives, with real controller-managers and schedulers of both
//! versions leading through skewgate, writers running throughout and the guards on; then the
//! rollback by deploy/kubeadm/rollback's files. The pair stands for the three control-plane nodes:
//! its v1.36 apiserver for those already upgraded, its v1.35 one for those not yet (each file's
//! `10.0.0.1X:6444` is the pair's apiserver of that node's version; a node listed in a backend of
//! the other version is down there, as the health check makes it in a cluster). Each file's times
//! are moved together, so that the file is loaded at the moment its step names. Judged from the
//! apiservers' audit logs, the stored objects and the components' own logs (`rehearsal_judge.rs`).

use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::harness::{Pair, admin_get, gate_table, within};
use crate::process::Serving;
use crate::protobuf::metric;

pub const NS: &str = "rehearsal";
pub const KCM: &str = "kube-controller-manager";
pub const SCHEDULER: &str = "kube-scheduler";
/// The v1.36-only field's pod, made when the runbook lets kubelets be upgraded (after step 6).
pub const SENTINEL: &str = "rehearsal-sentinel";

/// What the writers were answered, by step.
pub type Answers = Arc<Mutex<Vec<(String, String, u16)>>>;

pub struct Rehearsal<'p> {
    pub pair: &'p Pair,
    pub gate: Serving,
    pub file: PathBuf,
    pub kubeconfig: PathBuf,
    /// When it began, as the audit logs write times: what they say from then on is judged.
    pub since: String,
    pub answers: Answers,
    pub step: Arc<Mutex<String>>,
    pub stop: Arc<AtomicBool>,
    pub writers: RefCell<Vec<std::thread::JoinHandle<()>>>,
    pub status_stop: Arc<AtomicBool>,
    pub status_writer: RefCell<Option<std::thread::JoinHandle<()>>>,
    /// The last value each configmap's patch was answered 200 for.
    pub acknowledged: Arc<Mutex<std::collections::BTreeMap<String, u64>>>,
    pub handovers: RefCell<Vec<(String, Duration)>>,
    replicas: Cell<u32>,
    pub old: String,
    pub new: String,
}

/// The whole move and its rollback; skipped where the pair is not v1.35 and v1.36 with both
/// components of both.
pub fn the_whole_upgrade_and_its_rollback(pair: &Pair) {
    let (old, new) = (pair.var("OLD_VERSION"), pair.var("NEW_VERSION"));
    let components = [KCM, SCHEDULER]
        .iter()
        .all(|c| pair.has(c, old) && pair.has(c, new));
    if pair.minor("old") != "v1.35" || pair.minor("new") != "v1.36" || !components {
        println!(
            "SKIPPED (rehearsal): needs v1.35 and v1.36 apiservers, controller-managers and schedulers"
        );
        return;
    }
    let started = Instant::now();
    let r = Rehearsal::start(pair);
    r.forward();
    r.back();
    r.stop_writers();
    for name in ["kcm-old-a", "kcm-old-b", "kcm-new", "kcm-old-back"] {
        println!("rehearsal: {}", r.lease_story(name));
    }
    for name in ["scheduler-old", "scheduler-new", "scheduler-old-back"] {
        println!("rehearsal: {}", r.lease_story(name));
    }
    crate::rehearsal_judge::judge(&r);
    println!("rehearsal: {:?} in all", started.elapsed());
}

impl<'p> Rehearsal<'p> {
    /// skewgate with the cluster's table before the upgrade (routes/routes.yaml), the Deployment,
    /// a Node to bind to, the v1.35 controller-managers (cp2's and cp3's) and scheduler leading,
    /// and the writers started.
    fn start(pair: &'p Pair) -> Rehearsal<'p> {
        let since = audit_now();
        let text = rehearsal_copy(&deployed("routes/routes.yaml"), pair, None);
        let (gate, file) = gate_table(pair, &text, &[]);
        let r = Rehearsal {
            kubeconfig: file.with_file_name("kubeconfig"),
            file,
            gate,
            pair,
            since,
            answers: Answers::default(),
            step: Arc::new(Mutex::new("routes.yaml".to_owned())),
            stop: Arc::new(AtomicBool::new(false)),
            writers: RefCell::new(Vec::new()),
            status_stop: Arc::new(AtomicBool::new(false)),
            status_writer: RefCell::new(None),
            acknowledged: Arc::default(),
            handovers: RefCell::new(Vec::new()),
            replicas: Cell::new(2),
            old: pair.var("OLD_VERSION").to_owned(),
            new: pair.var("NEW_VERSION").to_owned(),
        };
        for args in [
            vec!["create", "namespace", NS],
            vec![
                "-n",
                NS,
                "create",
                "deployment",
                "web",
                "--image=busybox",
                "--replicas=2",
            ],
        ] {
            let (ok, out) = r.kubectl(&args);
            assert!(ok || out.contains("AlreadyExists"), "{out}");
        }
        crate::controllers::a_node_to_bind_to(pair);
        let old = r.old.clone();
        r.run(KCM, &old, "kcm-old-a");
        r.run(KCM, &old, "kcm-old-b");
        r.run(SCHEDULER, &old, "scheduler-old");
        r.start_writers();
        r.settled();
        r
    }

    /// The runbook's steps 1 to 6, and cp3's upgrade after them.
    fn forward(&self) {
        let new = self.new.clone();
        self.load("upgrade/01-add-backend.yaml", None);
        // The guards judge by both versions' OpenAPI, read once the table has both.
        crate::fields::schemas_known(&self.gate);
        self.scale();
        // cp1's `kubeadm upgrade apply`: its controller-manager and scheduler come back as v1.36.
        self.load("upgrade/02-upgrade-cp1.yaml", None);
        self.run(KCM, &new, "kcm-new");
        self.run(SCHEDULER, &new, "scheduler-new");
        self.scale();
        self.load("upgrade/03-ramp-reads.yaml", Some("2026-12-01T10:15:00Z"));
        self.scale();
        // cp2's `kubeadm upgrade node` stops one of the v1.35 controller-managers: the leader, so
        // that the lead is free and the v1.36 one, refused, does not take it.
        self.load("upgrade/04-upgrade-cp2.yaml", Some("2026-12-01T10:40:00Z"));
        let before = self.served();
        crate::rehearsal_judge::a_newer_lease_write_is_held(self);
        let (leader, standby) = self.leading(KCM, &["kcm-old-a", "kcm-old-b"]);
        self.handover(
            "cp2's upgrade: the v1.35 controller-manager's lead",
            &[&leader],
            &[&standby],
        );
        self.never_led(&["kcm-new", "scheduler-new"]);
        self.scale();
        self.carried_alone(before);
        let flip = self.load("upgrade/05-move-writes.yaml", Some("2026-12-01T11:09:50Z"));
        self.never_led(&["kcm-new", "scheduler-new"]);
        sleep_until(flip + Duration::from_secs(6));
        // The fence held the leaders' Lease renewals, for less than their renew deadline: they
        // lead on (with a fence as long as the deadline, one run of two saw the lead lost there).
        self.never_led(&["kcm-new", "scheduler-new"]);
        self.scale();
        self.never_led(&["kcm-new", "scheduler-new"]);
        self.load("upgrade/06-done.yaml", None);
        crate::fields::healthy_pod_on_new(self.pair, &self.file, SENTINEL);
        self.start_status_writer();
        // cp3's `kubeadm upgrade node`: the last v1.35 components stop, the v1.36 ones lead.
        self.handover(
            "cp3's upgrade: the controller-manager's lead",
            &[&standby],
            &["kcm-new"],
        );
        let to_new = &["scheduler-new"];
        self.handover(
            "cp3's upgrade: the scheduler's lead",
            &["scheduler-old"],
            to_new,
        );
        self.scale();
    }

    /// The rollback's steps, then the cluster's table before the upgrade again.
    fn back(&self) {
        let old = self.old.clone();
        // cp3 returns to v1.35, and with it a v1.35 controller-manager and scheduler, standing by.
        self.load("rollback/r1-restore-cp3.yaml", None);
        self.run(KCM, &old, "kcm-old-back");
        self.run(SCHEDULER, &old, "scheduler-old-back");
        self.scale();
        let flip = self.load(
            "rollback/r2-move-writes-back.yaml",
            Some("2026-12-01T12:19:50Z"),
        );
        sleep_until(flip);
        // From flipAt the v1.36 leaders' Lease writes are refused: they lose the lead, the v1.35
        // ones take it.
        let t0 = Instant::now();
        for (what, to) in [
            ("controller-manager", "kcm-old-back"),
            ("scheduler", "scheduler-old-back"),
        ] {
            let led = within(180, || self.led(to));
            assert!(
                led,
                "{to} did not take the lead back:\n{}",
                tail(&self.pair.log(to))
            );
            let took = t0.elapsed();
            println!("rehearsal: the rollback's flip: the {what}'s lead back to v1.35 in {took:?}");
            self.handovers
                .borrow_mut()
                .push((format!("rollback: {what}"), took));
        }
        self.scale();
        self.load("rollback/r3-defaults-back.yaml", None);
        for name in ["kcm-new", "scheduler-new"] {
            self.pair.stop(name);
        }
        self.scale();
        // The last step drops v1-36: no guard knows v1.36's fields then, and every write through
        // v1.35 drops them (a downgrade's own loss). Until then nothing was lost.
        self.status_stop.store(true, Ordering::Relaxed);
        if let Some(handle) = self.status_writer.borrow_mut().take() {
            handle.join().expect("the status writer");
        }
        crate::rehearsal_judge::the_new_only_field_kept(self);
        self.load("routes/routes.yaml", None);
        self.scale();
    }

    pub fn kubectl(&self, args: &[&str]) -> (bool, String) {
        crate::harness::kubectl(&self.kubeconfig, args)
    }

    /// Starts `component` of `version` through skewgate as `name`.
    fn run(&self, component: &str, version: &str, name: &str) {
        let server = format!("https://{}", self.gate.addr);
        self.pair
            .run(component, version, &server, name)
            .unwrap_or_else(|e| panic!("{name} did not start: {e}"));
    }

    /// Loads the runbook's file `rel` (under deploy/kubeadm) as the step's moment `at` (its times
    /// moved so that now is `at`), once skewgate has loaded it. Returns its first flipAt, moved.
    fn load(&self, rel: &str, at: Option<&str>) -> SystemTime {
        let now = SystemTime::now();
        let at = at.map(|a| humantime::parse_rfc3339(a).expect("a moment"));
        let text = rehearsal_copy(&deployed(rel), self.pair, at.map(|a| (a, now)));
        let loads = || {
            let (_, m) = admin_get(&self.gate, "/metrics");
            metric(&m, "skewgate_config_reloads_total{result=\"success\"}")
        };
        let before = loads();
        std::fs::write(&self.file, &text).expect("routes");
        let loaded = within(30, || loads() > before);
        assert!(
            loaded,
            "{rel} did not load: {:?}",
            crate::harness::logged(&self.gate)
        );
        *self.step.lock().expect("step") = rel.to_owned();
        println!("rehearsal: {rel} loaded");
        first_flip_at(&text).unwrap_or(now)
    }

    /// Scales the Deployment (2, 3, 2, ...) and waits until it has its pods, every one bound.
    fn scale(&self) {
        self.replicas.set(5 - self.replicas.get());
        let to = format!("--replicas={}", self.replicas.get());
        let (ok, out) = self.kubectl(&["-n", NS, "scale", "deployment", "web", &to]);
        assert!(ok, "{out}");
        self.settled();
    }

    /// The Deployment at its replicas, every live pod of it bound to node-0.
    fn settled(&self) {
        let replicas = self.replicas.get();
        let kubectl = |args: &[&str]| self.kubectl(args);
        let done = within(180, || {
            crate::fleet_controllers::deployment_settled(&kubectl, NS, replicas)
        });
        let (_, pods) = self.kubectl(&["-n", NS, "get", "pods", "-o", "wide"]);
        let step = self.step.lock().expect("step").clone();
        assert!(
            done,
            "{step}: the Deployment did not settle at {replicas}:\n{pods}"
        );
        println!("rehearsal: {step}: {replicas} pods scheduled");
    }

    /// The requests each version has served so far (v1.35, v1.36), by skewgate's count.
    fn served(&self) -> (f64, f64) {
        let (_, m) = admin_get(&self.gate, "/metrics");
        let by = |backend: &str| -> f64 {
            let label = format!("backend=\"{backend}\"");
            (m.lines())
                .filter(|l| l.starts_with("skewgate_requests_total{") && l.contains(&label))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum()
        };
        (by("v1-35"), by("v1-36"))
    }

    /// What v1.35's one apiserver served while it was alone (step 4), against v1.36's two.
    fn carried_alone(&self, before: (f64, f64)) {
        let now = self.served();
        let (old, new) = (now.0 - before.0, now.1 - before.1);
        let share = 100.0 * old / (old + new).max(1.0);
        println!(
            "rehearsal: step 4: v1.35 alone served {old} requests, v1.36 {new} ({share:.0} % on the one old apiserver)"
        );
    }

    /// Which of `names` leads `component` (its log says it acquired the lease), and another.
    fn leading(&self, component: &str, names: &[&str]) -> (String, String) {
        let leader = names.iter().find(|n| self.led(n));
        let leader = leader.unwrap_or_else(|| panic!("none of {names:?} leads {component}"));
        let other = names.iter().find(|n| *n != leader).expect("another");
        (leader.to_string(), other.to_string())
    }

    /// Whether the component started as `name` has led since it started.
    pub fn led(&self, name: &str) -> bool {
        self.pair.log(name).contains("uccessfully acquired lease")
    }

    /// The components `names` have never led.
    fn never_led(&self, names: &[&str]) {
        for name in names {
            let all = [
                "kcm-old-a",
                "kcm-old-b",
                "kcm-new",
                "scheduler-old",
                "scheduler-new",
            ];
            let stories: Vec<String> = all.iter().map(|n| self.lease_story(n)).collect();
            assert!(
                !self.led(name),
                "{name} led while writes went to v1.35:\n{}",
                stories.join("\n")
            );
        }
    }

    /// What the component started as `name` logged of its leader election.
    pub fn lease_story(&self, name: &str) -> String {
        let log = self.pair.log(name);
        let lines: Vec<&str> = (log.lines())
            .filter(|l| {
                let l = l.to_ascii_lowercase();
                l.contains("leaderelection") || l.contains("lease") && l.contains("lock")
            })
            .collect();
        format!(
            "{name}:\n  {}",
            lines[lines.len().saturating_sub(12)..].join("\n  ")
        )
    }

    /// Stops `from` and measures how long from the stop until one of `to` leads.
    fn handover(&self, what: &str, from: &[&str], to: &[&str]) {
        // From the stop signal: a scheduler gives its lease up as it stops, and the standby may
        // take it before the old one has exited.
        let t0 = Instant::now();
        for name in from {
            self.pair.stop(name);
        }
        let led = within(180, || to.iter().any(|n| self.led(n)));
        let logs: Vec<String> = to.iter().map(|n| tail(&self.pair.log(n))).collect();
        assert!(
            led,
            "{what}: none of {to:?} took the lead:\n{}",
            logs.join("\n")
        );
        let took = t0.elapsed();
        println!("rehearsal: {what} handed over in {took:?}");
        self.handovers.borrow_mut().push((what.to_owned(), took));
    }
}

/// A file of deploy/kubeadm.
fn deployed(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy/kubeadm")
        .join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A runbook file made the rehearsal's: cp1's apiserver is the pair's v1.36 one, cp2's and cp3's
/// its v1.35 one (listed once per backend), and with `moved` = (the step's moment, now), every
/// time in it moved by now − moment.
pub fn rehearsal_copy(text: &str, pair: &Pair, moved: Option<(SystemTime, SystemTime)>) -> String {
    let (new, old) = (pair.var("NEW_URL"), pair.var("OLD_URL"));
    let text = text
        .replace("https://10.0.0.11:6444", new)
        .replace("https://10.0.0.12:6444", old)
        .replace("https://10.0.0.13:6444", old);
    let mut out = String::new();
    let mut listed: Vec<String> = Vec::new();
    for line in text.lines() {
        let line = match line.split_once("endpoints: [") {
            Some((head, list)) => {
                let mut items: Vec<&str> = Vec::new();
                for item in list.trim_end_matches(']').split(", ") {
                    if !items.contains(&item) {
                        items.push(item);
                    }
                }
                format!("{head}endpoints: [{}]", items.join(", "))
            }
            None => line.to_owned(),
        };
        if line.trim_start().starts_with("- https://") || line.trim_start().starts_with("- http://")
        {
            if listed.contains(&line) {
                continue;
            }
            listed.push(line.clone());
        } else {
            listed.clear();
        }
        out.push_str(&line);
        out.push('\n');
    }
    match moved {
        Some((moment, now)) => move_times(&out, moment, now),
        None => out,
    }
}

/// Every RFC 3339 time in `text` moved by now − moment.
fn move_times(text: &str, moment: SystemTime, now: SystemTime) -> String {
    let time = regex::Regex::new(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ").expect("regex");
    time.replace_all(text, |c: &regex::Captures<'_>| {
        let t = humantime::parse_rfc3339(&c[0]).expect("a time");
        let moved = match t.duration_since(moment) {
            Ok(after) => now + after,
            Err(before) => now - before.duration(),
        };
        humantime::format_rfc3339_seconds(moved).to_string()
    })
    .into_owned()
}

fn first_flip_at(text: &str) -> Option<SystemTime> {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("flipAt:"))?;
    humantime::parse_rfc3339(line.split_once(':')?.1.trim()).ok()
}

fn sleep_until(at: SystemTime) {
    std::thread::sleep(at.duration_since(SystemTime::now()).unwrap_or_default());
}

/// Now, as the audit logs write their times (RFC 3339, microseconds, UTC): they order as text.
fn audit_now() -> String {
    humantime::format_rfc3339_micros(SystemTime::now()).to_string()
}

pub fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(25)..].join("\n")
}
