//! The module layering of the crate docs, checked on the source: which
//! top-level modules each module's code names (`crate::module` paths,
//! comments excluded). Rust has no module-level dependency rules short of
//! a crate boundary; this test is the cheap guard that keeps `wire` a leaf
//! and the modules free of cycles.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top-level modules of the crate, and the top-level modules each one's
/// code (tests included) names.
fn uses() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut graph = BTreeMap::new();
    for entry in std::fs::read_dir(&src).expect("src/ is readable") {
        let path = entry.expect("directory entry").path();
        let name = match path.file_stem().and_then(|s| s.to_str()) {
            // This file names `crate::` in its strings, not as paths.
            Some("lib" | "layering") | None => continue,
            Some(name) => name.to_string(),
        };
        if path.is_file() && path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let mut used = BTreeSet::new();
        for file in rust_files(&path) {
            let text = std::fs::read_to_string(&file).expect("source is readable");
            for line in text.lines() {
                let code = line.trim_start();
                if code.starts_with("//") {
                    continue;
                }
                assert!(
                    !code.contains("crate::{"),
                    "{}: name modules one path at a time (`use crate::module::...`) \
                     so the layering check sees them: {line}",
                    file.display()
                );
                for (at, _) in code.match_indices("crate::") {
                    let module: String = code[at + "crate::".len()..]
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    if module != name {
                        used.insert(module);
                    }
                }
            }
        }
        graph.insert(name, used);
    }
    // Names re-exported at the crate root (`crate::DropReason`) are not
    // modules: keep module edges only.
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    for used in graph.values_mut() {
        used.retain(|m| modules.contains(m));
    }
    graph
}

fn rust_files(path: &Path) -> Vec<PathBuf> {
    if path.is_file() {
        return vec![path.to_path_buf()];
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path).expect("module directory is readable") {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

#[test]
fn wire_and_the_base_types_depend_on_nothing_else_in_the_crate() {
    let graph = uses();
    for leaf in ["wire", "counters", "flow", "clock", "maglev"] {
        assert_eq!(graph[leaf], BTreeSet::new(), "{leaf} must stay a leaf");
    }
}

#[test]
fn modules_form_no_cycle() {
    let graph = uses();
    assert!(graph.len() > 10, "found the modules: {graph:?}");
    // Kahn: repeatedly remove modules whose uses are all removed already.
    let mut placed = BTreeSet::new();
    let mut order = Vec::new();
    while placed.len() < graph.len() {
        let ready: Vec<&String> = graph
            .iter()
            .filter(|(m, uses)| !placed.contains(*m) && uses.iter().all(|u| placed.contains(u)))
            .map(|(m, _)| m)
            .collect();
        assert!(
            !ready.is_empty(),
            "module cycle among {:?} (layers so far: {order:?})",
            graph
                .iter()
                .filter(|(m, _)| !placed.contains(*m))
                .collect::<Vec<_>>()
        );
        for m in ready {
            placed.insert(m.clone());
            order.push(m.clone());
        }
    }
}
