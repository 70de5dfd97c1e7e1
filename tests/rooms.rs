//! The rooms' imports against docs/design.md's "may depend on" table, so that the picture cannot
//! drift from the code: every arrow from one room to another is in the table, every arrow in the
//! table is in the code, the rooms form no circle, and no two modules of one room name each other.
//!
//! An arrow is a path the production code names (`crate::room::..`, `super::..`), in `use` or
//! inline; test modules (`tests.rs`, `*_tests.rs`, an inline `#[cfg(test)] mod tests`) and
//! comments are left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The table's rows as design.md writes them, and the code's arrows.
fn both() -> (BTreeMap<String, BTreeSet<String>>, Arrows) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let design = std::fs::read_to_string(root.join("docs/design.md")).expect("docs/design.md");
    (table_of(&design), arrows_of(&root.join("src")))
}

#[test]
fn every_arrow_between_rooms_is_in_the_design_table() {
    let (table, arrows) = both();
    let mut missing = Vec::new();
    for (from, tos) in &arrows.rooms {
        let Some(allowed) = table.get(from) else {
            missing.push(format!("room `{from}` has no row in the table"));
            continue;
        };
        for (to, at) in tos {
            if !allowed.contains(to) {
                missing.push(format!("{from} → {to} (first at {at})"));
            }
        }
    }
    let all: Vec<String> = arrows
        .rooms
        .iter()
        .map(|(from, tos)| {
            format!(
                "{from} → {}",
                tos.keys().cloned().collect::<Vec<_>>().join(", ")
            )
        })
        .collect();
    assert!(
        missing.is_empty(),
        "arrows the code has and docs/design.md's table does not:\n  {}\nall arrows:\n  {}",
        missing.join("\n  "),
        all.join("\n  ")
    );
}

#[test]
fn every_arrow_in_the_design_table_is_in_the_code() {
    let (table, arrows) = both();
    let mut stale = Vec::new();
    for (from, tos) in &table {
        for to in tos {
            if !arrows.rooms.get(from).is_some_and(|t| t.contains_key(to)) {
                stale.push(format!("{from} → {to}"));
            }
        }
    }
    assert!(
        stale.is_empty(),
        "arrows docs/design.md's table allows and no code uses (strike them):\n  {}",
        stale.join("\n  ")
    );
}

/// The edge hands requests to the pipeline through one entry and the traits it implements, and
/// names nothing else of it: the pipeline's phases can change without the wire's code.
#[test]
fn the_edge_reaches_the_pipeline_only_through_its_entry() {
    let (_, arrows) = both();
    let named = &arrows.through[&("edge".to_string(), "proxy".to_string())];
    let others: Vec<&String> = named
        .iter()
        .filter(|m| !["entry", "wire"].contains(&m.as_str()))
        .collect();
    assert!(
        others.is_empty(),
        "the edge names proxy's {others:?}: give it what it needs through `proxy::entry`"
    );
}

#[test]
fn the_rooms_form_no_circle() {
    let (_, arrows) = both();
    let edges: BTreeMap<String, BTreeSet<String>> = arrows
        .rooms
        .iter()
        .map(|(from, tos)| (from.clone(), tos.keys().cloned().collect()))
        .collect();
    let circles = circles(&edges);
    assert!(circles.is_empty(), "rooms in a circle: {circles:?}");
}

#[test]
fn no_two_modules_of_a_room_name_each_other() {
    let (_, arrows) = both();
    let mut found = Vec::new();
    for (room, modules) in &arrows.inside {
        let edges: BTreeMap<String, BTreeSet<String>> = modules
            .iter()
            .map(|(from, tos)| (from.clone(), tos.keys().cloned().collect()))
            .collect();
        for circle in circles(&edges) {
            let at: Vec<String> = circle
                .iter()
                .zip(circle.iter().cycle().skip(1))
                .map(|(a, b)| format!("{a} → {b} at {}", modules[a][b]))
                .collect();
            found.push(format!("{room}: {}", at.join("; ")));
        }
    }
    assert!(
        found.is_empty(),
        "modules of one room in a circle:\n  {}",
        found.join("\n  ")
    );
}

/// Where the code's paths point, each with the first file that names it.
#[derive(Default)]
struct Arrows {
    /// room → room.
    rooms: BTreeMap<String, BTreeMap<String, String>>,
    /// (room, room) → the modules of the second the first names (`proxy::entry`).
    through: BTreeMap<(String, String), BTreeSet<String>>,
    /// room → (module → module) inside it; a module is the room's child (`upstream::pool`,
    /// `upstream::frames`), the room's own `mod.rs` left out.
    inside: BTreeMap<String, BTreeMap<String, BTreeMap<String, String>>>,
}

/// What design.md's rooms table allows: each row's room and the rooms named in its last column.
fn table_of(design: &str) -> BTreeMap<String, BTreeSet<String>> {
    let start = design
        .find("| room | its job | may depend on |")
        .expect("design.md has the rooms table");
    let rows: Vec<(String, String)> = design[start..]
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split(" | ").collect();
            let room = cells.first()?.trim().trim_matches('`').to_string();
            Some((room, cells.last()?.to_string()))
        })
        .collect();
    let rooms: BTreeSet<String> = rows.iter().map(|(r, _)| r.clone()).collect();
    rows.into_iter()
        .map(|(room, last)| {
            let named = last
                .split('`')
                .skip(1)
                .step_by(2)
                .filter(|n| rooms.contains(*n) && **n != room)
                .map(str::to_string)
                .collect();
            (room, named)
        })
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src/ is readable").flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A file's module path: `src/upstream/pool.rs` is `[upstream, pool]`, `src/upstream/mod.rs`
/// `[upstream]`, `src/keys.rs` `[keys]`; `lib.rs` and `main.rs` are the crate's root.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("under src/");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    if parts.len() == 1 && (parts[0] == "lib" || parts[0] == "main") {
        parts.clear();
    }
    parts
}

fn is_test_only(file: &Path) -> bool {
    let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name == "tests.rs" || name.ends_with("_tests.rs")
}

/// The production code of a file: comments dropped, and its inline test module cut off.
fn production(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]")
            && lines
                .peek()
                .is_some_and(|n| n.trim_start().starts_with("mod "))
        {
            let next = lines.peek().map(|n| n.trim()).unwrap_or("");
            if next.ends_with('{') {
                break;
            }
        }
        if t.starts_with("//") {
            continue;
        }
        out.push_str(line.split(" // ").next().unwrap_or(line));
        out.push('\n');
    }
    out
}

/// Every path the text names from `prefix` (`crate::` or `super::`), braces expanded, each as its
/// segments after the prefix.
fn paths_after(text: &str, prefix: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut from = 0;
    while let Some(i) = text[from..].find(prefix) {
        let at = from + i;
        from = at + prefix.len();
        if at > 0
            && (bytes[at - 1].is_ascii_alphanumeric()
                || bytes[at - 1] == b'_'
                || bytes[at - 1] == b':')
        {
            continue;
        }
        let (paths, _) = tree(text, from, Vec::new());
        out.extend(paths);
    }
    out
}

/// A use tree at `i`: a path of segments, then maybe `{ tree, tree }`.
fn tree(text: &str, mut i: usize, mut base: Vec<String>) -> (Vec<Vec<String>>, usize) {
    let bytes = text.as_bytes();
    loop {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if i < bytes.len() && bytes[i] == b'{' {
            let mut out = Vec::new();
            i += 1;
            loop {
                while i < bytes.len() && (bytes[i].is_ascii_whitespace() || bytes[i] == b',') {
                    i += 1;
                }
                if i >= bytes.len() || bytes[i] == b'}' {
                    return (out, i + 1);
                }
                let (paths, next) = tree(text, i, base.clone());
                out.extend(paths);
                i = next;
            }
        }
        let start = i;
        while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
            i += 1;
        }
        if i > start && &text[start..i] != "self" {
            base.push(text[start..i].to_string());
        }
        if text[i..].starts_with("::") {
            i += 2;
            continue;
        }
        // An `as` rename or the end of the path: skip to the end of this item.
        while i < bytes.len() && !matches!(bytes[i], b',' | b'}' | b';' | b'{') {
            if !(bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_' || bytes[i] == b' ') {
                break;
            }
            i += 1;
        }
        return (vec![base], i);
    }
}

fn arrows_of(src: &Path) -> Arrows {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut arrows = Arrows::default();
    for file in files.iter().filter(|f| !is_test_only(f)) {
        let module = module_of(src, file);
        // The crate's root declares rooms; the binary's `cli` names the library as `skewgate::`.
        let Some(room) = module.first().filter(|r| *r != "cli").cloned() else {
            continue;
        };
        let text = production(&std::fs::read_to_string(file).expect("a readable source file"));
        let shown = file.strip_prefix(src).unwrap_or(file).display().to_string();
        for path in named_from(&module, &text) {
            arrows.add(src, (&room, &module), &path, &shown);
        }
    }
    // What only tests and fuzzing name (`fuzz_io`) is no room's dependency.
    for tos in arrows.rooms.values_mut() {
        tos.remove("fuzz_io");
    }
    arrows.rooms.remove("fuzz_io");
    arrows
}

/// Every path a file of `module` names, from the crate's root.
fn named_from(module: &[String], text: &str) -> Vec<Vec<String>> {
    let mut named = paths_after(text, "crate::");
    for path in paths_after(text, "super::") {
        // `super::` of `a/b.rs` is `a`; of `a/b/mod.rs` (module `[a, b]`) it is `a` too.
        let mut full = module[..module.len().saturating_sub(1)].to_vec();
        full.extend(path);
        named.push(full);
    }
    named
}

impl Arrows {
    /// The arrow of `path`, named by `shown` of `module` in `room`: between rooms, or between two
    /// modules of the room.
    fn add(&mut self, src: &Path, (room, module): (&str, &[String]), path: &[String], shown: &str) {
        let Some(to) = path.first() else { return };
        let is_module = src.join(to).is_dir() || src.join(format!("{to}.rs")).is_file();
        if !is_module {
            return; // an item of the crate's root (`crate::VERSION`)
        }
        if to != room {
            if let Some(inner) = path.get(1) {
                self.through
                    .entry((room.to_string(), to.clone()))
                    .or_default()
                    .insert(inner.clone());
            }
            self.rooms
                .entry(room.to_string())
                .or_default()
                .entry(to.clone())
                .or_insert_with(|| shown.to_string());
            return;
        }
        if let (Some(a), Some(b)) = (module.get(1), path.get(1))
            && a != b
            && src.join(room).is_dir()
        {
            self.inside
                .entry(room.to_string())
                .or_default()
                .entry(a.clone())
                .or_default()
                .entry(b.clone())
                .or_insert_with(|| shown.to_string());
        }
    }
}

/// The circles of a graph, each once, as the nodes along it.
fn circles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let mut found: BTreeSet<Vec<String>> = BTreeSet::new();
    for start in edges.keys() {
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        while let Some((node, path)) = stack.pop() {
            for next in edges.get(&node).into_iter().flatten() {
                if next == start {
                    let mut circle = path.clone();
                    let min = circle
                        .iter()
                        .enumerate()
                        .min_by_key(|(_, n)| *n)
                        .map(|(i, _)| i);
                    circle.rotate_left(min.unwrap_or(0));
                    found.insert(circle);
                } else if !path.contains(next) && path.len() < 6 && next > start {
                    let mut longer = path.clone();
                    longer.push(next.clone());
                    stack.push((next.clone(), longer));
                }
            }
        }
    }
    found.into_iter().collect()
}
