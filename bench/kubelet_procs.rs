//! What bench/kubelets.rs runs: the real apiserver (pair.sh's "new", a fresh pair per phase) and
//! the proxy in front of it (skewgate, or HAProxy as an L4 or an L7 proxy), each restartable.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::targets::{self, Proc, free_port, which};

/// The real apiserver ("new" of pair.sh's two), and how to restart it.
pub struct Apiserver {
    pub dir: PathBuf,
    pub script: PathBuf,
    pub assets: String,
    pub port: u16,
    /// pair.sh's other apiserver, idle here.
    pub old_port: u16,
    /// etcd's client and peer ports.
    pub etcd: (u16, u16),
    /// More apiserver flags (pair.sh's EXTRA_FLAGS).
    pub flags: String,
}

impl Apiserver {
    /// Starts what is not running (the pair, or the one apiserver stopped), until it is ready.
    pub fn up(&self) -> bool {
        let ports = [
            ("NEW_PORT", self.port.to_string()),
            ("OLD_PORT", self.old_port.to_string()),
            ("ETCD_PORT", self.etcd.0.to_string()),
            ("ETCD_PEER_PORT", self.etcd.1.to_string()),
            ("EXTRA_FLAGS", self.flags.clone()),
        ];
        let out = Command::new("bash")
            .arg(&self.script)
            .arg("up")
            .arg(&self.dir)
            .env("ASSETS", &self.assets)
            .envs(ports)
            .output();
        match out {
            Ok(o) if o.status.success() => true,
            Ok(o) => {
                eprintln!("pair.sh up: {}", String::from_utf8_lossy(&o.stderr));
                false
            }
            Err(e) => {
                eprintln!("pair.sh: {e}");
                false
            }
        }
    }

    pub fn pid(&self) -> u32 {
        std::fs::read_to_string(self.dir.join("run/new.pid"))
            .ok()
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or(0)
    }

    pub fn pki(&self) -> PathBuf {
        self.dir.join("pki")
    }

    pub fn addr(&self) -> SocketAddr {
        ([127, 0, 0, 1], self.port).into()
    }

    /// Kills the apiserver (SIGKILL, a crash: every watch ends at once), and waits for it to exit.
    /// (Sent SIGTERM, kube-apiserver 1.36 went on serving its open watches for 30 s and more
    /// while it drained, and a kubelet sends SIGKILL to a static pod 30 s after SIGTERM.)
    pub async fn stop(&self) {
        let pid = self.pid();
        if pid == 0 {
            return;
        }
        let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
        for _ in 0..600 {
            if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // pair.sh judges the restarted one alive by this file: not by the old pid in it.
        let _ = std::fs::remove_file(self.dir.join("run/new.pid"));
    }

    /// The apiserver's accepted connections: its sockets whose local port is its own.
    pub fn accepted(&self) -> usize {
        let inodes = targets::socket_inodes(self.pid());
        let text = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
        text.lines()
            .skip(1)
            .filter(|line| {
                let cols: Vec<&str> = line.split_whitespace().collect();
                let local = cols
                    .get(1)
                    .and_then(|l| l.rsplit(':').next())
                    .and_then(|p| u16::from_str_radix(p, 16).ok());
                local == Some(self.port)
                    && cols.get(3) == Some(&"01")
                    && cols.get(9).is_some_and(|i| inodes.contains(*i))
            })
            .count()
    }
}

impl Drop for Apiserver {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(&self.script)
            .arg("down")
            .arg(&self.dir)
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A proxy in front of the apiserver, which the bench can kill and start again on its port.
pub struct Proxy {
    pub name: &'static str,
    pub listen: SocketAddr,
    command: Command,
    pub process: Option<Proc>,
}

impl Proxy {
    pub async fn start(&mut self) -> bool {
        self.process = Proc::spawn(self.name, &mut self.command);
        self.process.is_some() && targets::wait_ready(self.listen).await
    }

    /// Kills it (SIGKILL, a crash) and starts it again.
    pub async fn restart(&mut self) -> bool {
        self.process = None;
        self.start().await
    }
}

/// HAProxy takes two descriptors a connection whatever its mode, and this machine's hard limit
/// is 20,000 (`ulimit -Hn`): the client connections it can hold here.
pub const HAPROXY_MAXCONN: usize = 9_900;

/// The phases a run may hold, in order.
pub const PHASES: [&str; 5] = [
    "direct",
    "skewgate",
    "skewgate-shared",
    "haproxy-tcp",
    "haproxy-h2",
];

/// The proxy of phase `name` in front of `api` (none for "direct"; none when HAProxy is absent).
pub fn proxy(name: &'static str, api: &Apiserver) -> Option<Proxy> {
    let listen: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let dir = api.dir.join(name);
    std::fs::create_dir_all(&dir).ok()?;
    let command = match name {
        "skewgate" => skewgate(api, listen, &dir, false)?,
        "skewgate-shared" => skewgate(api, listen, &dir, true)?,
        "haproxy-tcp" | "haproxy-h2" => haproxy(name, api, listen, &dir)?,
        _ => return None,
    };
    Some(Proxy {
        name,
        listen,
        command,
        process: None,
    })
}

/// skewgate in front of `api`; with `shared`, the kubelets' watches of their mounts shared
/// (`shareWatches`, as routes/example.yaml has it).
fn skewgate(
    api: &Apiserver,
    listen: SocketAddr,
    dir: &std::path::Path,
    shared: bool,
) -> Option<Command> {
    let routes = dir.join("routes.yaml");
    let mut table = format!(
        "apiVersion: skewgate.io/v1alpha1\nkind: RouteTable\nbackends:\n  - {{name: new, endpoints: [\"https://127.0.0.1:{}\"]}}\nwrites:\n  default: new\nreads:\n  default: new\n",
        api.port
    );
    if shared {
        table.push_str("shareWatches:\n  - name: kubelet-mounts\n    match: {resources: [configmaps, secrets], groups: [\"system:nodes\"]}\n");
    }
    std::fs::write(&routes, table).ok()?;
    let pki = |f: &str| api.pki().join(f);
    let exe = std::env::var("SKEWGATE_BIN").unwrap_or_else(|_| "target/release/skewgate".into());
    let mut cmd = Command::new(exe);
    cmd.arg("serve")
        .arg("--routes")
        .arg(&routes)
        .arg(format!("--listen={listen}"))
        .arg(format!("--admin-listen=127.0.0.1:{}", free_port()))
        .args(["--hold-back-offenders", "false", "--no-access-log"]);
    for (flag, file) in [
        ("--tls-cert-file", "apiserver.crt"),
        ("--tls-private-key-file", "apiserver.key"),
        ("--client-ca-file", "ca.crt"),
        ("--upstream-ca-file", "ca.crt"),
        ("--proxy-client-cert-file", "front-proxy-client.crt"),
        ("--proxy-client-key-file", "front-proxy-client.key"),
    ] {
        cmd.arg(flag).arg(pki(file));
    }
    Some(cmd)
}

/// HAProxy 2.6 as kubeadm's HA guide runs it (`mode tcp`: TLS passes through, a connection to the
/// apiserver per kubelet connection), or as an L7 proxy doing what skewgate does: TLS ended with
/// the client's certificate checked, its identity passed on in the front-proxy headers the
/// apiserver trusts, HTTP/2 to the apiserver with connections shared by every client
/// (`http-reuse always`).
fn haproxy(
    name: &str,
    api: &Apiserver,
    listen: SocketAddr,
    dir: &std::path::Path,
) -> Option<Command> {
    let Some(bin) = which("haproxy") else {
        println!("{name}: haproxy is not installed (apt-get install haproxy), left out");
        return None;
    };
    let pki = api.pki();
    let pem = |name: &str, parts: [&str; 2]| -> Option<PathBuf> {
        let mut text = String::new();
        for p in parts {
            text += &std::fs::read_to_string(pki.join(p)).ok()?;
        }
        let path = dir.join(name);
        std::fs::write(&path, text).ok()?;
        Some(path)
    };
    let serving = pem("serving.pem", ["apiserver.crt", "apiserver.key"])?;
    let front = pem(
        "front-proxy.pem",
        ["front-proxy-client.crt", "front-proxy-client.key"],
    )?;
    let (ca, port) = (pki.join("ca.crt"), api.port);
    let head = format!(
        "global\n  maxconn {HAPROXY_MAXCONN}\ndefaults\n  timeout connect 5s\n  timeout client 1h\n  timeout server 1h\n  timeout tunnel 1h\n"
    );
    let body = if name == "haproxy-tcp" {
        format!(
            "  mode tcp\nfrontend api\n  bind {listen}\n  default_backend apiservers\nbackend apiservers\n  server new 127.0.0.1:{port}\n"
        )
    } else {
        format!(
            "  mode http\n  timeout http-keep-alive 1h\n  timeout http-request 10s\nfrontend api\n  bind {listen} ssl crt {s} ca-file {c} verify required alpn h2,http/1.1\n  http-request del-header X-Remote-User\n  http-request del-header X-Remote-Group\n  http-request set-header X-Remote-User %[ssl_c_s_dn(CN)]\n  http-request set-header X-Remote-Group %[ssl_c_s_dn(O)]\n  default_backend apiservers\nbackend apiservers\n  http-reuse always\n  server new 127.0.0.1:{port} ssl verify required ca-file {c} verifyhost localhost sni str(localhost) crt {f} alpn h2\n",
            s = serving.display(),
            c = ca.display(),
            f = front.display()
        )
    };
    let cfg = targets::write_file(dir, "haproxy.cfg", &format!("{head}{body}"));
    let mut cmd = Command::new(bin);
    cmd.arg("-db").arg("-f").arg(cfg);
    Some(cmd)
}
