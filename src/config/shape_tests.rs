//! Tests of `shape.rs`.

use super::*;

fn errors(text: &str) -> Vec<String> {
    let file = Path::new("r.yaml");
    match super::super::tree::read(file, text) {
        Ok(root) => check(file, &root)
            .errors
            .iter()
            .map(ToString::to_string)
            .collect(),
        Err(e) => e.iter().map(ToString::to_string).collect(),
    }
}

#[test]
fn the_example_files_have_the_shape() {
    for text in [
        include_str!("../../routes/example.yaml"),
        include_str!("../../routes/demo.yaml"),
    ] {
        assert_eq!(errors(text), Vec::<String>::new());
    }
}

#[test]
fn every_mistake_is_reported_with_its_place_and_path() {
    let text = "apiVersion: skewgate.io/v1alpha1
kind: RouteTable
backends:
  - name: a
    endpoint: [http://x]
writes:
  default: a
  pins:
    - {name: p, namespaces: team-a, backend: a, flip_at: x}
reads:
  default: a
  rollouts:
    - {name: r, to: a, percent: \"50\"}
";
    let e = errors(text);
    assert_eq!(e.len(), 5, "{e:#?}");
    assert!(
        e[0].starts_with(
            "r.yaml:5:5: backends[0].endpoint: unknown field `endpoint`: did you mean `endpoints`?"
        ),
        "{}",
        e[0]
    );
    assert!(
        e[1].starts_with("r.yaml:4:5: backends[0].endpoints: backends[0] needs `endpoints`"),
        "{}",
        e[1]
    );
    assert!(
        e[2].contains("writes.pins[0].namespaces: namespaces must be a list, not a string"),
        "{}",
        e[2]
    );
    assert!(
        e[3].contains("writes.pins[0].flip_at: unknown field `flip_at`: did you mean `flipAt`?"),
        "{}",
        e[3]
    );
    assert!(
        e[4].contains("reads.rollouts[0].percent: percent is a number: write 50 without quotes"),
        "{}",
        e[4]
    );
}

#[test]
fn the_yaml_itself_is_explained_in_our_words() {
    assert_eq!(
        errors(""),
        [
            "r.yaml: the file is empty; a route table needs apiVersion, kind, backends, writes and reads (see routes/README.md)"
        ]
    );
    let e = errors("kind: a\n---\nkind: b\n");
    assert!(e[0].contains("a second YAML document"), "{e:?}");
    let e = errors("kind: a\nkind: b\n");
    assert!(
        e[0].starts_with("r.yaml:2:1: `kind` is given twice"),
        "{e:?}"
    );
    let e = errors("kind: [a\n");
    assert!(e[0].contains("the YAML is not well-formed"), "{e:?}");
    let huge = format!("kind: [{}]\n", "a, ".repeat(200_000));
    let e = errors(&huge);
    assert!(
        e[0].contains("a route table is far smaller; is this the right file?"),
        "{e:?}"
    );
}
