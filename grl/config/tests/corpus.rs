//! The committed corpus of hostile and broken config files (`tests/corpus/`): each is
//! loaded as `services/payments.yaml` and must be answered (accepted or refused with an
//! error naming the file) quickly and without a panic. Add a file here for every new
//! hostile input found.

use std::time::{Duration, Instant};

/// The corpus files that are valid configs; every other one must be refused.
const VALID: &[&str] = &["valid.yaml", "quoted-brackets.yaml"];

#[test]
fn every_corpus_file_is_answered_quickly_and_only_valid_ones_load() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
        let start = Instant::now();
        let result = grl_config::from_files("v", [("services/payments.yaml".to_string(), text)]);
        let took = start.elapsed();
        assert!(took < Duration::from_secs(2), "{name} took {took:?}");
        match (VALID.contains(&name.as_str()), result) {
            (true, Ok(_)) => {}
            (true, Err(e)) => panic!("{name} should load: {e}"),
            (false, Ok(_)) => panic!("{name} should be refused"),
            (false, Err(e)) => {
                assert!(
                    e.0.iter().all(|x| x.file == "services/payments.yaml"),
                    "{name}: {e}"
                );
                assert!(
                    e.to_string().len() < 4096,
                    "{name}: the refusal is bounded: {e}"
                );
            }
        }
        seen += 1;
    }
    assert!(seen >= 15, "the corpus is missing: {seen} files");
}
