//! The route file as a YAML tree with the line and column of every node, read before it is turned
//! into types, so that every structural mistake (unknown fields, wrong types, missing fields) can be
//! reported at once, each where it is, in the project's own words (see `shape`).

use std::path::Path;

use serde_saphyr::granit_parser::{Event, Parser, ScalarStyle, Span};

use super::error::ConfigError;

/// More nodes than any route table has; past it the file is refused before it is read further.
const MAX_NODES: usize = 100_000;

/// A place in the file: 1-based line and column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct At {
    pub line: u32,
    pub column: u32,
}

impl At {
    fn of(span: &Span) -> At {
        At {
            line: span.start.line() as u32,
            column: span.start.col() as u32 + 1,
        }
    }
}

/// One YAML node.
#[derive(Debug)]
pub(super) enum Node {
    /// A scalar, and whether it was written without quotes (only then can it be a number).
    Scalar { text: String, plain: bool, at: At },
    /// A list.
    Seq { items: Vec<Node>, at: At },
    /// A mapping, keys in file order.
    Map { entries: Vec<(Key, Node)>, at: At },
    /// An alias (`*name`): not checked further.
    Alias { at: At },
}

/// A mapping key.
#[derive(Debug)]
pub(super) struct Key {
    pub text: String,
    pub at: At,
}

impl Node {
    pub(super) fn at(&self) -> At {
        match self {
            Node::Scalar { at, .. }
            | Node::Seq { at, .. }
            | Node::Map { at, .. }
            | Node::Alias { at } => *at,
        }
    }

    /// Whether the node is YAML's null (empty, `null` or `~`, unquoted).
    pub(super) fn is_null(&self) -> bool {
        matches!(self, Node::Scalar { text, plain: true, .. } if text.is_empty() || text == "null" || text == "~")
    }

    /// What the node is, as a user would say it.
    pub(super) fn kind(&self) -> &'static str {
        match self {
            Node::Scalar {
                plain: true, text, ..
            } if text.parse::<f64>().is_ok() => "a number",
            Node::Scalar {
                plain: true, text, ..
            } if text.is_empty() || text == "null" || text == "~" => "nothing (null)",
            Node::Scalar { plain: false, .. } => "a quoted string",
            Node::Scalar { .. } => "a string",
            Node::Seq { .. } => "a list",
            Node::Map { .. } => "a mapping",
            Node::Alias { .. } => "an alias",
        }
    }
}

/// Reads the one YAML document of a route file; every problem of the YAML itself is an error.
pub(super) fn read(file: &Path, text: &str) -> Result<Node, Vec<ConfigError>> {
    read_one(file, text)
        .map_err(|e| vec![e])
        .and_then(|(node, errors)| {
            if errors.is_empty() {
                Ok(node)
            } else {
                Err(errors)
            }
        })
}

fn read_one(file: &Path, text: &str) -> Result<(Node, Vec<ConfigError>), ConfigError> {
    let mut events = Vec::new();
    for item in Parser::new_from_str(text) {
        match item {
            Ok((event, span)) => events.push((event, span)),
            Err(e) => {
                let m = e.marker();
                let kind = e.kind().to_string();
                let what = if kind.is_empty() {
                    "the YAML is not well-formed".to_owned()
                } else {
                    format!("the YAML is not well-formed: {kind}")
                };
                return Err(ConfigError {
                    file: file.to_owned(),
                    line: m.line() as u32,
                    column: m.col() as u32 + 1,
                    field: String::new(),
                    message: format!("{what}; check the indentation and the quoting here"),
                });
            }
        }
        if events.len() > MAX_NODES * 2 {
            return Err(ConfigError::whole_file(
                file,
                format!(
                    "more than {MAX_NODES} YAML nodes: a route table is far smaller; is this the right file?"
                ),
            ));
        }
    }
    let mut builder = Builder {
        file,
        events: events.into_iter(),
        errors: Vec::new(),
    };
    let root = builder.document()?;
    Ok((root, builder.errors))
}

struct Builder<'f, 'i> {
    file: &'f Path,
    events: std::vec::IntoIter<(Event<'i>, Span)>,
    /// Problems that do not stop the reading (a key given twice).
    errors: Vec<ConfigError>,
}

impl<'i> Builder<'_, 'i> {
    fn document(&mut self) -> Result<Node, ConfigError> {
        let mut root = None;
        while let Some((event, span)) = self.events.next() {
            match event {
                Event::DocumentStart(..) if root.is_some() => {
                    return Err(self.at(
                        At::of(&span),
                        "a second YAML document ('---'): a route file holds one route table; keep one document",
                    ));
                }
                Event::StreamStart | Event::DocumentStart(..) | Event::DocumentEnd => {}
                Event::StreamEnd => break,
                other => root = Some(self.node(other, &span)?),
            }
        }
        match root {
            Some(node @ Node::Map { .. }) => Ok(node),
            Some(other) => Err(self.at(
                other.at(),
                format!(
                    "the file holds {}; a route table is a mapping with apiVersion, kind, backends, writes and reads (see routes/README.md)",
                    other.kind()
                ),
            )),
            None => Err(ConfigError::whole_file(
                self.file,
                "the file is empty; a route table needs apiVersion, kind, backends, writes and reads (see routes/README.md)",
            )),
        }
    }

    fn node(&mut self, event: Event<'i>, span: &Span) -> Result<Node, ConfigError> {
        let at = At::of(span);
        match event {
            Event::Scalar(text, style, ..) => Ok(Node::Scalar {
                text: text.into_owned(),
                plain: style == ScalarStyle::Plain,
                at,
            }),
            Event::SequenceStart(..) => {
                let mut items = Vec::new();
                while let Some((e, s)) = self.next_node_event() {
                    if matches!(e, Event::SequenceEnd) {
                        break;
                    }
                    items.push(self.node(e, &s)?);
                }
                Ok(Node::Seq { items, at })
            }
            Event::MappingStart(..) => self.mapping(at),
            _ => Ok(Node::Alias { at }),
        }
    }

    fn mapping(&mut self, at: At) -> Result<Node, ConfigError> {
        let mut entries: Vec<(Key, Node)> = Vec::new();
        while let Some((event, span)) = self.next_node_event() {
            let key = match event {
                Event::MappingEnd => break,
                Event::Scalar(text, ..) => Key {
                    text: text.into_owned(),
                    at: At::of(&span),
                },
                _ => {
                    return Err(self.at(
                        At::of(&span),
                        "a mapping key here is not a plain name; write `name: value`",
                    ));
                }
            };
            let Some((event, span)) = self.next_node_event() else {
                break;
            };
            let value = self.node(event, &span)?;
            if let Some((first, _)) = entries.iter().find(|(k, _)| k.text == key.text) {
                let e = self.at(
                    key.at,
                    format!(
                        "`{}` is given twice in this mapping (first on line {}); keep one",
                        key.text, first.at.line
                    ),
                );
                self.errors.push(e);
                continue;
            }
            entries.push((key, value));
        }
        Ok(Node::Map { entries, at })
    }

    fn next_node_event(&mut self) -> Option<(Event<'i>, Span)> {
        for (e, s) in self.events.by_ref() {
            if !matches!(e, Event::Anchor(..)) {
                return Some((e, s));
            }
        }
        None
    }

    fn at(&self, at: At, message: impl Into<String>) -> ConfigError {
        ConfigError {
            file: self.file.to_owned(),
            line: at.line,
            column: at.column,
            field: String::new(),
            message: message.into(),
        }
    }
}
