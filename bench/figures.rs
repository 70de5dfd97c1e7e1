//! The figures a bench run writes for bench/README.md when given `--figures DIR`: its printed
//! tables as `NAME.txt`, and a plot of its own figures as `NAME.svg`.
//!
//! The SVG is drawn here rather than with a plotting crate: plotters, the maintained one, lays out
//! text from a TrueType font it loads at run time (font-kit or a font file given to ab_glyph),
//! which a bench on a bare machine has no business needing; bars, lines and labels in SVG are a
//! few lines each, and the browser or GitHub draws the text.

#![allow(dead_code)]

use std::fmt::Write as _;
use std::path::PathBuf;

/// One measured figure: a scenario, a target, and what it did there.
pub struct Row {
    pub scenario: &'static str,
    pub target: &'static str,
    pub rps: f64,
    /// Requests/s as a ratio to going direct in the same scenario.
    pub ratio: f64,
    pub cpu_us: Option<f64>,
}

const COLOURS: [(&str, &str); 8] = [
    ("direct", "#7f7f7f"),
    ("skewgate", "#1f77b4"),
    ("haproxy", "#ff7f0e"),
    ("nginx", "#2ca02c"),
    ("baseline", "#9467bd"),
    ("floor", "#bcbd22"),
    ("bare", "#17becf"),
    ("bare+frames", "#e377c2"),
];

fn colour(target: &str) -> &'static str {
    COLOURS
        .iter()
        .find(|(t, _)| *t == target)
        .map_or("#8c564b", |(_, c)| c)
}

/// Where `--figures DIR` asks the figures to go, if it does.
pub fn dir() -> Option<PathBuf> {
    super::targets::arg("--figures").map(PathBuf::from)
}

/// A chart's title, at its top left corner `(x, y)`.
fn heading(title: &str, x: f64, y: f64) -> String {
    format!(
        "<text x=\"{x}\" y=\"{}\" font-size=\"15\" font-weight=\"bold\">{}</text>\n",
        y + 16.0,
        escape(title)
    )
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Grouped horizontal bars: for each group (a scenario), one bar per target, at `(x, y)`, `w` wide;
/// returns the SVG and its height.
pub fn bars(
    title: &str,
    unit: &str,
    groups: &[(&str, Vec<(&str, f64)>)],
    (x, y, w): (f64, f64, f64),
) -> (String, f64) {
    let max = groups
        .iter()
        .flat_map(|(_, b)| b.iter().map(|(_, v)| *v))
        .fold(0.0_f64, f64::max)
        .max(1e-9);
    let (label_w, bar_h, gap) = (200.0, 16.0, 14.0);
    let plot_w = w - label_w - 70.0;
    let mut svg = heading(title, x, y);
    let mut cy = y + 32.0;
    for (group, bars) in groups {
        let _ = writeln!(
            svg,
            r#"<text x="{x}" y="{}" font-size="13" font-style="italic">{}</text>"#,
            cy + 12.0,
            escape(group)
        );
        cy += 18.0;
        for (target, v) in bars {
            let len = plot_w * v / max;
            let _ = writeln!(
                svg,
                r#"<text x="{}" y="{}" font-size="12" text-anchor="end">{}</text><rect x="{}" y="{cy}" width="{len:.1}" height="{bar_h}" fill="{}"/><text x="{}" y="{}" font-size="12">{} {}</text>"#,
                x + label_w - 6.0,
                cy + 12.0,
                escape(target),
                x + label_w,
                colour(target),
                x + label_w + len + 4.0,
                cy + 12.0,
                format_value(*v),
                escape(unit)
            );
            cy += bar_h + 3.0;
        }
        cy += gap;
    }
    (svg, cy - y)
}

/// Lines through points, one series per target, with both axes from 0, at `(x, y)`, `w` × `h`.
pub fn lines(
    title: &str,
    (x_label, y_label): (&str, &str),
    series: &[(&str, Vec<(f64, f64)>)],
    (x, y, w, h): (f64, f64, f64, f64),
) -> String {
    let points = series.iter().flat_map(|(_, p)| p.iter());
    let (max_x, max_y) = points.fold((1e-9_f64, 1e-9_f64), |(a, b), (px, py)| {
        (a.max(*px), b.max(*py))
    });
    let (left, top, bottom) = (x + 70.0, y + 30.0, y + h - 40.0);
    let right = x + w - 130.0;
    let sx = |v: f64| left + (right - left) * v / max_x;
    let sy = |v: f64| bottom - (bottom - top) * v / max_y;
    let mut svg = heading(title, x, y);
    let _ = writeln!(
        svg,
        r#"<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="black"/><line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" stroke="black"/>"#
    );
    for i in 0..=4 {
        let (vx, vy) = (max_x * f64::from(i) / 4.0, max_y * f64::from(i) / 4.0);
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" font-size="11" text-anchor="middle">{}</text>"#,
            sx(vx),
            bottom + 15.0,
            format_value(vx)
        );
        let _ = writeln!(
            svg,
            r##"<text x="{}" y="{}" font-size="11" text-anchor="end">{}</text><line x1="{left}" y1="{}" x2="{right}" y2="{}" stroke="#ddd"/>"##,
            left - 5.0,
            sy(vy) + 4.0,
            format_value(vy),
            sy(vy),
            sy(vy)
        );
    }
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" font-size="12" text-anchor="middle">{}</text>"#,
        (left + right) / 2.0,
        bottom + 32.0,
        escape(x_label)
    );
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" font-size="12" transform="rotate(-90 {} {})" text-anchor="middle">{}</text>"#,
        x + 14.0,
        (top + bottom) / 2.0,
        x + 14.0,
        (top + bottom) / 2.0,
        escape(y_label)
    );
    for (i, (target, pts)) in series.iter().enumerate() {
        let path: Vec<String> = pts
            .iter()
            .map(|(px, py)| format!("{:.1},{:.1}", sx(*px), sy(*py)))
            .collect();
        let c = colour(target);
        let _ = writeln!(
            svg,
            r#"<polyline points="{}" fill="none" stroke="{c}" stroke-width="2"/>"#,
            path.join(" ")
        );
        for (px, py) in pts {
            let _ = writeln!(
                svg,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{c}"/>"#,
                sx(*px),
                sy(*py)
            );
        }
        let ly = top + 18.0 * i as f64;
        let _ = writeln!(
            svg,
            r#"<rect x="{}" y="{}" width="12" height="12" fill="{c}"/><text x="{}" y="{}" font-size="12">{}</text>"#,
            right + 12.0,
            ly,
            right + 28.0,
            ly + 10.0,
            escape(target)
        );
    }
    svg
}

fn format_value(v: f64) -> String {
    if v >= 100.0 || v == v.trunc() {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// A whole SVG document of `w` × `h` around `body`.
pub fn document(w: f64, h: f64, body: &str) -> String {
    format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif"><rect width="100%" height="100%" fill="white"/>{body}</svg>
"#
    )
}

/// Writes `NAME.txt` (the printed tables) and `NAME.svg` under `--figures DIR`, if given.
pub fn write(name: &str, text: &str, svg: &str) {
    let Some(dir) = dir() else { return };
    let _ = std::fs::create_dir_all(&dir);
    for (file, content) in [(format!("{name}.txt"), text), (format!("{name}.svg"), svg)] {
        let path = dir.join(file);
        match std::fs::write(&path, content) {
            Ok(()) => eprintln!("wrote {}", path.display()),
            Err(e) => eprintln!("cannot write {}: {e}", path.display()),
        }
    }
}

/// The load bench's plot: requests/s × direct and CPU per request, per scenario and target.
pub fn write_load(text: &str, rows: &[Row]) {
    let mut scenarios: Vec<&str> = Vec::new();
    for r in rows {
        if !scenarios.contains(&r.scenario) && r.scenario != "tls handshake" {
            scenarios.push(r.scenario);
        }
    }
    let group = |f: &dyn Fn(&Row) -> Option<f64>| -> Vec<(&str, Vec<(&str, f64)>)> {
        scenarios
            .iter()
            .map(|s| {
                let bars = rows
                    .iter()
                    .filter(|r| r.scenario == *s)
                    .filter_map(|r| f(r).map(|v| (r.target, v)))
                    .collect();
                (*s, bars)
            })
            .collect()
    };
    let w = 560.0;
    let (rate, h1) = bars(
        "requests/s × direct (higher is better)",
        "×",
        &group(&|r| Some(r.ratio)),
        (10.0, 10.0, w),
    );
    let (cpu, h2) = bars(
        "proxy CPU per request (lower is better)",
        "µs",
        &group(&|r| r.cpu_us),
        (w + 20.0, 10.0, w),
    );
    let handshake: Vec<(&str, f64)> = rows
        .iter()
        .filter(|r| r.scenario == "tls handshake")
        .filter_map(|r| r.cpu_us.map(|c| (r.target, c)))
        .collect();
    let top = h1.max(h2) + 20.0;
    let (tls, h3) = if handshake.is_empty() {
        (String::new(), 0.0)
    } else {
        bars(
            "proxy CPU per new TLS connection (handshake + one GET)",
            "µs",
            &[("full handshake, client certificate", handshake)],
            (10.0, top, w),
        )
    };
    let body = format!("{rate}{cpu}{tls}");
    write(
        "load",
        text,
        &document(2.0 * w + 30.0, top + h3 + 10.0, &body),
    );
}
