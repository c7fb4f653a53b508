//! Finding a module's kernels and device functions in PTX text. The rewrite edits the
//! original text only where it must, so everything here works on offsets into it; a
//! copy with comments blanked ([`mask_comments`]) is what is searched, so that a
//! `.entry` or a `%ctaid` in a comment is never taken for code.

use crate::PtxError;

/// `.entry` or `.func`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ItemKind {
    Entry,
    Func,
}

/// A kernel or device function, as byte ranges of the text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Item {
    pub kind: ItemKind,
    pub name: String,
    /// The start of the line the keyword is on (linkage directives such as `.visible`
    /// precede it there).
    pub start: usize,
    /// The keyword's offset.
    pub keyword: usize,
    /// The parameter list, between its parentheses (exclusive), if any.
    pub params: Option<(usize, usize)>,
    /// The body: its `{` and the offset just past its `}`; `None` for a declaration.
    pub body: Option<(usize, usize)>,
    /// Just past the item (its `}` or `;`).
    pub end: usize,
}

/// `text` with every comment replaced by spaces (newlines kept), so that offsets and
/// line numbers stay those of `text`. String literals (`.file` names) are left alone.
pub(crate) fn mask_comments(text: &str) -> Result<String, PtxError> {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => {
                let open = i;
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                if i >= b.len() {
                    return Err(PtxError::Unbalanced { what: "string", line: line_of(text, open) });
                }
                i += 1;
            }
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    out[i] = b' ';
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let open = i;
                let close = text[i + 2..]
                    .find("*/")
                    .ok_or(PtxError::Unbalanced { what: "comment", line: line_of(text, open) })?;
                let end = i + 2 + close + 2;
                for c in &mut out[i..end] {
                    if *c != b'\n' {
                        *c = b' ';
                    }
                }
                i = end;
            }
            _ => i += 1,
        }
    }
    // only ASCII bytes were replaced, by ASCII
    Ok(String::from_utf8(out).unwrap_or_default())
}

/// The 1-based line of `offset`.
pub(crate) fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())].iter().filter(|c| **c == b'\n').count() + 1
}

pub(crate) fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'$' | b'.' | b'%')
}

/// Whether `word` occurs at `at` in `s` as a whole token.
pub(crate) fn word_at(s: &[u8], at: usize, word: &str) -> bool {
    s[at..].starts_with(word.as_bytes())
        && (at == 0 || !is_ident(s[at - 1]))
        && s.get(at + word.len()).is_none_or(|c| !is_ident(*c))
}

fn skip_space(s: &[u8], mut i: usize) -> usize {
    while i < s.len() && s[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

/// The offset of the `close` that matches the `open_char` at `open` (nested pairs
/// counted); `what` names the pair in the error.
fn matching(
    masked: &str,
    open: usize,
    (open_char, close): (u8, u8),
    what: &'static str,
) -> Result<usize, PtxError> {
    let mut depth = 0usize;
    for (i, c) in masked.as_bytes().iter().enumerate().skip(open) {
        if *c == open_char {
            depth += 1;
        } else if *c == close {
            depth -= 1;
            if depth == 0 {
                return Ok(i);
            }
        }
    }
    Err(PtxError::Unbalanced { what, line: line_of(masked, open) })
}

/// The offset of the parenthesis closing the one at `open`.
fn close_paren(masked: &str, open: usize) -> Result<usize, PtxError> {
    matching(masked, open, (b'(', b')'), "parenthesis")
}

/// The offset just past the brace closing the one at `open`.
pub(crate) fn close_brace(masked: &str, open: usize) -> Result<usize, PtxError> {
    matching(masked, open, (b'{', b'}'), "brace").map(|i| i + 1)
}

/// Every `.entry` and `.func` at the top level of `masked`, in order.
pub(crate) fn items(masked: &str) -> Result<Vec<Item>, PtxError> {
    let s = masked.as_bytes();
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'{' => depth += 1,
            b'}' => depth = depth.saturating_sub(1),
            b'.' if depth == 0 => {
                let kind = if word_at(s, i, ".entry") {
                    Some(ItemKind::Entry)
                } else if word_at(s, i, ".func") {
                    Some(ItemKind::Func)
                } else {
                    None
                };
                if let Some(kind) = kind {
                    let item = item(masked, i, kind)?;
                    i = item.end;
                    out.push(item);
                    continue;
                }
            }
            _ => {}
        }
        i += 1;
    }
    Ok(out)
}

/// The item whose keyword is at `keyword`.
fn item(masked: &str, keyword: usize, kind: ItemKind) -> Result<Item, PtxError> {
    let s = masked.as_bytes();
    let start = masked[..keyword].rfind('\n').map_or(0, |n| n + 1);
    let len = if kind == ItemKind::Entry { ".entry".len() } else { ".func".len() };
    let mut i = skip_space(s, keyword + len);
    // a device function's return value comes first: `.func (.param .b32 r) name(...)`
    if kind == ItemKind::Func && s.get(i) == Some(&b'(') {
        i = skip_space(s, close_paren(masked, i)? + 1);
    }
    let name_start = i;
    while i < s.len() && is_ident(s[i]) {
        i += 1;
    }
    if i == name_start {
        return Err(PtxError::Unnamed { line: line_of(masked, keyword) });
    }
    let name = masked[name_start..i].to_string();
    i = skip_space(s, i);
    let params = if s.get(i) == Some(&b'(') {
        let close = close_paren(masked, i)?;
        let p = (i + 1, close);
        i = close + 1;
        Some(p)
    } else {
        None
    };
    // performance directives (.maxntid and the like) until the body or a `;`
    while i < s.len() && s[i] != b'{' && s[i] != b';' {
        i += 1;
    }
    let (body, end) = match s.get(i) {
        Some(b'{') => {
            let end = close_brace(masked, i)?;
            (Some((i, end)), end)
        }
        Some(_) => (None, i + 1),
        None => {
            return Err(PtxError::Unbalanced { what: "kernel", line: line_of(masked, keyword) });
        }
    };
    Ok(Item { kind, name, start, keyword, params, body, end })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Comments go, their length and lines stay; a `//` inside a file name is not one.
    #[test]
    fn comments_are_blanked_in_place() {
        let t = ".file 1 \"a//b.cu\"\n// .entry x\nmov /* %ctaid.x */ a;\n";
        let m = mask_comments(t).unwrap();
        assert_eq!(m.len(), t.len());
        assert!(m.contains("\"a//b.cu\""));
        assert!(!m.contains(".entry") && !m.contains("%ctaid"));
        assert_eq!(m.lines().count(), t.lines().count());
        assert!(mask_comments("/* open").is_err());
    }

    /// Kernels and device functions with their parts, a declaration without a body,
    /// and a function's return value before its name.
    #[test]
    fn items_are_found_with_their_parts() {
        let t = ".visible .entry k(\n.param .u32 a\n)\n.maxntid 128, 1, 1\n{\n{ ret; }\n}\n\
                 .func (.param .b32 r) f(.param .b32 x)\n{\nret;\n}\n.extern .func g();\n";
        let items = items(t).unwrap();
        assert_eq!(items.len(), 3);
        let k = &items[0];
        assert_eq!((k.kind, k.name.as_str(), k.start), (ItemKind::Entry, "k", 0));
        let (a, b) = k.params.unwrap();
        assert_eq!(t[a..b].trim(), ".param .u32 a");
        let (open, end) = k.body.unwrap();
        assert!(t[open..end].starts_with('{') && t[open..end].ends_with('}'));
        assert_eq!((items[1].kind, items[1].name.as_str()), (ItemKind::Func, "f"));
        assert_eq!((items[2].name.as_str(), items[2].body), ("g", None));
    }
}
