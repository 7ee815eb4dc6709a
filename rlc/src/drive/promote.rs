//! Shadow → deny: flips one bucket's `mode` in `services/<service>.yaml`, keeping every
//! other byte of the file (comments, order, formatting) as the person wrote it.

use grl_config::raw::ServiceFile;
use grl_config::yaml::{self, LineIndex};

/// Why a promotion was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PromoteError {
    /// The file does not parse.
    #[error("{0}")]
    Invalid(String),
    /// No such bucket in the file.
    #[error("{file}: no bucket named `{bucket}`")]
    NoSuchBucket {
        /// The file.
        file: String,
        /// The bucket asked for.
        bucket: String,
    },
    /// The bucket is already enforced.
    #[error("{file}: bucket `{bucket}` is already in mode deny")]
    AlreadyDeny {
        /// The file.
        file: String,
        /// The bucket.
        bucket: String,
    },
    /// The mode's line could not be edited in place.
    #[error("{file}:{line}: cannot find `mode: shadow` to edit")]
    NotEditable {
        /// The file.
        file: String,
        /// The line the mode was expected on.
        line: usize,
    },
}

/// The text of `file` with `bucket`'s mode changed from shadow to deny.
pub fn promote_text(file: &str, text: &str, bucket: &str) -> Result<String, PromoteError> {
    let parsed: ServiceFile =
        yaml::parse(file, text).map_err(|e| PromoteError::Invalid(e.to_string()))?;
    let (i, b) = parsed
        .buckets
        .iter()
        .enumerate()
        .find(|(_, b)| b.name == bucket)
        .ok_or_else(|| PromoteError::NoSuchBucket {
            file: file.into(),
            bucket: bucket.into(),
        })?;
    if b.mode == grl_config::Mode::Deny {
        return Err(PromoteError::AlreadyDeny {
            file: file.into(),
            bucket: bucket.into(),
        });
    }
    let line = LineIndex::new(text)
        .line(&format!("buckets[{i}].mode"))
        .unwrap_or(0);
    let not_editable = || PromoteError::NotEditable {
        file: file.into(),
        line,
    };
    let mut out = String::with_capacity(text.len());
    let mut edited = false;
    for (n, l) in text.split_inclusive('\n').enumerate() {
        if n + 1 == line && !edited {
            let Some(pos) = find_mode_value(l) else {
                return Err(not_editable());
            };
            out.push_str(&l[..pos]);
            out.push_str("deny");
            out.push_str(&l[pos + "shadow".len()..]);
            edited = true;
        } else {
            out.push_str(l);
        }
    }
    if !edited {
        return Err(not_editable());
    }
    Ok(out)
}

/// Byte offset of `shadow` in a `mode: shadow` (optionally quoted) on this line.
fn find_mode_value(line: &str) -> Option<usize> {
    let at = line.find("mode:")?;
    let rest = &line[at + "mode:".len()..];
    let skip = rest.len() - rest.trim_start_matches([' ', '"', '\'']).len();
    rest[skip..]
        .starts_with("shadow")
        .then_some(at + "mode:".len() + skip)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# people's comment\nservice: s\nbuckets:\n  - name: a\n    match: { caller: x }\n    scope: global\n    mode: shadow   # observe first\n    policy: { kind: historical-peak }\n  - { name: b, match: { caller: y }, scope: zone, mode: \"shadow\", policy: { kind: fixed, rps: 3 } }\n";

    #[test]
    fn flips_block_and_flow_styles_keeping_everything_else() {
        let out = promote_text("services/s.yaml", TEXT, "a").unwrap();
        assert_eq!(out, TEXT.replace("mode: shadow   #", "mode: deny   #"));
        let out = promote_text("services/s.yaml", TEXT, "b").unwrap();
        assert_eq!(out, TEXT.replace("mode: \"shadow\"", "mode: \"deny\""));
        let snap = grl_config::from_files("v", [("services/s.yaml".to_string(), out)]).unwrap();
        assert_eq!(
            snap.service("s").unwrap().bucket("b").unwrap().mode,
            grl_config::Mode::Deny
        );
    }

    #[test]
    fn refuses_unknown_and_already_enforced_buckets() {
        assert!(matches!(
            promote_text("services/s.yaml", TEXT, "zzz"),
            Err(PromoteError::NoSuchBucket { .. })
        ));
        let once = promote_text("services/s.yaml", TEXT, "a").unwrap();
        assert!(matches!(
            promote_text("services/s.yaml", &once, "a"),
            Err(PromoteError::AlreadyDeny { .. })
        ));
    }
}
