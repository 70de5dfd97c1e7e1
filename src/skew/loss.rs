//! What a full-object update would lose: the fields the stored object has and the client's body
//! lacks, among those the client's version cannot know; and the fields whose default changed that
//! the body omits (the apiserver would fill in its own default). Also putting them back.

use serde_json::Value;

use super::KindFields;

/// One field an update would lose.
#[derive(Clone, Debug, PartialEq)]
pub struct Loss {
    /// Where, as a person reads it (`spec.containers[0].startupProbe`).
    pub path: String,
    /// The same, step by step in the body, to put the value back.
    steps: Vec<Step>,
    /// Where the value is in the stored object (its array positions may differ).
    stored_steps: Vec<Step>,
    /// Why the client does not send it.
    pub why: LossReason,
}

/// Why a client's update lacks a field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LossReason {
    /// Its version does not know the field.
    Unknown,
    /// The versions' defaults differ and the body omits it.
    DefaultChanged,
}

/// One step of a path: a field by name, or a list's element by position.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    Key(String),
    Index(usize),
}

impl Loss {
    /// Where the field is in the body, step by step.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// Where its value is in the stored object.
    pub fn stored_steps(&self) -> &[Step] {
        &self.stored_steps
    }
}

/// The losses of an update whose body is `body`, of the object stored as `stored`: `serving` is
/// the kind as the version serving the update describes it, `client` as the client's version does.
pub fn losses(
    serving: &KindFields,
    client: &KindFields,
    stored: &Value,
    body: &Value,
) -> Vec<Loss> {
    let mut out = Vec::new();
    for pattern in outermost_unknown(serving, client) {
        find(pattern, stored, body, LossReason::Unknown, &mut out);
    }
    for (pattern, default) in &serving.fields {
        let changed = client
            .fields
            .get(pattern)
            .is_some_and(|client_default| client_default != default);
        if changed {
            find(pattern, stored, body, LossReason::DefaultChanged, &mut out);
        }
    }
    out
}

/// The fields `newer` describes and `older` does not, the outermost only: a new object's own
/// fields go with it.
fn outermost_unknown<'k>(newer: &'k KindFields, older: &KindFields) -> Vec<&'k String> {
    let mut unknown: Vec<&String> = newer
        .fields
        .keys()
        .filter(|p| !older.fields.contains_key(*p))
        .collect();
    unknown.sort();
    let mut outermost: Vec<&String> = Vec::new();
    for p in unknown {
        let under = outermost
            .iter()
            .any(|o| p.starts_with(o.as_str()) && p[o.len()..].starts_with(['.', '[']));
        if !under {
            outermost.push(p);
        }
    }
    outermost
}

/// Every place `object` has a value for a field that `newer` describes and `older` cannot store
/// (`spec.containers[1].startupProbe`): what an update served by `older` drops.
pub fn unstorable(newer: &KindFields, older: &KindFields, object: &Value) -> Vec<String> {
    fn walk(segments: &[&str], value: &Value, at: &mut Vec<Step>, out: &mut Vec<String>) {
        let Some((segment, rest)) = segments.split_first() else {
            out.push(display(at));
            return;
        };
        let (name, array) = match segment.strip_suffix("[]") {
            Some(n) => (n, true),
            None => (*segment, false),
        };
        let Some(child) = value.get(name) else {
            return;
        };
        at.push(Step::Key(name.to_owned()));
        match child.as_array() {
            Some(elements) if array => {
                for (i, element) in elements.iter().enumerate() {
                    at.push(Step::Index(i));
                    walk(rest, element, at, out);
                    at.pop();
                }
            }
            _ if !array => walk(rest, child, at, out),
            _ => {}
        }
        at.pop();
    }
    let mut out = Vec::new();
    for pattern in outermost_unknown(newer, older) {
        let segments: Vec<&str> = pattern.split('.').collect();
        walk(&segments, object, &mut Vec::new(), &mut out);
    }
    out
}

/// Puts the stored values of `losses` back into `body`.
pub fn restore(body: &mut Value, stored: &Value, losses: &[Loss]) {
    for loss in losses {
        let Some(value) = at(stored, &loss.stored_steps) else {
            continue;
        };
        set(body, &loss.steps, value.clone());
    }
}

/// Every place the field `pattern` (`spec.containers[].startupProbe`) has a value in `stored` and
/// none in `body`. Array elements are matched by `name` when they have one, else by position; an
/// element the body no longer has was removed on purpose and loses nothing.
fn find(pattern: &str, stored: &Value, body: &Value, why: LossReason, out: &mut Vec<Loss>) {
    let segments: Vec<&str> = pattern.split('.').collect();
    let mut steps = Steps::default();
    walk(&segments, stored, Some(body), &mut steps, why, out);
}

/// Where a walk is, in the body and in the stored object.
#[derive(Default)]
struct Steps {
    body: Vec<Step>,
    stored: Vec<Step>,
}

impl Steps {
    fn push(&mut self, body: Step, stored: Step) {
        self.body.push(body);
        self.stored.push(stored);
    }

    fn pop(&mut self) {
        self.body.pop();
        self.stored.pop();
    }
}

fn walk(
    segments: &[&str],
    stored: &Value,
    body: Option<&Value>,
    steps: &mut Steps,
    why: LossReason,
    out: &mut Vec<Loss>,
) {
    let Some((segment, rest)) = segments.split_first() else {
        if body.is_none() {
            out.push(Loss {
                path: display(&steps.body),
                steps: steps.body.clone(),
                stored_steps: steps.stored.clone(),
                why,
            });
        }
        return;
    };
    let (name, array) = match segment.strip_suffix("[]") {
        Some(n) => (n, true),
        None => (*segment, false),
    };
    let Some(stored_child) = stored.get(name) else {
        return;
    };
    let body_child = body.and_then(|b| b.get(name));
    steps.push(Step::Key(name.to_owned()), Step::Key(name.to_owned()));
    if !array {
        walk(rest, stored_child, body_child, steps, why, out);
    } else if let Some(elements) = stored_child.as_array() {
        let body_elements = body_child.and_then(Value::as_array);
        for (i, element) in elements.iter().enumerate() {
            let matched = match (element.get("name"), body_elements) {
                (Some(n), Some(b)) => b.iter().position(|e| e.get("name") == Some(n)),
                (None, Some(b)) => (i < b.len()).then_some(i),
                (_, None) => None,
            };
            let Some(j) = matched else {
                continue;
            };
            steps.push(Step::Index(j), Step::Index(i));
            let body_element = body_elements.and_then(|b| b.get(j));
            walk(rest, element, body_element, steps, why, out);
            steps.pop();
        }
    }
    steps.pop();
}

fn display(steps: &[Step]) -> String {
    let mut s = String::new();
    for step in steps {
        match step {
            Step::Key(k) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(k);
            }
            Step::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

fn at<'v>(value: &'v Value, steps: &[Step]) -> Option<&'v Value> {
    steps.iter().try_fold(value, |v, step| match step {
        Step::Key(k) => v.get(k),
        Step::Index(i) => v.get(i),
    })
}

fn set(value: &mut Value, steps: &[Step], new: Value) {
    let Some((last, parents)) = steps.split_last() else {
        return;
    };
    let mut at = value;
    for step in parents {
        at = match step {
            Step::Key(k) => {
                if !at.is_object() {
                    return;
                }
                at.as_object_mut()
                    .map(|m| {
                        m.entry(k.clone())
                            .or_insert_with(|| Value::Object(Default::default()))
                    })
                    .unwrap_or_else(|| unreachable!("checked to be an object"))
            }
            Step::Index(i) => match at.get_mut(*i) {
                Some(next) => next,
                None => return,
            },
        };
    }
    match last {
        Step::Key(k) => {
            if let Some(map) = at.as_object_mut() {
                map.insert(k.clone(), new);
            }
        }
        Step::Index(i) => {
            if let Some(slot) = at.get_mut(*i) {
                *slot = new;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;

    fn kind(fields: &[(&str, Option<Value>)]) -> KindFields {
        KindFields {
            resource: "pods".into(),
            fields: fields
                .iter()
                .map(|(p, d)| ((*p).to_owned(), d.clone()))
                .collect::<BTreeMap<_, _>>(),
        }
    }

    #[test]
    fn a_new_field_in_a_named_container_is_found_and_put_back() {
        let new = kind(&[
            ("spec", None),
            ("spec.containers", None),
            ("spec.containers[].name", None),
            ("spec.containers[].probe", None),
            ("spec.containers[].probe.period", None),
            ("spec.grace", Some(json!(45))),
        ]);
        let old = kind(&[
            ("spec", None),
            ("spec.containers", None),
            ("spec.containers[].name", None),
            ("spec.grace", Some(json!(30))),
        ]);
        let stored = json!({"spec": {"grace": 30, "containers": [
            {"name": "a"},
            {"name": "b", "probe": {"period": 5}},
        ]}});
        // The old client sends its containers in another order, without the probe and the grace.
        let mut body = json!({"spec": {"containers": [{"name": "b"}, {"name": "a"}]}});
        let found = losses(&new, &old, &stored, &body);
        let paths: Vec<(&str, LossReason)> =
            found.iter().map(|l| (l.path.as_str(), l.why)).collect();
        assert_eq!(
            paths,
            [
                ("spec.containers[0].probe", LossReason::Unknown),
                ("spec.grace", LossReason::DefaultChanged),
            ]
        );
        restore(&mut body, &stored, &found);
        assert_eq!(body["spec"]["containers"][0]["probe"]["period"], 5);
        assert_eq!(body["spec"]["grace"], 30);
        // Nothing is lost once the body carries them; a removed container loses nothing.
        assert!(losses(&new, &old, &stored, &body).is_empty());
        let removed = json!({"spec": {"grace": 30, "containers": [{"name": "a"}]}});
        assert!(losses(&new, &old, &stored, &removed).is_empty());
    }
}
