//! bench/kubelets.rs's figures: a table on stdout, and an SVG of each path's apiserver cost
//! relative to going straight to it.

use std::fmt::Write;

/// One phase's figures.
pub struct Figures {
    pub name: &'static str,
    pub kubelets: usize,
    pub rss_mib: f64,
    pub cpu_per_min: f64,
    pub goroutines: f64,
    /// The watches the apiserver serves at the end of the steady window.
    pub watches: f64,
    /// SubjectAccessReviews the apiserver answered a second over the steady window.
    pub reviews_per_s: f64,
    pub connections: usize,
    pub proxy_rss_mib: f64,
    /// The proxy's RSS before the kubelets came.
    pub proxy_idle_mib: f64,
    pub proxy_cpu_per_min: f64,
    pub lease: (f64, f64),
    pub delivery: (f64, f64),
    /// The deliveries, parted: the create's answer, and the event after it.
    pub delivery_parts: DeliveryParts,
    pub failed: u64,
    /// Seconds until every watch streamed again after the proxy's restart; the most lists in 1 s.
    pub proxy_restart: Option<(f64, usize)>,
    /// After the apiserver's restart: seconds until ready, until every watch streamed, the most
    /// lists in 1 s, its connections then.
    pub api_restart: Option<(f64, f64, usize, usize)>,
    pub dials: u64,
    pub refused: u64,
}

/// Where a delivery's time goes (p50, p99 in ms): the create until answered, and from its answer
/// to the kubelet's watch event.
#[derive(Default)]
pub struct DeliveryParts {
    pub samples: usize,
    pub created: (f64, f64),
    pub after: (f64, f64),
}

impl Figures {
    pub fn new(name: &'static str, kubelets: usize) -> Figures {
        Figures {
            name,
            kubelets,
            rss_mib: f64::NAN,
            cpu_per_min: f64::NAN,
            goroutines: f64::NAN,
            watches: f64::NAN,
            reviews_per_s: f64::NAN,
            connections: 0,
            proxy_rss_mib: 0.0,
            proxy_idle_mib: 0.0,
            proxy_cpu_per_min: 0.0,
            lease: (f64::NAN, f64::NAN),
            delivery: (f64::NAN, f64::NAN),
            delivery_parts: DeliveryParts::default(),
            failed: 0,
            proxy_restart: None,
            api_restart: None,
            dials: 0,
            refused: 0,
        }
    }
}

pub fn print(all: &[Figures]) {
    for f in all {
        let d = &f.delivery_parts;
        println!(
            "  {}: {} deliveries; create answered p50/p99 {:.1}/{:.1} ms; event after the answer p50/p99 {:.1}/{:.1} ms; apiserver watches {:.0}, SubjectAccessReviews {:.1}/s",
            f.name,
            d.samples,
            d.created.0,
            d.created.1,
            d.after.0,
            d.after.1,
            f.watches,
            f.reviews_per_s
        );
    }
    println!(
        "\n  {:<11} {:>8} {:>8} {:>10} {:>10} {:>6} {:>9} {:>10} {:>8} {:>13} {:>13} {:>6}",
        "path",
        "kubelets",
        "api MiB",
        "api cpu/m",
        "goroutines",
        "conns",
        "proxy MiB",
        "proxy cpu/m",
        "KiB/klt",
        "lease p50/p99",
        "watch p50/p99",
        "failed"
    );
    for f in all {
        println!(
            "  {:<11} {:>8} {:>8.0} {:>9.1}s {:>10.0} {:>6} {:>9.0} {:>9.1}s {:>8.0} {:>6.1}/{:<6.1} {:>6.1}/{:<6.1} {:>6}",
            f.name,
            f.kubelets,
            f.rss_mib,
            f.cpu_per_min,
            f.goroutines,
            f.connections,
            f.proxy_rss_mib,
            f.proxy_cpu_per_min,
            (f.proxy_rss_mib - f.proxy_idle_mib) * 1024.0 / f.kubelets as f64,
            f.lease.0,
            f.lease.1,
            f.delivery.0,
            f.delivery.1,
            f.failed
        );
    }
    println!(
        "\n  {:<11} {:>8} {:>22} {:>36} {:>8} {:>8}",
        "path",
        "kubelets",
        "proxy restart: all/peak",
        "apiserver restart: ready/all/peak/conns",
        "dials",
        "429+5xx"
    );
    for f in all {
        let proxy = f
            .proxy_restart
            .map_or("-".into(), |(s, p)| format!("{s:.1}s / {p}/s"));
        let api = f.api_restart.map_or("-".into(), |(r, s, p, c)| {
            format!("{r:.1}s / {s:.1}s / {p}/s / {c}")
        });
        println!(
            "  {:<11} {:>8} {:>22} {:>36} {:>8} {:>8}",
            f.name, f.kubelets, proxy, api, f.dials, f.refused
        );
    }
    println!(
        "\n  api: the real kube-apiserver (RSS at the end of the steady window, CPU over it, go_goroutines, accepted connections); KiB/klt: the proxy's RSS per kubelet (what it grew by from before the kubelets came); lease: renewal latency in ms; watch: ms from a pod's creation to its kubelet's watch event; restart: seconds from the kill until every watch streams again, the most lists the kubelets sent in one second, the apiserver's connections after"
    );
}

/// One measure of a phase: its label, and how to read it.
type Measure = (&'static str, fn(&Figures) -> f64);

/// What the plot shows of a phase, relative to direct's.
const MEASURES: [Measure; 5] = [
    ("apiserver memory", |f| f.rss_mib),
    ("apiserver CPU", |f| f.cpu_per_min),
    ("goroutines", |f| f.goroutines),
    ("connections", |f| f.connections as f64),
    ("apiserver + proxy CPU", |f| {
        f.cpu_per_min + f.proxy_cpu_per_min
    }),
];

const FILLS: [&str; 4] = ["#888", "#1f6feb", "#d29922", "#8957e5"];

/// The plot's geometry: its width, and each panel's height.
const WIDTH: f64 = 820.0;
const PANEL: f64 = 260.0;

/// Bars per path and measure, each as a percentage of going direct, one panel per fleet size.
pub fn svg(all: &[Figures]) -> String {
    let mut sizes: Vec<usize> = all.iter().map(|f| f.kubelets).collect();
    sizes.dedup();
    let mut names: Vec<&str> = all.iter().map(|f| f.name).collect();
    names.sort_by_key(|n| crate::procs::PHASES.iter().position(|p| p == n));
    names.dedup();
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{}" font-family="sans-serif" font-size="11">"#,
        PANEL * sizes.len() as f64 + 30.0
    );
    for (i, name) in names.iter().enumerate() {
        let x = 20.0 + i as f64 * 150.0;
        let _ = write!(
            s,
            r#"<rect x="{x}" y="6" width="12" height="12" fill="{}"/><text x="{}" y="16">{name}</text>"#,
            FILLS[i % 4],
            x + 16.0
        );
    }
    for (p, n) in sizes.iter().enumerate() {
        let phases: Vec<&Figures> = all.iter().filter(|f| f.kubelets == *n).collect();
        panel(&mut s, 30.0 + p as f64 * PANEL, *n, &phases, &names);
    }
    s.push_str("</svg>\n");
    s
}

/// One fleet size's panel, from `top` down.
fn panel(s: &mut String, top: f64, n: usize, phases: &[&Figures], names: &[&str]) {
    let base = top + PANEL - 40.0;
    let scale = (PANEL - 70.0) / 125.0;
    let _ = write!(
        s,
        r##"<text x="10" y="{}" font-weight="bold">{n} kubelets: the apiserver's cost through each path, % of direct</text><line x1="10" y1="{base}" x2="{}" y2="{base}" stroke="black"/><line x1="10" y1="{y}" x2="{}" y2="{y}" stroke="#bbb" stroke-dasharray="4"/>"##,
        top + 14.0,
        WIDTH - 10.0,
        WIDTH - 10.0,
        y = base - 100.0 * scale
    );
    let Some(direct) = phases.iter().find(|f| f.name == "direct") else {
        return;
    };
    for (m, (label, get)) in MEASURES.iter().enumerate() {
        let gx = 20.0 + m as f64 * 160.0;
        let _ = write!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{label}</text>"#,
            gx + 70.0,
            base + 16.0
        );
        for f in phases {
            let Some(i) = names.iter().position(|x| *x == f.name) else {
                continue;
            };
            let pct = 100.0 * get(f) / get(direct);
            if !pct.is_finite() {
                continue;
            }
            let h = pct.min(125.0) * scale;
            let x = gx + i as f64 * 36.0;
            let _ = write!(
                s,
                r#"<rect x="{x}" y="{}" width="30" height="{h}" fill="{}"><title>{}: {pct:.1} %</title></rect><text x="{}" y="{}" text-anchor="middle">{pct:.0}</text>"#,
                base - h,
                FILLS[i % 4],
                f.name,
                x + 15.0,
                base - h - 3.0
            );
        }
    }
}
