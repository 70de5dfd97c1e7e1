//! Processes a benchmark runs and measures: the simulator, skewgate, and the peers (HAProxy,
//! nginx) when they are installed, each in its own process on a loopback port.

#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// The value after `name` on the command line (`cargo bench --bench B -- --name value`).
pub fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

/// The number after `name` on the command line, else `default`.
pub fn num_arg(name: &str, default: u64) -> u64 {
    arg(name).and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A proxy under test: its name, its h2c and HTTP/1.1 addresses, and its process (none for going
/// direct to the simulator).
pub struct Target {
    pub name: &'static str,
    pub h2: SocketAddr,
    pub h1: SocketAddr,
    pub process: Option<Proc>,
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

/// A process that is killed when dropped.
pub struct Proc {
    pub child: Child,
}

impl Proc {
    pub fn spawn(name: &'static str, cmd: &mut Command) -> Option<Proc> {
        match cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn() {
            Ok(child) => Some(Proc { child }),
            Err(e) => {
                eprintln!("{name}: cannot start: {e}");
                None
            }
        }
    }

    /// User + system CPU seconds of the process and its children processes (nginx workers).
    pub fn cpu_seconds(&self) -> f64 {
        let pid = self.child.id();
        let mut total = proc_cpu(pid);
        if let Ok(entries) = std::fs::read_dir("/proc") {
            for e in entries.flatten() {
                if let Some(p) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok())
                    && parent_of(p) == Some(pid)
                {
                    total += proc_cpu(p);
                }
            }
        }
        total
    }
}

impl Drop for Proc {
    /// Its children first (nginx's workers: killed with their master alone, they lived on, re-parented
    /// to init, two per run), then the process itself.
    fn drop(&mut self) {
        let children = children_of(self.child.id());
        let _ = self.child.kill();
        let _ = self.child.wait();
        for pid in children {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    }
}

/// The processes whose parent is `pid`.
pub fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter(|p| parent_of(*p) == Some(pid))
        .collect()
}

pub fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces; fields after the closing parenthesis are fixed.
    let after = stat.rsplit_once(')')?.1;
    Some(after.split_whitespace().map(str::to_owned).collect())
}

pub fn parent_of(pid: u32) -> Option<u32> {
    stat_fields(pid)?.get(1)?.parse().ok()
}

pub fn proc_cpu(pid: u32) -> f64 {
    let Some(f) = stat_fields(pid) else {
        return 0.0;
    };
    // utime and stime are fields 14 and 15 of stat; here indexed from field 3.
    let ticks: f64 = f.get(11).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    ticks / 100.0
}

/// Socket inodes held open by `pid` and its child processes.
pub fn socket_inodes(pid: u32) -> std::collections::HashSet<String> {
    let mut pids = vec![pid];
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for e in entries.flatten() {
            if let Some(p) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok())
                && parent_of(p) == Some(pid)
            {
                pids.push(p);
            }
        }
    }
    let mut inodes = std::collections::HashSet::new();
    for p in pids {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{p}/fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if let Ok(target) = std::fs::read_link(fd.path())
                && let Some(inode) = target
                    .to_str()
                    .and_then(|t| t.strip_prefix("socket:["))
                    .and_then(|t| t.strip_suffix(']'))
            {
                inodes.insert(inode.to_owned());
            }
        }
    }
    inodes
}

/// Established TCP connections of process `pid` (and its children) to port `port`: a proxy's
/// upstream connections.
pub fn connections_to(port: u16, pid: u32) -> usize {
    let inodes = socket_inodes(pid);
    let mut n = 0;
    for file in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let remote_port = cols
                .get(2)
                .and_then(|r| r.rsplit(':').next())
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            if remote_port == Some(port)
                && cols.get(3) == Some(&"01")
                && cols.get(9).is_some_and(|i| inodes.contains(*i))
            {
                n += 1;
            }
        }
    }
    n
}

pub async fn wait_ready(addr: SocketAddr) -> bool {
    for _ in 0..200 {
        if TcpStream::connect(addr).await.is_ok() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    false
}

pub fn write_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write");
    p
}

pub fn which(bin: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
            .map(|d| d.join(bin))
            .find(|p| p.is_file())
    })
}

/// Starts the simulator with one small ConfigMap, `default/small`, and returns it and its address.
pub async fn start_sim(exe: &str) -> (Proc, SocketAddr) {
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    let sim = Proc::spawn(
        "sim",
        Command::new(exe).args(["sim", "--listen", &addr.to_string()]),
    )
    .expect("sim");
    assert!(wait_ready(addr).await, "the simulator listens");
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let create = http::Request::post("/api/v1/namespaces/default/configmaps")
        .header("host", "sim")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(
            br#"{"metadata":{"name":"small"},"data":{"k":"v"}}"#,
        )))
        .expect("request");
    let created = send.send_request(create).await.expect("create");
    assert_eq!(created.status(), 201);
    (sim, addr)
}

/// Going direct, then skewgate, HAProxy and nginx (the peers when installed), each in front of the
/// simulator at `sim`.
pub async fn start_targets(exe: &str, dir: &Path, sim: SocketAddr) -> Vec<Target> {
    start_targets_with(exe, dir, sim, &[]).await
}

/// `start_targets`, with `extra` arguments to skewgate's `serve`.
pub async fn start_targets_with(
    exe: &str,
    dir: &Path,
    sim: SocketAddr,
    extra: &[&str],
) -> Vec<Target> {
    let mut targets = vec![Target {
        name: "direct",
        h2: sim,
        h1: sim,
        process: None,
    }];
    let routes = write_file(
        dir,
        "routes.yaml",
        &format!(
            "apiVersion: skewgate.io/v1alpha1\nkind: RouteTable\nbackends:\n  - name: sim\n    endpoints: [http://{sim}]\nwrites:\n  default: sim\nreads:\n  default: sim\n"
        ),
    );
    // The load generators keep their connections for the whole run and do not reconnect, as
    // HAProxy and nginx never send them GOAWAY: rebalancing is off here. HAProxy and nginx run
    // without request logs, and so does skewgate (`--no-access-log`); SKEWGATE_ACCESS_LOG=1 keeps it,
    // written to /dev/null, to measure its cost.
    let log = std::env::var("SKEWGATE_ACCESS_LOG").is_ok_and(|v| v == "1");
    let mut args = vec!["--goaway-chance=0"];
    if !log {
        args.push("--no-access-log");
    }
    args.extend_from_slice(extra);
    serve_skewgate(&mut targets, "skewgate", exe, &routes, &args).await;
    // Another build of skewgate beside this one, in the same run (to show a change is no slower):
    // SKEWGATE_BASELINE_BIN=/path/to/skewgate.
    if let Ok(baseline) = std::env::var("SKEWGATE_BASELINE_BIN") {
        // The baseline runs without an access log: builds from before it have none and do not
        // know the flag; with SKEWGATE_ACCESS_LOG=1 and this build as the baseline, the two
        // targets show what the access log costs.
        let knows_flag = std::process::Command::new(&baseline)
            .args(["serve", "--help"])
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("--no-access-log"));
        let args: &[&str] = if knows_flag {
            &["--goaway-chance=0", "--no-access-log"]
        } else {
            &["--goaway-chance=0"]
        };
        serve_skewgate(&mut targets, "baseline", &baseline, &routes, args).await;
    }

    if let Some(haproxy) = which("haproxy") {
        let (port, port1) = (free_port(), free_port());
        let cfg = write_file(
            dir,
            "haproxy.cfg",
            &format!(
                "global\n  nbthread 2\ndefaults\n  mode http\n  timeout connect 5s\n  timeout client 60s\n  timeout server 60s\n  http-reuse always\nfrontend fe\n  bind 127.0.0.1:{port} proto h2\n  bind 127.0.0.1:{port1}\n  default_backend be\nbackend be\n  server sim {sim} proto h2\n"
            ),
        );
        let p = Proc::spawn(
            "haproxy",
            Command::new(haproxy).arg("-db").arg("-f").arg(&cfg),
        );
        push_when_ready(&mut targets, "haproxy", port, port1, p).await;
    } else {
        println!("haproxy: not installed (apt-get install haproxy), left out");
    }
    if let Some(nginx) = which("nginx") {
        let (port, port1) = (free_port(), free_port());
        let cfg = write_file(
            dir,
            "nginx.conf",
            &format!(
                "worker_processes 2;\nerror_log /dev/null crit;\npid {d}/nginx.pid;\ndaemon off;\nevents {{ worker_connections 8192; }}\nhttp {{\n  access_log off;\n  keepalive_requests 10000000;\n  client_body_temp_path {d};\n  proxy_temp_path {d};\n  fastcgi_temp_path {d};\n  uwsgi_temp_path {d};\n  scgi_temp_path {d};\n  upstream sim {{ server {sim}; keepalive 64; }}\n  server {{\n    listen 127.0.0.1:{port} http2;\n    listen 127.0.0.1:{port1};\n    location / {{ proxy_pass http://sim; proxy_http_version 1.1; proxy_set_header Connection \"\"; proxy_buffering off; proxy_read_timeout 1h; }}\n  }}\n}}\n",
                d = dir.display()
            ),
        );
        let p = Proc::spawn(
            "nginx",
            Command::new(nginx)
                .arg("-c")
                .arg(&cfg)
                .arg("-e")
                .arg("/dev/null"),
        );
        push_when_ready(&mut targets, "nginx", port, port1, p).await;
    } else {
        println!("nginx: not installed (apt-get install nginx-light), left out");
    }
    targets
}

/// `exe serve` with `routes` and `extra` arguments, as target `name`.
async fn serve_skewgate(
    targets: &mut Vec<Target>,
    name: &'static str,
    exe: &str,
    routes: &Path,
    extra: &[&str],
) {
    let port = free_port();
    let admin = format!("127.0.0.1:{}", free_port());
    let listen = format!("127.0.0.1:{port}");
    let p = Proc::spawn(
        name,
        Command::new(exe)
            .args(["serve", "--routes"])
            .arg(routes)
            .args(["--listen", &listen, "--admin-listen", &admin])
            .args(extra),
    );
    push_when_ready(targets, name, port, port, p).await;
}

async fn push_when_ready(
    targets: &mut Vec<Target>,
    name: &'static str,
    h2: u16,
    h1: u16,
    process: Option<Proc>,
) {
    let h2: SocketAddr = format!("127.0.0.1:{h2}").parse().expect("addr");
    let h1: SocketAddr = format!("127.0.0.1:{h1}").parse().expect("addr");
    if process.is_some() && wait_ready(h2).await {
        targets.push(Target {
            name,
            h2,
            h1,
            process,
        });
    }
}

/// Resident memory of a process and its children, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    let one = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("VmRSS:"))
                    .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            })
            .unwrap_or(0)
    };
    let mut total = one(pid);
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for e in entries.flatten() {
            if let Some(p) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok())
                && parent_of(p) == Some(pid)
            {
                total += one(p);
            }
        }
    }
    total
}

/// Gives the processes a moment after the last request before they are measured.
pub async fn settle() {
    tokio::time::sleep(Duration::from_millis(500)).await;
}
