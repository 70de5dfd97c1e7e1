//! A route file with some of its keys blanked out: each key and its value replaced by spaces (in a
//! flow mapping `{a: 1, b: 2}`, with its comma), and the lines of a value that spans lines emptied,
//! so that every other line and column stays where it was (and what is reported about it stays
//! true).

use super::tree::At;

/// `text` without the keys at `keys` (1-based line and column of each key), or `None` when one is
/// not where a mapping's key is, or is a flow mapping's whose value goes on past its line, or is
/// not in the text.
pub(super) fn without(text: &str, keys: &[At]) -> Option<String> {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    for key in keys {
        let (line, column) = (
            key.line.checked_sub(1)? as usize,
            key.column.checked_sub(1)? as usize,
        );
        let first = lines.get(line)?;
        // Only blanks and list dashes before the key: a block mapping's key.
        let before = first.get(..column)?;
        if !before.chars().all(|c| c == ' ' || c == '-') {
            lines[line] = in_flow(first, column)?;
            continue;
        }
        let kept = before.to_owned();
        let width = first.chars().count() - before.chars().count();
        lines[line] = format!("{kept}{}", " ".repeat(width));
        // The value's further lines: those more indented than the key, and blank ones between.
        let mut next = line + 1;
        while let Some(l) = lines.get(next) {
            let indent = l.len() - l.trim_start_matches(' ').len();
            if !l.trim().is_empty() && indent <= column {
                break;
            }
            lines[next] = String::new();
            next += 1;
        }
    }
    let mut out = lines.join("\n");
    if text.ends_with('\n') {
        out.push('\n');
    }
    Some(out)
}

/// `line` with the entry whose key is at byte `column` of a flow mapping blanked out, with the
/// comma that parts it from the next entry (or, for the last, from the one before), when the entry
/// ends on the line: `{a: 1, bad: [x], b: 2}` becomes `{a: 1,           b: 2}`.
fn in_flow(line: &str, column: usize) -> Option<String> {
    // What comes before the key on its line: `{` or `,` (and blanks), as in a flow mapping.
    let opener = line.get(..column)?.trim_end().bytes().last()?;
    if opener != b'{' && opener != b',' {
        return None;
    }
    let (from, to) = match entry_end(line, column)? {
        // Followed by another entry: the entry and its comma.
        (i, b',') => (column, i + 1),
        // The last entry: the comma before it (if any) and the entry.
        (i, _) => {
            let before = line.get(..column)?.trim_end();
            let from = if before.ends_with(',') {
                before.len() - 1
            } else {
                column
            };
            (from, i)
        }
    };
    let mut out = String::with_capacity(line.len());
    out.push_str(line.get(..from)?);
    out.push_str(&" ".repeat(line.get(from..to)?.chars().count()));
    out.push_str(line.get(to..)?);
    Some(out)
}

/// Where the flow-mapping entry at byte `column` of `line` ends: the byte after its value (`,` to
/// the next entry, or the `}`/`]` that closes the mapping) and its place, skipping what is quoted
/// or nested; `None` when the entry goes on past the line.
fn entry_end(line: &str, column: usize) -> Option<(usize, u8)> {
    let (mut depth, mut quote) = (0usize, None);
    for (i, &b) in line.as_bytes().iter().enumerate().skip(column) {
        match (quote, b) {
            (Some(q), _) if b == q => quote = None,
            (Some(_), _) => {}
            (None, b'"' | b'\'') => quote = Some(b),
            (None, b'[' | b'{') => depth += 1,
            (None, b']' | b'}') if depth > 0 => depth -= 1,
            (None, b',') if depth > 0 => {}
            (None, b',' | b'}' | b']') => return Some((i, b)),
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(line: u32, column: u32) -> At {
        At { line, column }
    }

    #[test]
    fn a_key_and_its_value_become_blanks_and_the_lines_stay() {
        let text =
            "a:\n  - name: x\n    weight: 3\n    extra:\n      deep: 1\n\n    end: 2\nb: 1\n";
        let out = without(text, &[at(3, 5), at(4, 5)]).expect("blanked");
        assert_eq!(out.lines().count(), text.lines().count());
        assert_eq!(
            out,
            "a:\n  - name: x\n             \n          \n\n\n    end: 2\nb: 1\n"
        );
        // The first key of a list item keeps its dash.
        let out = without("l:\n  - bad: 1\n    name: x\n", &[at(2, 5)]).expect("blanked");
        assert_eq!(out, "l:\n  -       \n    name: x\n");
    }

    #[test]
    fn a_key_in_a_flow_mapping_goes_with_its_comma() {
        let out = without("a: {x: 1, bad: 2}\n", &[at(1, 11)]).expect("blanked");
        assert_eq!(out, "a: {x: 1        }\n");
        let out = without("- {name: p, nmspaces: [x, y], backend: a}\n", &[at(1, 13)]);
        assert_eq!(
            out.expect("blanked"),
            "- {name: p,                   backend: a}\n"
        );
        let out = without("a: {bad: \"x,}\"}\n", &[at(1, 5)]).expect("blanked");
        assert_eq!(out, "a: {          }\n");
    }

    #[test]
    fn a_key_whose_value_goes_on_or_out_of_the_text_is_left_alone() {
        assert!(without("a: {x: 1, bad: [2,\n 3]}\n", &[at(1, 11)]).is_none());
        assert!(without("a: 1\n", &[at(9, 1)]).is_none());
        assert!(without("a: 1\n", &[at(0, 0)]).is_none());
    }
}
