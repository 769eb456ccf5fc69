//! A broken rule in a record that decoded: the field it is about, and what is wrong with it, so
//! that a caller can name the field (`config/edge.json: field 'lists[0].name': ...`) without
//! parsing a message.

use std::fmt;

/// One broken rule of a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The field's path in the record, as `lists[1].asns` or `ipv4[3]`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl Problem {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Problem {
        Problem {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The same problem, its field placed under `parent` (`lists` → `pow.lists`).
    pub fn under(self, parent: &str) -> Problem {
        Problem {
            field: format!("{parent}.{}", self.field),
            message: self.message,
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Problems joined for one message: `a: x; b: y`.
pub fn join(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}
