//! A pull request description as a terminal shows it: the Markdown and HTML escapes a
//! review page needs (`observed\_peak`, `&quot;`) and the `<details>` wrapping removed, so
//! that `rlc run --print-table` and `rlc demo` print what a reviewer reads.

/// `markdown` with the escapes of [`super`] and of the explanations undone, HTML tags
/// dropped and bold markers removed; table pipes (`\|` inside a cell) stay escaped.
pub fn for_terminal(markdown: &str) -> String {
    let mut out = String::with_capacity(markdown.len());
    for line in markdown.lines() {
        let text = without_tags(line);
        if text.trim().is_empty() && !line.trim().is_empty() {
            continue; // a line that held only tags (`<a name=…></a>`, `</details>`)
        }
        out.push_str(&unescape(&without_anchor_links(&text.replace("**", ""))));
        out.push('\n');
    }
    out
}

/// `line` without its HTML tags (`<details>`, `<summary>`, `<b>`, `<a …>`).
fn without_tags(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(i) = rest.find('<') {
        out.push_str(&rest[..i]);
        let tag = &rest[i..];
        let is_tag = tag[1..].starts_with(|c: char| c.is_ascii_alphabetic() || c == '/');
        match tag.find('>') {
            Some(j) if is_tag => rest = &tag[j + 1..],
            _ => {
                out.push('<');
                rest = &tag[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// `[text](#anchor)` links (to a section of the page) as their text.
fn without_anchor_links(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(i) = rest.find("](#") {
        let (before, after) = (&rest[..i], &rest[i + 3..]);
        match (before.rfind('['), after.find(')')) {
            (Some(open), Some(close)) if open == 0 || !before[..open].ends_with('\\') => {
                out.push_str(&before[..open]);
                out.push_str(&before[open + 1..]);
                rest = &after[close + 1..];
            }
            _ => {
                out.push_str(&rest[..i + 3]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Backslash escapes of Markdown punctuation and the HTML entities, undone.
fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, chars.peek()) {
            ('\\', Some(&n)) if "\\*_`[]".contains(n) => {
                out.push(n);
                chars.next();
            }
            _ => out.push(c),
        }
    }
    out.replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_tags_are_gone() {
        let md = "<a name=\"explain-payments-x\"></a>\n<details><summary><b>payments/x: 592 rps</b></summary>\n\n\
                  - **observed\\_peak**: 106.49 rps, &quot;quoted&quot; &lt;b&gt; &amp;\n\
                  | [payments/x](#explain-payments-x) | a \\| b | c |\n</details>\n";
        let t = for_terminal(md);
        assert_eq!(
            t,
            "payments/x: 592 rps\n\n- observed_peak: 106.49 rps, \"quoted\" <b> &\n| payments/x | a \\| b | c |\n"
        );
    }
}
