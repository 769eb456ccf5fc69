//! What the three commands share to plan before they act: a plan is a list of typed steps made
//! from reads only; a resource that a step creates is referred to by the following steps as
//! [`Ref::Planned`] (the number of the step that creates it), resolved to its id only when that
//! step has run. `--dry-run` prints the steps, one JSON line each; executing runs those steps,
//! in order, and nothing else.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write;

use serde::{Serialize, Serializer};

use crate::error::InfraError;

/// The number (from 1) of the step of a plan that creates a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct PlannedId(pub usize);

/// A resource a step acts on: one that exists, by its id, or one an earlier step creates.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Ref {
    Existing(String),
    Planned(PlannedId),
}

impl Ref {
    /// The id, when the resource exists already.
    pub fn existing(&self) -> Option<&str> {
        match self {
            Ref::Existing(id) => Some(id),
            Ref::Planned(_) => None,
        }
    }
}

/// An existing resource is its id; a planned one `{"created_by_step": n}`.
impl Serialize for Ref {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Planned {
            created_by_step: usize,
        }
        match self {
            Ref::Existing(id) => serializer.serialize_str(id),
            Ref::Planned(PlannedId(n)) => Planned {
                created_by_step: *n,
            }
            .serialize(serializer),
        }
    }
}

impl fmt::Display for Ref {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ref::Existing(id) => f.write_str(id),
            Ref::Planned(PlannedId(n)) => write!(f, "(created by step {n})"),
        }
    }
}

/// The steps of a plan, in the order they run.
#[derive(Debug, Clone, PartialEq)]
pub struct Steps<S> {
    steps: Vec<S>,
}

impl<S> Default for Steps<S> {
    fn default() -> Self {
        Steps { steps: Vec::new() }
    }
}

impl<S> Steps<S> {
    pub fn push(&mut self, step: S) {
        self.steps.push(step);
    }

    pub fn extend(&mut self, steps: impl IntoIterator<Item = S>) {
        self.steps.extend(steps);
    }

    /// Adds the step `make` builds around its own number, a step that creates a resource;
    /// returns the reference the later steps use for it.
    pub fn create(&mut self, make: impl FnOnce(PlannedId) -> S) -> Ref {
        let id = PlannedId(self.steps.len() + 1);
        self.steps.push(make(id));
        Ref::Planned(id)
    }

    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    pub fn len(&self) -> usize {
        self.steps.len()
    }

    /// Each step with its number (from 1).
    pub fn numbered(&self) -> impl Iterator<Item = (usize, &S)> {
        self.steps.iter().enumerate().map(|(i, s)| (i + 1, s))
    }
}

impl<S: Serialize> Steps<S> {
    /// One JSON line per step, `{"n": <number>, "step": <kind>, ...}`.
    pub fn write_json_lines(&self, mut out: impl Write) -> std::io::Result<()> {
        #[derive(Serialize)]
        struct Numbered<'a, S> {
            n: usize,
            #[serde(flatten)]
            step: &'a S,
        }
        for (n, step) in self.numbered() {
            serde_json::to_writer(&mut out, &Numbered { n, step })?;
            out.write_all(b"\n")?;
        }
        out.flush()
    }
}

/// The ids of what the executed steps created so far.
#[derive(Debug, Clone, Default)]
pub struct Created(BTreeMap<PlannedId, String>);

impl Created {
    pub fn insert(&mut self, id: PlannedId, resource: &str) {
        self.0.insert(id, resource.to_owned());
    }

    /// The id `r` stands for; a planned resource whose step has not run is a plan built out of
    /// order (`step` is the step that asks).
    pub fn resolve(&self, r: &Ref, step: usize) -> Result<String, InfraError> {
        match r {
            Ref::Existing(id) => Ok(id.clone()),
            Ref::Planned(id) => self
                .0
                .get(id)
                .cloned()
                .ok_or(InfraError::Unresolved { step }),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[derive(Debug, Serialize)]
    #[serde(tag = "step", rename_all = "kebab-case")]
    enum Step {
        Make { creates: PlannedId },
        Use { thing: Ref },
    }

    #[test]
    fn a_planned_resource_is_its_step_number_until_that_step_ran() {
        let mut steps = Steps::default();
        let made = steps.create(|creates| Step::Make { creates });
        steps.push(Step::Use {
            thing: made.clone(),
        });
        steps.push(Step::Use {
            thing: Ref::Existing("abc".into()),
        });
        let mut out = Vec::new();
        steps.write_json_lines(&mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"n\":1,\"step\":\"make\",\"creates\":1}\n\
             {\"n\":2,\"step\":\"use\",\"thing\":{\"created_by_step\":1}}\n\
             {\"n\":3,\"step\":\"use\",\"thing\":\"abc\"}\n"
        );
        let mut created = Created::default();
        assert!(matches!(
            created.resolve(&made, 2),
            Err(InfraError::Unresolved { step: 2 })
        ));
        created.insert(PlannedId(1), "id-1");
        assert_eq!(created.resolve(&made, 2).unwrap(), "id-1");
        assert_eq!(made.to_string(), "(created by step 1)");
    }
}
