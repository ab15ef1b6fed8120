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

/// One rule broken: the edits of a valid base file, and the one problem
/// (at `path`, with `reason` in its text) they make.
pub struct Case {
    pub edits: &'static [(&'static str, &'static str)],
    pub path: &'static str,
    pub reason: &'static str,
}

pub const fn case(
    edits: &'static [(&'static str, &'static str)],
    path: &'static str,
    reason: &'static str,
) -> Case {
    Case {
        edits,
        path,
        reason,
    }
}

/// The cases of `cases` whose edits of `base` do not make exactly their
/// problem, each described with what it got; empty when all do.
pub fn failing_cases(base: &str, cases: &[Case]) -> Vec<String> {
    let mut failures = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        let got = problems(&edited(base, c.edits));
        let ok = got.len() == 1 && got[0].path == c.path && got[0].reason.contains(c.reason);
        if !ok {
            failures.push(format!(
                "case {i} ({} / {:?}): got {:?}",
                c.path, c.reason, got
            ));
        }
    }
    failures
}
