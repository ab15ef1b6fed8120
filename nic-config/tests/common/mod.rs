//! What the table-driven validation suites share: a valid base file
//! edited by plain text replacements, and the problems a file has.
#![allow(dead_code)] // each suite uses a part

use nic_config::{ConfigError, Problem, parse};

/// `base` with each `(from, to)` applied once; every `from` must occur.
pub fn edited(base: &str, edits: &[(&str, &str)]) -> String {
    let mut text = base.to_owned();
    for (from, to) in edits {
        assert!(text.contains(from), "{from:?} not in the config");
        text = text.replacen(from, to, 1);
    }
    text
}

/// The validation problems of `text`; panics if it parses into a plan or
/// fails otherwise.
pub fn problems(text: &str) -> Vec<Problem> {
    match parse(text) {
        Err(ConfigError::Invalid(problems)) => problems,
        Err(other) => panic!("expected validation problems, got: {other}"),
        Ok(plan) => panic!("expected validation problems, got a plan:\n{plan}"),
    }
}
