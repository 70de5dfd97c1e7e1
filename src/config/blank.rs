//! A route file with some of its block-style keys blanked out: each key and its value replaced by
//! spaces, and the lines of a value that spans lines emptied, so that every other line and column
//! stays where it was (and what is reported about it stays true).

use super::tree::At;

/// `text` without the keys at `keys` (1-based line and column of each key), or `None` when one is
/// not where a block mapping's key is (a flow mapping `{a: 1, b: 2}`, or a place not in the text).
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
            return None;
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
    fn a_key_in_a_flow_mapping_or_out_of_the_text_is_left_alone() {
        assert!(without("a: {x: 1, bad: 2}\n", &[at(1, 11)]).is_none());
        assert!(without("a: 1\n", &[at(9, 1)]).is_none());
        assert!(without("a: 1\n", &[at(0, 0)]).is_none());
    }
}
