//! The twin of each kernel (see the crate documentation): the module's text with, after
//! each kernel the rewrite can handle, a copy named `<kernel>__tessera_slice` that
//! takes the first block of its range and the original grid's size as four `.u32`
//! parameters after the original's, computes the original block's coordinates once at
//! its start, and reads them wherever the original read `%ctaid` or `%nctaid`.

use crate::PtxError;
use crate::params::{self, ParamLayout};
use crate::scan::{self, Item, ItemKind, word_at};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// The suffix of a twin's name.
pub const SLICE_SUFFIX: &str = "__tessera_slice";

/// Why a kernel is left unsliced (it then runs as it was, whole).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, thiserror::Error)]
pub enum Unsliced {
    /// It runs in thread-block clusters, whose indices the rewrite does not remap.
    #[error("it uses thread-block clusters ({what})")]
    Clusters { what: String },
    /// It reads `%gridid`, which differs between sub-kernels.
    #[error("it reads %gridid, which each sub-kernel would see differently")]
    GridId,
    /// It reads `%ctaid` or `%nctaid` as a whole vector, a form the rewrite does not know.
    #[error("it reads {register} as a vector, a form the rewrite does not replace")]
    VectorRead { register: String },
    /// A device function it calls reads the block index, which the twin cannot pass it.
    #[error("device function {function} reads the block index")]
    DeviceFunction { function: String },
    /// It synchronises the whole grid (cooperative groups), which sub-kernels cannot.
    #[error("it synchronises the whole grid ({what})")]
    GridSync { what: String },
    /// A declaration without a body.
    #[error("it is only declared here")]
    NoBody,
    /// The module already has its twin.
    #[error("the module already has {twin}")]
    AlreadySliced { twin: String },
}

/// What became of one kernel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Outcome {
    /// It has a twin.
    Sliced {
        /// The twin's name.
        twin: String,
        /// The twin's parameters, the four added last.
        params: ParamLayout,
    },
    /// It runs unsliced, for this reason.
    Unsliced(Unsliced),
}

/// One kernel of the module.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Kernel {
    /// Its name.
    pub name: String,
    /// Its parameters as the original takes them.
    pub params: ParamLayout,
    /// Its twin, or why it has none.
    pub outcome: Outcome,
}

/// The rewritten module.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Rewrite {
    /// The module's text with the twins added, each after its original.
    pub ptx: String,
    /// Every kernel of the module (twins already in it excepted), in order.
    pub kernels: Vec<Kernel>,
}

/// Special registers that mean clusters.
const CLUSTER_REGISTERS: [&str; 7] = [
    "%clusterid",
    "%nclusterid",
    "%cluster_ctaid",
    "%cluster_nctaid",
    "%cluster_ctarank",
    "%cluster_nctarank",
    "%is_explicit_cluster",
];
/// Kernel directives that mean clusters.
const CLUSTER_DIRECTIVES: [&str; 3] = [".explicitcluster", ".reqnctapercluster", ".maxclusterrank"];
/// What cooperative groups' grid synchronisation calls.
const GRID_SYNC: [&str; 4] =
    ["cudaCGSynchronizeGrid", "cudaCGGetIntrinsicHandle", "cudaCGGetSize", "cudaCGGetRank"];

/// Offsets of `word` as a whole token in `s`.
fn occurrences(s: &str, word: &str) -> Vec<usize> {
    let b = s.as_bytes();
    s.match_indices(word).map(|(i, _)| i).filter(|&i| word_at(b, i, word)).collect()
}

/// What one body (comments blanked) says that the rewrite must know, read in one pass
/// over its tokens: a module's device functions are read once, not once per kernel
/// that might reach them (a 2 MB module of 300 kernels and 400 functions took 5 s
/// that way).
#[derive(Debug, Default)]
struct Facts {
    /// Which of [`CLUSTER_REGISTERS`] it names (bit i: entry i).
    clusters: u32,
    /// Which of [`GRID_SYNC`] it names.
    grid_sync: u32,
    gridid: bool,
    /// It reads the block index or the grid's size in any form.
    reads_index: bool,
    /// It reads `%ctaid` (bit 0) or `%nctaid` (bit 1) whole, as a vector.
    vector: u32,
    /// The module's device functions it names (indices), once each.
    names: Vec<usize>,
}

/// The tokens of `text`: maximal runs of identifier characters.
fn tokens(text: &str) -> impl Iterator<Item = &str> {
    let b = text.as_bytes();
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < b.len() && !scan::is_ident(b[i]) {
            i += 1;
        }
        if i >= b.len() {
            return None;
        }
        let start = i;
        while i < b.len() && scan::is_ident(b[i]) {
            i += 1;
        }
        Some(&text[start..i])
    })
}

fn facts(text: &str, funcs: &BTreeMap<&str, usize>) -> Facts {
    let mut f = Facts::default();
    for t in tokens(text) {
        if let Some(rest) = t.strip_prefix('%') {
            for (k, r) in CLUSTER_REGISTERS.iter().enumerate() {
                if t.starts_with(r) {
                    f.clusters |= 1 << k;
                }
            }
            match rest {
                "gridid" => f.gridid = true,
                "ctaid" => f.vector |= 1,
                "nctaid" => f.vector |= 2,
                _ => {}
            }
            let (base, component) = rest.split_once('.').unwrap_or((rest, ""));
            if matches!(base, "ctaid" | "nctaid") && matches!(component, "" | "x" | "y" | "z") {
                f.reads_index = true;
            }
            continue;
        }
        for (k, g) in GRID_SYNC.iter().enumerate() {
            if t.contains(g) {
                f.grid_sync |= 1 << k;
            }
        }
        if let Some(&i) = funcs.get(t)
            && !f.names.contains(&i)
        {
            f.names.push(i);
        }
    }
    f
}

/// Why the kernel `item` (its masked text) cannot be sliced, if it cannot; `funcs`: the
/// module's device functions' names and facts.
fn refusal(
    masked: &str,
    item: &Item,
    funcs: &[(&str, Facts)],
    index: &BTreeMap<&str, usize>,
) -> Option<Unsliced> {
    let Some((open, end)) = item.body else { return Some(Unsliced::NoBody) };
    let header = &masked[item.keyword..open];
    if let Some(d) = CLUSTER_DIRECTIVES.iter().find(|d| !occurrences(header, d).is_empty()) {
        return Some(Unsliced::Clusters { what: (*d).to_string() });
    }
    let own = facts(&masked[open..end], index);
    // what the kernel reaches: every device function it names, transitively
    let mut reached: BTreeSet<&str> = BTreeSet::new();
    let mut todo: Vec<usize> = own.names.clone();
    while let Some(i) = todo.pop() {
        if reached.insert(funcs[i].0) {
            todo.extend(&funcs[i].1.names);
        }
    }
    let texts = std::iter::once(("", &own)).chain(reached.iter().map(|n| (*n, &funcs[index[n]].1)));
    let first = |bits: u32, names: &[&str]| {
        names.iter().enumerate().find(|(k, _)| bits & (1 << k) != 0).map(|(_, n)| n.to_string())
    };
    for (function, f) in texts {
        if let Some(what) = first(f.clusters, &CLUSTER_REGISTERS) {
            return Some(Unsliced::Clusters { what });
        }
        if let Some(what) = first(f.grid_sync, &GRID_SYNC) {
            return Some(Unsliced::GridSync { what });
        }
        if f.gridid {
            return Some(Unsliced::GridId);
        }
        if !function.is_empty() && f.reads_index {
            return Some(Unsliced::DeviceFunction { function: function.to_string() });
        }
        if let Some(register) = first(f.vector, &["%ctaid", "%nctaid"]) {
            return Some(Unsliced::VectorRead { register });
        }
    }
    None
}

/// A prefix starting with `base` that no token of `masked` starts with.
fn fresh(masked: &str, base: &str) -> String {
    (0..)
        .map(|i| if i == 0 { base.to_string() } else { format!("{base}{i}_") })
        .find(|p| !masked.contains(p.as_str()))
        .unwrap_or_else(|| base.to_string())
}

/// Rewrite `ptx`: every kernel gets its twin where it can (see the module docs).
pub fn rewrite(ptx: &str) -> Result<Rewrite, PtxError> {
    let masked = scan::mask_comments(ptx)?;
    let items = scan::items(&masked)?;
    let bodies: Vec<(&str, &str)> = items
        .iter()
        .filter(|i| i.kind == ItemKind::Func)
        .filter_map(|i| i.body.map(|(o, e)| (i.name.as_str(), &masked[o..e])))
        .collect();
    let index: BTreeMap<&str, usize> =
        bodies.iter().enumerate().map(|(k, (name, _))| (*name, k)).collect();
    let funcs: Vec<(&str, Facts)> =
        bodies.iter().map(|(name, body)| (*name, facts(body, &index))).collect();
    let names: BTreeSet<&str> = items.iter().map(|i| i.name.as_str()).collect();
    let reg = fresh(&masked, "%tss_");
    let mut out = String::with_capacity(ptx.len() * 2);
    let mut copied = 0;
    let mut kernels = Vec::new();
    for item in items.iter().filter(|i| i.kind == ItemKind::Entry) {
        if item.name.ends_with(SLICE_SUFFIX) {
            continue;
        }
        let params = match item.params {
            Some((a, b)) => params::parse(&item.name, &masked[a..b])?,
            None => ParamLayout::default(),
        };
        let twin_name = format!("{}{SLICE_SUFFIX}", item.name);
        let outcome = if names.contains(twin_name.as_str()) {
            Outcome::Unsliced(Unsliced::AlreadySliced { twin: twin_name })
        } else if let Some(why) = refusal(&masked, item, &funcs, &index) {
            Outcome::Unsliced(why)
        } else {
            let added: Vec<String> =
                ["first", "gx", "gy", "gz"].iter().map(|p| format!("{twin_name}_{p}")).collect();
            out.push_str(&ptx[copied..item.end]);
            copied = item.end;
            out.push_str("\n\n");
            out.push_str(&twin(ptx, &masked, item, &twin_name, &added, &reg));
            Outcome::Sliced { twin: twin_name, params: params.with_u32s(&added) }
        };
        kernels.push(Kernel { name: item.name.clone(), params, outcome });
    }
    out.push_str(&ptx[copied..]);
    Ok(Rewrite { ptx: out, kernels })
}

/// The twin's text.
fn twin(ptx: &str, masked: &str, item: &Item, name: &str, added: &[String], reg: &str) -> String {
    let (open, end) = item.body.expect("a refusal catches kernels without a body");
    let mut s = String::new();
    // the header up to the name, the name, then the parameters
    let name_at = item.keyword + masked[item.keyword..].find(item.name.as_str()).unwrap_or(0);
    s.push_str(&ptx[item.start..name_at]);
    s.push_str(name);
    let extra: Vec<String> = added.iter().map(|p| format!("\t.param .u32 {p}")).collect();
    let after_params = match item.params {
        Some((a, b)) => {
            let original = ptx[a..b].trim_end();
            s.push('(');
            s.push_str(original);
            if !masked[a..b].trim().is_empty() {
                s.push(',');
            }
            s.push('\n');
            s.push_str(&extra.join(",\n"));
            s.push_str("\n)");
            b + 1
        }
        None => {
            s.push_str(&format!("(\n{}\n)", extra.join(",\n")));
            name_at + item.name.len()
        }
    };
    // the performance directives as they were
    s.push_str(&ptx[after_params..open]);
    s.push_str("{\n");
    let r = |i: u32| format!("{reg}{i}");
    let [first, gx, gy, _gz] = [&added[0], &added[1], &added[2], &added[3]];
    for line in [
        format!("\t.reg .u32 {reg}<9>;"),
        format!("\tld.param.u32 {}, [{first}];", r(0)),
        format!("\tld.param.u32 {}, [{gx}];", r(1)),
        format!("\tld.param.u32 {}, [{gy}];", r(2)),
        format!("\tld.param.u32 {}, [{}];", r(3), added[3]),
        // the block's linear index in the original grid, then its coordinates
        format!("\tmov.u32 {}, %ctaid.x;", r(4)),
        format!("\tadd.u32 {0}, {0}, {1};", r(4), r(0)),
        format!("\trem.u32 {}, {}, {};", r(5), r(4), r(1)),
        format!("\tdiv.u32 {}, {}, {};", r(6), r(4), r(1)),
        format!("\trem.u32 {}, {}, {};", r(7), r(6), r(2)),
        format!("\tdiv.u32 {}, {}, {};", r(8), r(6), r(2)),
    ] {
        s.push_str(&line);
        s.push('\n');
    }
    // the body after its `{`, each read replaced (found in the masked text, so that
    // comments keep what they say)
    let replacements = [
        ("%ctaid.x", r(5)),
        ("%ctaid.y", r(7)),
        ("%ctaid.z", r(8)),
        ("%nctaid.x", r(1)),
        ("%nctaid.y", r(2)),
        ("%nctaid.z", r(3)),
    ];
    let inner = open + 1..end;
    let body_masked = &masked[inner.clone()];
    let mut hits: Vec<(usize, usize, &str)> = replacements
        .iter()
        .flat_map(|(from, to)| {
            occurrences(body_masked, from).into_iter().map(move |i| (i, from.len(), to.as_str()))
        })
        .collect();
    hits.sort_unstable();
    let body = &ptx[inner];
    let mut at = 0;
    for (i, len, to) in hits {
        s.push_str(&body[at..i]);
        s.push_str(to);
        at = i + len;
    }
    s.push_str(&body[at..]);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAXPY: &str = "\
.version 8.0
.target sm_80
.address_size 64

// a kernel that reads %ctaid.x in this comment
.visible .entry saxpy(
\t.param .f32 a,
\t.param .u64 x
)
.maxntid 256, 1, 1
{
\t.reg .b32 %r<4>;
\tmov.u32 %r1, %ctaid.x; // %ctaid.x stays in the comment
\tmov.u32 %r2, %nctaid.y;
\tret;
}
";

    /// The original stays as it was; the twin follows it with the four parameters
    /// added, and reads the computed registers where the original read the special
    /// ones (the comment excepted).
    #[test]
    fn the_twin_follows_the_original_with_the_reads_replaced() {
        let r = rewrite(SAXPY).unwrap();
        assert!(r.ptx.starts_with(&SAXPY[..SAXPY.find("\n}\n").unwrap()]));
        let twin = &r.ptx[r.ptx.find("saxpy__tessera_slice(").unwrap()..];
        assert!(twin.contains(".param .u64 x,\n\t.param .u32 saxpy__tessera_slice_first,"));
        assert!(twin.contains(".maxntid 256, 1, 1"));
        assert!(twin.contains("mov.u32 %r1, %tss_5; // %ctaid.x stays in the comment"));
        assert!(twin.contains("mov.u32 %r2, %tss_2;"));
        // one read of %ctaid.x left: the prologue's
        assert_eq!(occurrences(&scan::mask_comments(twin).unwrap(), "%ctaid.x").len(), 1);
        let [k] = r.kernels.as_slice() else { panic!("{:?}", r.kernels) };
        let Outcome::Sliced { twin, params } = &k.outcome else { panic!("{k:?}") };
        assert_eq!(twin, "saxpy__tessera_slice");
        let offsets: Vec<u32> = params.params.iter().map(|p| p.offset).collect();
        assert_eq!(offsets, [0, 8, 16, 20, 24, 28]);
        // rewriting again adds nothing
        let again = rewrite(&r.ptx).unwrap();
        assert_eq!(again.ptx, r.ptx);
        assert!(matches!(
            again.kernels[0].outcome,
            Outcome::Unsliced(Unsliced::AlreadySliced { .. })
        ));
    }

    /// Each form the rewrite does not handle leaves the kernel as it was, with its reason.
    #[test]
    fn what_the_rewrite_does_not_know_is_left_unsliced() {
        let kernel = |body: &str, header: &str| {
            format!(
                ".version 8.0\n.target sm_90\n.address_size 64\n\
                     .func f()\n{{\n\tmov.u32 %r1, %ctaid.y;\n\tret;\n}}\n\
                     .visible .entry k(){header}\n{{\n{body}\n\tret;\n}}\n"
            )
        };
        let why = |body: &str, header: &str| {
            let text = kernel(body, header);
            let r = rewrite(&text).unwrap();
            assert_eq!(r.ptx, text, "an unsliced kernel's module is unchanged");
            match &r.kernels[0].outcome {
                Outcome::Unsliced(u) => u.clone(),
                o => panic!("{o:?}"),
            }
        };
        assert!(matches!(why("mov.u32 %r1, %clusterid.x;", ""), Unsliced::Clusters { .. }));
        assert!(matches!(why("", " .explicitcluster"), Unsliced::Clusters { .. }));
        assert_eq!(why("mov.u64 %rd1, %gridid;", ""), Unsliced::GridId);
        assert!(matches!(
            why("mov.v4.u32 {%r1,%r2,%r3,%r4}, %ctaid;", ""),
            Unsliced::VectorRead { .. }
        ));
        assert_eq!(why("call f, ();", ""), Unsliced::DeviceFunction { function: "f".into() });
        // through another device function that reads nothing itself
        let text = ".version 8.0\n.target sm_90\n.address_size 64\n\
                    .func g()\n{\n\tmov.u32 %r1, %nctaid.z;\n\tret;\n}\n\
                    .func h()\n{\n\tcall g, ();\n\tret;\n}\n\
                    .visible .entry k()\n{\n\tcall h, ();\n\tret;\n}\n";
        let r = rewrite(text).unwrap();
        assert_eq!(
            r.kernels[0].outcome,
            Outcome::Unsliced(Unsliced::DeviceFunction { function: "g".into() })
        );
        assert!(matches!(why("call cudaCGSynchronizeGrid, ();", ""), Unsliced::GridSync { .. }));
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    const TYPES: [&str; 8] = [".u8", ".s16", ".u32", ".f32", ".u64", ".f64", ".b32", ".b64"];
    const READS: [&str; 6] =
        ["%ctaid.x", "%ctaid.y", "%ctaid.z", "%nctaid.x", "%nctaid.y", "%nctaid.z"];

    /// A kernel with these parameters (type index, alignment exponent if any, array
    /// length if any) and these reads (index into READS, whether in a comment too).
    fn kernel(params: &[(usize, Option<u32>, Option<u32>)], reads: &[(usize, bool)]) -> String {
        let list: Vec<String> = params
            .iter()
            .enumerate()
            .map(|(i, (t, align, len))| {
                let align = align.map_or(String::new(), |a| format!(".align {} ", 1u32 << a));
                let len = len.map_or(String::new(), |n| format!("[{n}]"));
                format!("\t.param {align}{} k_p{i}{len}", TYPES[*t])
            })
            .collect();
        let body: Vec<String> = reads
            .iter()
            .enumerate()
            .map(|(i, (r, comment))| {
                let c = if *comment { format!(" // was {}", READS[*r]) } else { String::new() };
                format!("\tmov.u32 %r{i}, {};{c}", READS[*r])
            })
            .collect();
        format!(
            ".version 8.0\n.target sm_80\n.address_size 64\n/* %ctaid.x */\n\
             .visible .entry k(\n{}\n)\n{{\n\t.reg .b32 %r<{}>;\n{}\n\tret;\n}}\n",
            list.join(",\n"),
            reads.len() + 1,
            body.join("\n")
        )
    }

    proptest! {
        /// Whatever the parameters and reads: the original is kept as it was; in the twin
        /// no read of a special register is left but the prologue's one, and each read
        /// became the register for its coordinate; the four added parameters follow the
        /// original's, each 4-byte aligned, as the driver lays a parameter buffer out.
        #[test]
        fn every_read_is_replaced_and_the_layout_extends_the_original(
            params in proptest::collection::vec(
                (0usize..8, proptest::option::of(0u32..5), proptest::option::of(1u32..9)), 0..12),
            reads in proptest::collection::vec((0usize..6, any::<bool>()), 0..20),
        ) {
            let text = kernel(&params, &reads);
            let r = rewrite(&text).unwrap();
            let end = text.len();
            prop_assert_eq!(&r.ptx[..end], text.as_str());
            let twin = &r.ptx[end..];
            let masked = scan::mask_comments(twin).unwrap();
            prop_assert_eq!(occurrences(&masked, "%ctaid.x").len(), 1);
            for reg in &READS[1..] {
                prop_assert_eq!(occurrences(&masked, reg).len(), 0, "{} left", reg);
            }
            let to = ["%tss_5", "%tss_7", "%tss_8", "%tss_1", "%tss_2", "%tss_3"];
            for (i, (read, _)) in reads.iter().enumerate() {
                let line = format!("\tmov.u32 %r{i}, {};", to[*read]);
                prop_assert!(twin.contains(&line), "{} not in the twin", line);
            }
            let Outcome::Sliced { params: layout, .. } = &r.kernels[0].outcome else {
                return Err(TestCaseError::fail("not sliced"));
            };
            let original = &r.kernels[0].params;
            prop_assert_eq!(&layout.params[..original.params.len()], &original.params[..]);
            let added = &layout.params[original.params.len()..];
            prop_assert_eq!(added.len(), 4);
            prop_assert_eq!(added[0].offset, original.end().next_multiple_of(4));
            for w in added.windows(2) {
                prop_assert_eq!(w[1].offset, w[0].offset + 4);
            }
            for p in &layout.params {
                prop_assert_eq!(p.offset % p.align, 0);
            }
        }
    }
}
