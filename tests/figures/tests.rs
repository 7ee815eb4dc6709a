//! Rendering into temporary copies, and the committed README and BENCHMARKS.md against
//! `docs/figures`.

use super::*;

/// Whether `text` has the markers.
fn has_markers(text: &str) -> bool {
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    lines.contains(&BEGIN) && lines.contains(&END)
}

const TEST_ROWS: &[RowSpec] = &[
    RowSpec {
        id: "one",
        env: &[],
        cargo: &["bench"],
    },
    RowSpec {
        id: "two",
        env: &[],
        cargo: &["bench"],
    },
];

fn row_json(id: &str, figure: &str) -> String {
    serde_json::json!({
        "row": id,
        "what": format!("what {id}"),
        "figure": figure,
        "command": format!("X=1 cargo bench --bench {id}"),
        "date": "2026-12-05T10:00:00Z",
        "machine": "2 cores, Test CPU, Linux 6.1",
        "figures": {"n": 1},
    })
    .to_string()
}

/// A temporary repository: the two files with markers, a JSON per row.
fn scratch(rows: &[(&str, &str)]) -> (tempfile::TempDir, Paths) {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths {
        figures: dir.path().join("figures"),
        readme: dir.path().join("README.md"),
        benchmarks: dir.path().join("BENCHMARKS.md"),
    };
    std::fs::create_dir_all(&paths.figures).unwrap();
    for (id, figure) in rows {
        std::fs::write(
            paths.figures.join(format!("{id}.json")),
            row_json(id, figure),
        )
        .unwrap();
    }
    let text = format!("# Title\n\nbefore\n\n{BEGIN}\nold table\n{END}\n\nafter\n");
    std::fs::write(&paths.readme, &text).unwrap();
    std::fs::write(&paths.benchmarks, &text).unwrap();
    (dir, paths)
}

#[test]
fn every_row_appears_in_both_files_and_nothing_else_moves() {
    let (_dir, paths) = scratch(&[("one", "**1.0 ns** | fast"), ("two", "2 s")]);
    let out = render(&paths, TEST_ROWS).unwrap();
    let (readme, benchmarks) = (&out[0].2, &out[1].2);
    for id in ["one", "two"] {
        assert!(readme.contains(&format!("| what {id} |")), "{readme}");
        assert!(readme.contains(&format!("(BENCHMARKS.md#figures-{id})")));
        assert!(benchmarks.contains(&format!("### Figures: {id}\n")));
        assert!(benchmarks.contains(&format!("`X=1 cargo bench --bench {id}`")));
        assert!(benchmarks.contains("2026-12-05T10:00:00Z, 2 cores, Test CPU, Linux 6.1"));
    }
    // A `|` in a figure does not split the cell.
    assert!(readme.contains("| **1.0 ns** \\| fast |"), "{readme}");
    assert!(readme.contains("[2026-12-05, 2 cores, Test CPU, Linux 6.1]"));
    for text in [readme, benchmarks] {
        assert!(text.starts_with("# Title\n\nbefore\n\n<!-- figures:begin -->\n"));
        assert!(text.ends_with("<!-- figures:end -->\n\nafter\n"));
        assert!(!text.contains("old table"));
    }
    // Rendering twice changes nothing.
    std::fs::write(&paths.readme, readme).unwrap();
    std::fs::write(&paths.benchmarks, benchmarks).unwrap();
    for (_, old, new) in render(&paths, TEST_ROWS).unwrap() {
        assert_eq!(old, new);
    }
}

#[test]
fn a_row_without_its_json_is_an_error() {
    let (_dir, paths) = scratch(&[("one", "1")]);
    let e = format!("{:#}", render(&paths, TEST_ROWS).unwrap_err());
    assert!(e.contains("row `two` has no figures"), "{e}");
}

#[test]
fn a_json_of_no_known_row_is_an_error() {
    let (_dir, paths) = scratch(&[("one", "1"), ("two", "2"), ("three", "3")]);
    let e = format!("{:#}", render(&paths, TEST_ROWS).unwrap_err());
    assert!(e.contains("no headline row `three`"), "{e}");
}

#[test]
fn a_json_naming_another_row_is_an_error() {
    let (_dir, paths) = scratch(&[("one", "1"), ("two", "2")]);
    std::fs::write(paths.figures.join("two.json"), row_json("one", "2")).unwrap();
    let e = format!("{:#}", render(&paths, TEST_ROWS).unwrap_err());
    assert!(e.contains("says it is row `one`"), "{e}");
}

#[test]
fn missing_or_misplaced_markers_are_an_error() {
    let (_dir, paths) = scratch(&[("one", "1"), ("two", "2")]);
    for (text, says) in [
        ("no markers\n".to_string(), "both are missing"),
        (format!("{BEGIN}\nx\n"), "the second is missing"),
        (format!("x\n{END}\n"), "the first is missing"),
        (format!("{END}\n{BEGIN}\n"), "must appear once"),
        (
            format!("{BEGIN}\n{END}\n{BEGIN}\n{END}\n"),
            "must appear once",
        ),
    ] {
        std::fs::write(&paths.benchmarks, &text).unwrap();
        let e = format!("{:#}", render(&paths, TEST_ROWS).unwrap_err());
        assert!(
            e.contains("BENCHMARKS.md") && e.contains(says),
            "{text:?}: {e}"
        );
    }
}

#[test]
fn every_headline_row_has_committed_figures() {
    let figures = load(&Paths::repo().figures, ROWS).unwrap();
    for f in &figures {
        assert!(
            !f.what.trim().is_empty() && !f.figure.trim().is_empty(),
            "{f:?}"
        );
        assert!(f.command.contains("cargo bench"), "{f:?}");
        assert!(f.date.len() >= 10 && !f.machine.is_empty(), "{f:?}");
    }
}

/// The committed README and BENCHMARKS.md say what `docs/figures` says (rendering changes
/// nothing). README gets its markers when its headline table moves to the generated one;
/// until then only BENCHMARKS.md is checked.
#[test]
fn committed_files_are_up_to_date_with_their_figures() {
    let paths = Paths::repo();
    let readme = std::fs::read_to_string(&paths.readme).unwrap();
    let mut checked = paths.clone();
    if !has_markers(&readme) {
        eprintln!("note: README.md has no `{BEGIN}` / `{END}` yet: only BENCHMARKS.md is checked");
        // Render README into a copy with markers, so that BENCHMARKS.md is still checked.
        let dir = tempfile::tempdir().unwrap();
        checked.readme = dir.path().join("README.md");
        std::fs::write(&checked.readme, format!("{BEGIN}\n{END}\n")).unwrap();
        let out = render(&checked, ROWS).unwrap();
        let (_, old, new) = &out[1];
        assert!(
            old == new,
            "BENCHMARKS.md is not up to date with docs/figures: run `cargo run -p e2e --bin figures -- --render-only`"
        );
        return;
    }
    for (path, old, new) in render(&checked, ROWS).unwrap() {
        assert!(
            old == new,
            "{} is not up to date with docs/figures: run `cargo run -p e2e --bin figures -- --render-only`",
            path.display()
        );
    }
}

#[test]
fn arguments() {
    let a =
        parse(["--only", "decide,scale", "--env", "SCALE_SECONDS=10"].map(String::from)).unwrap();
    assert_eq!(a.only.unwrap(), ["decide", "scale"]);
    assert_eq!(a.env, [("SCALE_SECONDS".into(), "10".into())]);
    let e = parse(["--only", "nope"].map(String::from)).unwrap_err();
    assert!(e.to_string().contains("no such row"), "{e}");
    assert!(parse(["--bogus".to_string()]).is_err());
}
