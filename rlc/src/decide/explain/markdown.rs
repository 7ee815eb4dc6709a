//! An explanation as a collapsible Markdown section for the pull request: an anchor the
//! review table links to, then `<details>` whose summary is the headline and whose body
//! lists the facts and `auto`'s candidates (GitHub renders Markdown inside `<details>` after
//! a blank line).

use super::Explanation;
use super::facts::{CANDIDATE_COLUMNS, candidate_rows};

/// The anchor name of a bucket's section, e.g. `explain-payments-gateway-pay`: the
/// `service/bucket` name lowercased, anything but ASCII letters, digits, `-` and `_` made
/// `-`. Two buckets can share one (`a.b` and `a-b`); the caller makes them unique.
pub fn anchor(service: &str, bucket: &str) -> String {
    let slug: String = format!("{service}/{bucket}")
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '-' | '_' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '-',
        })
        .collect();
    format!("explain-{slug}")
}

impl Explanation {
    /// The explanation as a collapsible section named `anchor` (see [`anchor`]).
    pub fn to_markdown(&self, anchor: &str) -> String {
        let mut out = format!(
            "<a name=\"{}\"></a>\n<details><summary><b>{}</b></summary>\n\n",
            html(anchor),
            html(&self.headline())
        );
        for fact in self.facts() {
            match fact.lines.as_slice() {
                [one] => out.push_str(&format!("- **{}**: {}\n", fact.label, md(one))),
                lines => {
                    out.push_str(&format!("- **{}**:\n", fact.label));
                    for line in lines {
                        out.push_str(&format!("  - {}\n", md(line)));
                    }
                }
            }
        }
        if let Some(auto) = &self.auto
            && !auto.candidates.is_empty()
        {
            out.push_str(&format!("\n| {} |\n", CANDIDATE_COLUMNS.join(" | ")));
            out.push_str("|---|---:|---:|---:|---:|---|\n");
            for row in candidate_rows(auto) {
                let cells: Vec<String> = row.iter().map(|c| md(c).replace('|', "\\|")).collect();
                out.push_str(&format!("| {} |\n", cells.join(" | ")));
            }
        }
        out.push_str("\n</details>\n");
        out
    }
}

/// Text safe in HTML: `&`, `<`, `>` and `"` as entities.
fn html(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Text safe in a Markdown list item: HTML escaped, emphasis and link characters taken
/// literally, line breaks flattened.
fn md(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in html(text).chars() {
        match c {
            '\\' | '*' | '_' | '`' | '[' | ']' => {
                out.push('\\');
                out.push(c);
            }
            '\n' | '\r' => out.push(' '),
            _ => out.push(c),
        }
    }
    out
}
