//! Lost fields put back into a protobuf object from the stored one, by the paths the guard found
//! them at in the JSON views (`view.rs`): a name is a field of the message (or of a Go embedded
//! struct in it, as JSON inlines it), an index an element of a repeated field. The value is copied
//! as it is stored, in its protobuf form, so the body keeps the client's encoding and every other
//! byte of its object.

use std::borrow::Cow;

use prost_reflect::{DynamicMessage, FieldDescriptor, ReflectMessage as _, Value};

use super::names::route;
use crate::skew::{Loss, Step};

/// Puts the stored values of `losses` back into `body`.
pub(super) fn restore(body: &mut DynamicMessage, stored: &DynamicMessage, losses: &[Loss]) {
    for loss in losses {
        let Some(value) = at(stored, loss.stored_steps()) else {
            continue;
        };
        set(body, loss.steps(), value.clone());
    }
}

/// The value at `steps` in `message`, if it is set there (walked by reference, copied by the
/// caller once).
fn at<'m>(message: &'m DynamicMessage, steps: &[Step]) -> Option<&'m Value> {
    let mut here: Option<&'m Value> = None;
    for step in steps {
        here = match step {
            Step::Key(k) => {
                let mut at = match here {
                    Some(v) => v.as_message()?,
                    None => message,
                };
                let fields = route(&at.descriptor(), k)?;
                let mut value: Option<&'m Value> = None;
                for (n, field) in fields.iter().enumerate() {
                    if n > 0 {
                        at = value?.as_message()?;
                    }
                    if !at.has_field(field) {
                        return None;
                    }
                    value = match at.get_field(field) {
                        Cow::Borrowed(v) => Some(v),
                        Cow::Owned(_) => return None,
                    };
                }
                value
            }
            Step::Index(i) => here?.as_list()?.get(*i),
        };
    }
    here
}

/// Sets the value at `steps` in `message`, making the messages on the way that are not there; a
/// list element that is not there is not made (the body removed it, and loses nothing).
fn set(message: &mut DynamicMessage, steps: &[Step], new: Value) {
    let Some((Step::Key(last), parents)) = steps.split_last() else {
        return;
    };
    let mut at = message;
    let mut i = 0;
    while i < parents.len() {
        let Step::Key(name) = &parents[i] else {
            return;
        };
        let Some((parent, field)) = field_mut(at, name) else {
            return;
        };
        let mut value = parent.get_field_mut(&field);
        while let Some(Step::Index(n)) = parents.get(i + 1) {
            value = match value.as_list_mut().and_then(|l| l.get_mut(*n)) {
                Some(element) => element,
                None => return,
            };
            i += 1;
        }
        at = match value.as_message_mut() {
            Some(m) => m,
            None => return,
        };
        i += 1;
    }
    if let Some((parent, field)) = field_mut(at, last) {
        // A value of the stored object's own schema: the same field, the same kind.
        let _ = parent.try_set_field(&field, new);
    }
}

/// The message that holds JSON key `key` of `message` (itself, or an embedded struct in it,
/// made when not there) and the key's field.
fn field_mut<'m>(
    message: &'m mut DynamicMessage,
    key: &str,
) -> Option<(&'m mut DynamicMessage, FieldDescriptor)> {
    let fields = route(&message.descriptor(), key)?;
    let (field, through) = fields.split_last()?;
    let mut at = message;
    for f in through {
        at = at.get_field_mut(f).as_message_mut()?;
    }
    Some((at, field.clone()))
}
