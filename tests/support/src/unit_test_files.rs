//! The workspace's one convention for unit-test files, checked.
//!
//! A module's unit tests are a `#[cfg(test)] mod tests { … }` at the end of its file. When
//! they outgrow it they move to `tests.rs` inside the module's own folder: `foo/mod.rs` (or
//! `foo.rs`) with `foo/tests.rs`, declared `#[cfg(test)] mod tests;`. So a reader finds the
//! tests of `foo` in one of two places, and never in a sibling such as `foo_tests.rs` or
//! behind a `#[path]` attribute.

use std::path::{Path, PathBuf};

/// The crates' source folders, relative to the workspace root.
pub const SOURCE_DIRS: [&str; 7] = [
    "grl/core/src",
    "grl/config/src",
    "grl/client/src",
    "grl/server/src",
    "policies/src",
    "rlc/src",
    "tests/support/src",
];

/// Every file under `dirs` that breaks the convention, with why.
pub fn misplaced(root: &Path, dirs: &[&str]) -> std::io::Result<Vec<String>> {
    let mut out = Vec::new();
    for dir in dirs {
        for file in rust_files(&root.join(dir))? {
            let name = file
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            let shown = file
                .strip_prefix(root)
                .unwrap_or(&file)
                .display()
                .to_string();
            if name.ends_with("_tests.rs") {
                out.push(format!(
                    "{shown}: a sibling test file; use <module>/tests.rs"
                ));
            }
            if name == "tests.rs" && !owned_folder(file.parent().unwrap_or(root)) {
                out.push(format!(
                    "{shown}: tests.rs in a folder that is no module's (no mod.rs, lib.rs, main.rs or <folder>.rs)"
                ));
            }
            let text = std::fs::read_to_string(&file)?;
            if text.lines().any(|l| l.trim_start().starts_with("#[path")) {
                out.push(format!(
                    "{shown}: a #[path] attribute; move the file to its module's folder"
                ));
            }
        }
    }
    Ok(out)
}

fn owned_folder(dir: &Path) -> bool {
    ["mod.rs", "lib.rs", "main.rs"]
        .iter()
        .any(|f| dir.join(f).is_file())
        || dir.with_extension("rs").is_file()
}

fn rust_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d)? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_test_files_follow_the_one_convention() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let bad = misplaced(&root, &SOURCE_DIRS).unwrap();
        assert!(
            bad.is_empty(),
            "unit-test files off the convention:\n{}",
            bad.join("\n")
        );
    }

    #[test]
    fn finds_a_sibling_test_file_a_path_attribute_and_an_orphan_tests_rs() {
        let dir = tempfile::tempdir().unwrap();
        let w = |p: &str, s: &str| {
            let f = dir.path().join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, s).unwrap();
        };
        w("src/lib.rs", "mod a; mod b; mod c;\n");
        w(
            "src/a.rs",
            "#[cfg(test)]\n#[path = \"a_tests.rs\"]\nmod tests;\n",
        );
        w("src/a_tests.rs", "");
        w("src/b/mod.rs", "#[cfg(test)]\nmod tests;\n");
        w("src/b/tests.rs", "");
        w("src/c.rs", "#[cfg(test)]\nmod tests;\n");
        w("src/c/tests.rs", "");
        w("src/orphan/tests.rs", "");
        let bad = misplaced(dir.path(), &["src"]).unwrap();
        assert_eq!(bad.len(), 3, "{bad:#?}");
        assert!(bad.iter().any(|b| b.contains("a_tests.rs")));
        assert!(
            bad.iter()
                .any(|b| b.starts_with("src/a.rs") && b.contains("#[path]"))
        );
        assert!(bad.iter().any(|b| b.contains("orphan/tests.rs")));
    }
}
