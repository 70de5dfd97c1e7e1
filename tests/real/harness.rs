//! The pair of real apiservers and skewgate in front of it: starting, stopping one apiserver and
//! starting it again, their audit logs, and the clients the checks use (kubectl, curl with the
//! admin certificate).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::temp_dir;
use crate::process::{Serving, serve};

/// The pair, stopped when dropped.
pub struct Pair {
    dir: PathBuf,
    script: PathBuf,
    /// What `pair.sh up` was given: the assets and the four ports.
    up_env: Vec<(String, String)>,
    env: Vec<(String, String)>,
}

impl Pair {
    pub fn var(&self, name: &str) -> &str {
        self.env
            .iter()
            .find(|(k, _)| k == name)
            .map_or("", |(_, v)| v.as_str())
    }

    pub fn pki(&self, file: &str) -> String {
        format!("{}/{file}", self.var("PKI"))
    }

    /// `major.minor` of the new or old apiserver (`v1.36`).
    pub fn minor(&self, role: &str) -> String {
        let v = self.var(if role == "new" {
            "NEW_VERSION"
        } else {
            "OLD_VERSION"
        });
        v.rsplit_once('.').map_or(v, |(mm, _)| mm).to_owned()
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(&self.script)
            .args(["down"])
            .arg(&self.dir)
            .status();
        // The binaries, etcd's data and the logs: some 300 MB a run.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("port");
    l.local_addr().expect("addr").port()
}

/// Why the pair cannot run here, if it cannot.
pub fn missing() -> Option<String> {
    let assets = std::env::var("SKEWGATE_APISERVER_ASSETS").ok()?;
    if !Path::new(&assets).is_dir() {
        return Some(format!("SKEWGATE_APISERVER_ASSETS={assets} is no folder"));
    }
    // etcd from the assets (the shared envtest's etcd-v3.6.13.xz), else on PATH.
    let etcd_in_assets = std::fs::read_dir(&assets).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with("etcd-v") && name.ends_with(".xz")
        })
    });
    let tools = ["etcd", "unshare", "openssl", "xz", "curl", "kubectl"];
    for tool in tools
        .into_iter()
        .filter(|t| *t != "etcd" || !etcd_in_assets)
    {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return Some(format!("{tool} is not installed"));
        }
    }
    None
}

pub fn start_pair() -> Result<Pair, String> {
    let assets = std::env::var("SKEWGATE_APISERVER_ASSETS").map_err(|_| "unset".to_owned())?;
    let ports = [free_port(), free_port(), free_port(), free_port()];
    let names = ["NEW_PORT", "OLD_PORT", "ETCD_PORT", "ETCD_PEER_PORT"];
    let mut up_env = vec![("ASSETS".to_owned(), assets)];
    up_env.extend(
        names
            .iter()
            .zip(ports)
            .map(|(n, p)| (n.to_string(), p.to_string())),
    );
    let mut pair = Pair {
        dir: temp_dir("pair"),
        script: Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/real/pair.sh"),
        up_env,
        env: Vec::new(),
    };
    pair.up()?;
    let env = std::fs::read_to_string(pair.dir.join("env.sh")).map_err(|e| e.to_string())?;
    pair.env = env
        .split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    Ok(pair)
}

impl Pair {
    /// `pair.sh up`: starts what is not running and waits until both answer /readyz.
    pub fn up(&self) -> Result<(), String> {
        let out = Command::new("bash")
            .arg(&self.script)
            .arg("up")
            .arg(&self.dir)
            .envs(self.up_env.iter().map(|(k, v)| (k, v)))
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// `pair.sh run`: starts a real `component` of `version` (`v1.35.6`) against `server` as
    /// `name`, if the assets have it; `Err` says why not.
    pub fn run(
        &self,
        component: &str,
        version: &str,
        server: &str,
        name: &str,
    ) -> Result<(), String> {
        let out = Command::new("bash")
            .arg(&self.script)
            .args(["run"])
            .arg(&self.dir)
            .args([component, version, server])
            .envs(self.up_env.iter().map(|(k, v)| (k, v)))
            .env("NAME", name)
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// The log of a component started by [`Pair::run`].
    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("logs/{name}.log"))).unwrap_or_default()
    }

    /// Stops the `new` or `old` apiserver, or a component started by [`Pair::run`] by its name
    /// (SIGTERM), and waits until it has exited.
    pub fn stop(&self, role: &str) {
        let pid = self.dir.join(format!("run/{role}.pid"));
        let pid = std::fs::read_to_string(&pid).expect("pid file");
        let alive = || {
            Command::new("kill")
                .args(["-0", pid.trim()])
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        let _ = Command::new("kill").arg(pid.trim()).status();
        for _ in 0..200 {
            if !alive() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("{role} did not exit");
    }

    /// Whether `component-version.xz` is in the assets.
    pub fn has(&self, component: &str, version: &str) -> bool {
        self.up_env
            .iter()
            .find(|(k, _)| k == "ASSETS")
            .is_some_and(|(_, dir)| {
                Path::new(dir)
                    .join(format!("{component}-{version}.xz"))
                    .is_file()
            })
    }

    /// The `new` or `old` apiserver's audit events so far (one JSON object a line).
    pub fn audit(&self, role: &str) -> Vec<serde_json::Value> {
        let log = self.dir.join(format!("logs/audit-{role}.log"));
        std::fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

/// A route file: backends `old` and `new`, then `routes`.
pub fn table(pair: &Pair, routes: &str) -> String {
    format!(
        "apiVersion: skewgate.io/v1alpha1\nkind: RouteTable\nbackends:\n  - {{name: old, version: {}, endpoints: [\"{}\"]}}\n  - {{name: new, version: {}, endpoints: [\"{}\"]}}\n{routes}",
        pair.minor("old"),
        pair.var("OLD_URL"),
        pair.minor("new"),
        pair.var("NEW_URL"),
    )
}

/// skewgate in front of the pair, with `routes` (backends `old` and `new` prepended; the file is
/// written to the routes path returned, beside `kubeconfig` for the admin through skewgate), over TLS as
/// kubeadm's apiserver certificate, forwarding with the front-proxy certificate.
pub fn gate(pair: &Pair, routes: &str) -> (Serving, PathBuf) {
    gate_with(pair, routes, &[])
}

/// [`gate`], with more `skewgate serve` flags.
pub fn gate_with(pair: &Pair, routes: &str, more: &[&str]) -> (Serving, PathBuf) {
    gate_table(pair, &table(pair, routes), more)
}

/// [`gate_with`] on a whole route file, backends and all.
pub fn gate_table(pair: &Pair, text: &str, more: &[&str]) -> (Serving, PathBuf) {
    let dir = temp_dir("real-gate");
    let file = dir.join("routes.yaml");
    std::fs::write(&file, text).expect("routes");
    let (ca, crt, key) = (
        pair.pki("ca.crt"),
        pair.pki("apiserver.crt"),
        pair.pki("apiserver.key"),
    );
    let (fp, fpk) = (
        pair.pki("front-proxy-client.crt"),
        pair.pki("front-proxy-client.key"),
    );
    let args = [
        "--tls-cert-file",
        &crt,
        "--tls-private-key-file",
        &key,
        "--client-ca-file",
        &ca,
        "--upstream-ca-file",
        &ca,
        "--proxy-client-cert-file",
        &fp,
        "--proxy-client-key-file",
        &fpk,
        "--hold-back-offenders",
        "false",
    ];
    let args: Vec<&str> = args.iter().chain(more).copied().collect();
    let serving = serve(&file, &args, None);
    let kubeconfig = dir.join("kubeconfig");
    let kc = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- {{name: sg, cluster: {{server: \"https://{}\", insecure-skip-tls-verify: true}}}}\nusers:\n- {{name: admin, user: {{client-certificate: {}, client-key: {}}}}}\ncontexts:\n- {{name: sg, context: {{cluster: sg, user: admin, namespace: default}}}}\ncurrent-context: sg\n",
        serving.addr,
        pair.pki("admin.crt"),
        pair.pki("admin.key")
    );
    std::fs::write(&kubeconfig, kc).expect("kubeconfig");
    (serving, file)
}

/// kubectl's output, with `kubeconfig` (or the pair's own, for a `--context`).
pub fn kubectl(kubeconfig: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--request-timeout", "20s"])
        .args(args)
        .output()
        .expect("kubectl runs");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// curl with the admin certificate: the status code, the answer's headers and its bytes.
pub fn curl_bytes(pair: &Pair, args: &[&str]) -> (u16, String, Vec<u8>) {
    let dir = temp_dir("curl");
    let (body, headers) = (dir.join("body"), dir.join("headers"));
    let out = Command::new("curl")
        .args(["-sk", "--cert", &pair.pki("admin.crt")])
        .args(["--key", &pair.pki("admin.key")])
        .arg("-o")
        .arg(&body)
        .arg("-D")
        .arg(&headers)
        .args(["-w", "%{http_code}"])
        .args(args)
        .output()
        .expect("curl runs");
    let code = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0);
    let headers = std::fs::read_to_string(&headers).unwrap_or_default();
    (code, headers, std::fs::read(&body).unwrap_or_default())
}

/// curl with the admin certificate: the status code, and the body.
pub fn curl(pair: &Pair, args: &[&str]) -> (u16, String) {
    let (code, _, body) = curl_bytes(pair, args);
    (code, String::from_utf8_lossy(&body).into_owned())
}

/// The (name, apiVersion) of every resource kubectl lists.
pub fn resources(text: &str) -> Vec<(String, String)> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            let version = cols.iter().find(|c| c.contains('/') || **c == "v1")?;
            Some((cols.first()?.to_string(), version.to_string()))
        })
        .collect()
}

/// Only the status code of a curl request with the admin certificate.
pub fn curl_code(pair: &Pair, args: &[&str]) -> u16 {
    curl_code_with((&pair.pki("admin.crt"), &pair.pki("admin.key")), args)
}

/// Only the status code of a curl request with this certificate and key (from a thread that
/// holds no `Pair`).
pub fn curl_code_with((crt, key): (&str, &str), args: &[&str]) -> u16 {
    let out = Command::new("curl")
        .args(["-sk", "--cert", crt, "--key", key])
        .args(["-o", "/dev/null", "-w", "%{http_code}"])
        .args(args)
        .output()
        .expect("curl runs");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0)
}

/// A GET of skewgate's admin listener: the status code and the body.
pub fn admin_get(gate: &Serving, path: &str) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-s", "-w", "\n%{http_code}"])
        .arg(format!("http://{}{path}", gate.admin))
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

/// Whether `check` holds within `secs` seconds, asked every 200 ms.
pub fn within(secs: u64, mut check: impl FnMut() -> bool) -> bool {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        if check() {
            return true;
        }
        if std::time::Instant::now() > until {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// kubectl straight to the `new` or `old` apiserver, as the admin.
pub fn direct(pair: &Pair, role: &str, args: &[&str]) -> (bool, String) {
    let mut all = vec!["--context", role];
    all.extend_from_slice(args);
    kubectl(Path::new(pair.var("KUBECONFIG")), &all)
}

/// What `gate` logged since last asked.
pub fn logged(gate: &Serving) -> Vec<String> {
    gate.lines.try_iter().collect()
}
