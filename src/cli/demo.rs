//! `skewgate demo`: simulated apiservers of two versions sharing one store, skewgate in front with
//! routes/demo.yaml, a kubeconfig, and commands to try.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};

use skewgate::app::{ServeOptions, Server};
use skewgate::config;
use skewgate::edge::EdgeSettings;
use skewgate::proxy::ProxySettings;
use skewgate_sim::{self as sim, SimConfig, Store};

use super::DemoArgs;
use super::serve::{Signals, runtime};

const DEMO_ROUTES: &str = include_str!("../../routes/demo.yaml");

const MANIFEST: &str = "\
apiVersion: v1
kind: Namespace
metadata:
  name: team-a
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: team-a
data:
  color: green
# Known from 1.30 (the simulators' schema): 1.29 drops it on every write.
policy: keep-on-upgrade
";

/// A namespace outside team-a, which reads from 1.30 by the demo's rollout (50 %, sticky by
/// namespace) and writes through 1.29.
const MANIFEST_NS7: &str = "\
apiVersion: v1
kind: Namespace
metadata:
  name: ns-7
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: ns-7
data:
  color: green
policy: keep-on-upgrade
";

/// Runs the demo until Ctrl-C.
pub fn run(args: DemoArgs) -> Result<ExitCode> {
    let _log = super::logging::init(&args.log);
    let dir = TempDir::create()?;
    let dir = dir.path();
    let (routes, table) = write_routes(dir, &args)?;
    let kubeconfig = dir.join("kubeconfig");
    let manifest = dir.join("team-a.yaml");
    std::fs::write(&manifest, MANIFEST)?;
    let manifest_ns = dir.join("ns-7.yaml");
    std::fs::write(&manifest_ns, MANIFEST_NS7)?;
    std::fs::write(&kubeconfig, kubeconfig_text(args.listen))?;

    runtime()?.block_on(async move {
        let signals = Signals::listen();
        let sims = start_sims(&table).await?;
        let server = Server::start(ServeOptions {
            routes: routes.clone(),
            listen: args.listen,
            admin_listen: args.admin_listen,
            reload_poll: Duration::from_secs(2),
            settings: ProxySettings {
                access_log: args.log.access_log(),
                ..ProxySettings::default()
            },
            edge: EdgeSettings {
                shutdown_grace: Duration::from_secs(2),
                ..EdgeSettings::default()
            },
        })
        .await
        .with_context(|| {
            format!(
                "cannot serve on {} and {} (admin) (is another demo running? --listen and --admin-listen move them)",
                args.listen, args.admin_listen
            )
        })?;
        print_guide(&server, &routes, &kubeconfig, &manifest);
        signals.wait().await;
        server.shutdown().await;
        drop(sims);
        Ok(ExitCode::SUCCESS)
    })
}

/// The demo's route file in `dir` (`--routes`, or the built-in one, with `--sim-ports`' ports), and
/// its table.
fn write_routes(dir: &Path, args: &DemoArgs) -> Result<(PathBuf, config::RouteTable)> {
    let routes = dir.join("routes.yaml");
    let text = match &args.routes {
        Some(p) => {
            std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?
        }
        None => DEMO_ROUTES.to_owned(),
    };
    std::fs::write(&routes, &text)?;
    let table = config::load_file(&routes).map_err(|e| anyhow!("{e}"))?;
    if args.sim_ports.is_empty() {
        return Ok((routes, table));
    }
    std::fs::write(&routes, moved_ports(&text, &table, &args.sim_ports)?)?;
    let table = config::load_file(&routes).map_err(|e| anyhow!("{e}"))?;
    Ok((routes, table))
}

/// A simulated apiserver of each backend's version on each of its endpoints, all over one store.
async fn start_sims(table: &config::RouteTable) -> Result<Vec<sim::SimHandle>> {
    let store = Store::new();
    let mut sims = Vec::new();
    for backend in &table.backends {
        let (major, minor) = backend.version.unwrap_or((1, 30));
        for ep in &backend.endpoints {
            if ep.tls {
                bail!(
                    "the demo simulates http:// endpoints only; {} is https",
                    ep.url
                );
            }
            let addr: SocketAddr = format!("{}:{}", ep.host, ep.port)
                .parse()
                .with_context(|| format!("{}: the demo needs an IP address", ep.url))?;
            let git = format!("v{major}.{minor}.0");
            let handle = sim::start(SimConfig::new(&git), store.clone(), addr)
                .await
                .with_context(|| {
                    format!("cannot start the simulated {git} apiserver on {addr} (is another demo running? --sim-ports moves the simulators)")
                })?;
            println!(
                "simulated apiserver {git:<8} for backend {:<8} on {}",
                backend.name,
                handle.url()
            );
            sims.push(handle);
        }
    }
    Ok(sims)
}

/// `text` with the port of each http:// endpoint of `table`, in order, replaced by `ports`'.
fn moved_ports(text: &str, table: &config::RouteTable, ports: &[u16]) -> Result<String> {
    let endpoints: Vec<_> = table
        .backends
        .iter()
        .flat_map(|b| b.endpoints.iter())
        .collect();
    if endpoints.len() != ports.len() {
        bail!(
            "--sim-ports gives {} ports for {} endpoints ({})",
            ports.len(),
            endpoints.len(),
            endpoints
                .iter()
                .map(|e| e.url.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let mut text = text.to_owned();
    for (ep, port) in endpoints.iter().zip(ports) {
        let moved = format!("http://{}:{port}", ep.host);
        text = text.replacen(&ep.url, &moved, 1);
    }
    Ok(text)
}

fn kubeconfig_text(listen: SocketAddr) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: skewgate-demo
  cluster:
    server: http://{listen}
users:
- name: demo
  user: {{}}
contexts:
- name: skewgate-demo
  context:
    cluster: skewgate-demo
    user: demo
current-context: skewgate-demo
"
    )
}

fn print_guide(server: &Server, routes: &Path, kubeconfig: &Path, manifest: &Path) {
    let k = format!("kubectl --kubeconfig {}", kubeconfig.display());
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("skewgate"));
    println!(
        "
skewgate is listening on http://{addr} (admin on http://{admin}).
Open http://{admin}/ in a browser: the live status page (backends, pins, rollouts, guards, and the
errors skewgate answered itself).
These apiservers are simulators (a test fixture, not a real kube-apiserver); see docs/operating.md (The simulator).

kubeconfig: {kc}

Try, in another terminal:

  {k} get namespaces
  {k} apply --validate=false -f {manifest}   # the simulators serve no OpenAPI v2 for kubectl's client-side validation
  {k} patch configmap settings -n team-a --type merge -p '{{\"data\":{{\"color\":\"blue\"}}}}'
  {k} get configmaps -A -w
  {k} get configmaps -n team-a -w             # ends when the team-a pin moves (edit the routes below):
                                              # a watch keeps a cache of the version that served it, so
                                              # skewgate ends it: kubectl exits (run it again: it reads the
                                              # new version); an informer lists again from the new one
  {k} get --raw /version                      # /version is in no namespace: reads.default (1.29) answers
  {k} api-resources | grep widgets            # discovery merged across versions: widgets only 1.30 serves
  {k} get widgets -A                          # sent to 1.30, the one version that serves it
  curl -s http://{admin}/debug/routes           # the live route table
  curl -s http://{admin}/metrics | grep skewgate_requests_total
  {exe} explain --routes {routes} PATCH /api/v1/namespaces/team-a/configmaps/settings
  {exe} skew --routes {routes}      # what differs between 1.29 and 1.30, and the pins that follow

The guard old-kubectl (in {routes}): a full update from a 1.29 kubectl would drop the
configmap's 1.30 field `policy`, so it is refused with 422. The same from a 1.30 kubectl is sent as
it is: a client as new as 1.30 means what it sends, so this body, without `policy` (and without the
last-applied annotation `apply` left), removes both from the stored configmap:

  curl -s -X PUT -H 'User-Agent: kubectl/v1.29.4' -H 'Content-Type: application/json' -d '{{\"metadata\":{{\"name\":\"settings\",\"namespace\":\"team-a\"}},\"data\":{{\"color\":\"red\"}}}}' http://{addr}/api/v1/namespaces/team-a/configmaps/settings
  curl -s -X PUT -H 'User-Agent: kubectl/v1.30.1' -H 'Content-Type: application/json' -d '{{\"metadata\":{{\"name\":\"settings\",\"namespace\":\"team-a\"}},\"data\":{{\"color\":\"red\"}}}}' http://{addr}/api/v1/namespaces/team-a/configmaps/settings

The guard read-elsewhere: half the other namespaces read from 1.30 and write through 1.29, which
cannot store `policy`; replacing such an object there is refused with 422, naming the field:

  {k} apply --validate=false -f {manifest_ns}
  {k} get configmap settings -n ns-7 -o json | {k} replace --validate=false -f -

Edit {routes} while this runs (move the team-a pin to v1-29, say): skewgate reloads it.
Each request is logged on stderr as it ends (--no-access-log turns that off).
Ctrl-C stops the demo and removes {dir}.",
        dir = routes.parent().unwrap_or(routes).display(),
        addr = server.addr,
        admin = server.admin_addr,
        kc = kubeconfig.display(),
        manifest = manifest.display(),
        manifest_ns = manifest.with_file_name("ns-7.yaml").display(),
        exe = exe.display(),
        routes = routes.display(),
    );
}

/// The demo's working directory, removed when the demo ends (or fails to start).
struct TempDir(PathBuf);

impl TempDir {
    fn create() -> Result<TempDir> {
        let dir = std::env::temp_dir().join(format!("skewgate-demo-{}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(TempDir(dir))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
