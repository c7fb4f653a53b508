//! A kernel's parameters and where each lies in the parameter buffer: the driver packs
//! them in declaration order, each at the next multiple of its alignment (its own
//! `.align`, else its element's size). The twin's four added `.u32` parameters go after
//! the last one at 4-byte alignment; a launch that passes its parameters as one buffer
//! (`CU_LAUNCH_PARAM_BUFFER_POINTER`) must put them there.

use crate::PtxError;
use serde::Serialize;

/// One parameter.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Param {
    /// Its name.
    pub name: String,
    /// Its size in the buffer, bytes (element size times array length).
    pub size: u32,
    /// Its alignment, bytes.
    pub align: u32,
    /// Its offset in the buffer.
    pub offset: u32,
}

/// A kernel's parameters as the driver lays them out.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ParamLayout {
    /// In declaration order.
    pub params: Vec<Param>,
}

impl ParamLayout {
    /// The end of the last parameter: the buffer's size before the twin's additions.
    pub fn end(&self) -> u32 {
        self.params.last().map_or(0, |p| p.offset + p.size)
    }

    fn push(&mut self, name: String, size: u32, align: u32) {
        let offset = self.end().next_multiple_of(align.max(1));
        self.params.push(Param { name, size, align, offset });
    }

    /// This layout with `names` appended as `.u32` parameters.
    pub fn with_u32s(&self, names: &[String]) -> ParamLayout {
        let mut out = self.clone();
        for n in names {
            out.push(n.clone(), 4, 4);
        }
        out
    }
}

fn element_size(ty: &str) -> Option<u32> {
    Some(match ty {
        ".b8" | ".u8" | ".s8" => 1,
        ".b16" | ".u16" | ".s16" | ".f16" | ".bf16" => 2,
        ".b32" | ".u32" | ".s32" | ".f32" | ".f16x2" | ".bf16x2" => 4,
        ".b64" | ".u64" | ".s64" | ".f64" => 8,
        _ => return None,
    })
}

/// Read the parameter list `list` (the text between a kernel's parentheses, comments
/// blanked) of `kernel`.
pub(crate) fn parse(kernel: &str, list: &str) -> Result<ParamLayout, PtxError> {
    let mut layout = ParamLayout::default();
    for (index, text) in list.split(',').map(str::trim).enumerate() {
        if text.is_empty() && index == 0 {
            continue; // `()`
        }
        let bad = || PtxError::Param { kernel: kernel.to_string(), index, text: text.to_string() };
        // `name[16]` or `name [16]`: the brackets as their own tokens
        let spaced = text.replace('[', " [ ").replace(']', " ] ");
        let mut tokens = spaced.split_whitespace().peekable();
        if tokens.next() != Some(".param") {
            return Err(bad());
        }
        let (mut size, mut align, mut name, mut count, mut pointer) =
            (None, None, None, 1u32, false);
        while let Some(t) = tokens.next() {
            match t {
                ".align" => {
                    let n: u32 = tokens.next().and_then(|n| n.parse().ok()).ok_or_else(bad)?;
                    // after `.ptr` it is the pointee's alignment, not the parameter's
                    if !pointer {
                        align = Some(n);
                    }
                }
                ".ptr" => pointer = true,
                ".global" | ".shared" | ".const" | ".local" => {}
                "[" => {
                    count = tokens.next().and_then(|n| n.parse().ok()).ok_or_else(bad)?;
                    if tokens.next() != Some("]") {
                        return Err(bad());
                    }
                }
                t if t.starts_with('.') => size = Some(element_size(t).ok_or_else(bad)?),
                t => name = Some(t.to_string()),
            }
        }
        let (Some(size), Some(name)) = (size, name) else { return Err(bad()) };
        layout.push(name, size * count, align.unwrap_or(size));
    }
    Ok(layout)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each at the next multiple of its alignment: an f32 after a u8 at 4, a 16-byte
    /// aligned array after it at 16, a pointer's pointee alignment not its own.
    #[test]
    fn parameters_lie_at_their_alignment() {
        let l = parse(
            "k",
            ".param .u8 a, .param .f32 b, .param .align 16 .b8 c[24], \
             .param .u64 .ptr .global .align 128 d",
        )
        .unwrap();
        let at: Vec<(u32, u32)> = l.params.iter().map(|p| (p.offset, p.size)).collect();
        assert_eq!(at, [(0, 1), (4, 4), (16, 24), (40, 8)]);
        assert_eq!(l.end(), 48);
        let more = l.with_u32s(&["x".into(), "y".into()]);
        assert_eq!(more.params[4].offset, 48);
        assert_eq!(more.end(), 56);
        assert_eq!(parse("k", "").unwrap().end(), 0);
        assert!(parse("k", ".param .pred p").is_err());
        assert!(parse("k", ".reg .u32 r").is_err());
    }
}
