//! The versions `cuGetProcAddress` resolves, from NVIDIA's own `cudaTypedefs.h`: for
//! each entry point it declares `PFN_<name>_v<version>` (and `…_ptds`/`…_ptsz`), one
//! per variant and named by the CUDA version that introduced it. The variants'
//! symbols follow in that order — the first is `<name>`, the next `<name>_v2`,
//! `<name>_v3`, … (`cuCtxCreate` v3020 is `cuCtxCreate_v2`, v12050 `cuCtxCreate_v4`) —
//! and a per-thread-stream variant is the suffixed symbol of the variant current at
//! its own version (`cuMemcpyHtoD` v7000_ptds is `cuMemcpyHtoD_v2_ptds`). A driver
//! asked for `<name>` at version V answers the newest variant of version ≤ V (of the
//! per-thread ones when asked for them and there are any).

use std::collections::BTreeMap;
use std::path::Path;

/// One variant of an entry point, as `cudaTypedefs.h` declares it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcVariant {
    /// The name a program asks for (`cuCtxCreate`).
    pub name: String,
    /// The CUDA version that introduced the variant (`12050`).
    pub version: u32,
    /// `"_ptds"` or `"_ptsz"` for a per-thread-default-stream variant, else `""`.
    pub per_thread: &'static str,
    /// The driver's symbol the variant is (`cuCtxCreate_v4`).
    pub symbol: String,
}

/// Every variant `artifacts`' `include/cudaTypedefs.h` declares, sorted by name, kind
/// and version.
pub fn proc_variants(artifacts: &Path) -> Result<Vec<ProcVariant>, String> {
    let path = artifacts.join("include/cudaTypedefs.h");
    let text =
        std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let mut versions: BTreeMap<(String, &'static str), Vec<u32>> = BTreeMap::new();
    for line in text.lines() {
        // typedef CUresult (CUDAAPI *PFN_cuCtxCreate_v12050)(…
        let Some(rest) = line.split("(CUDAAPI *PFN_").nth(1) else { continue };
        let Some(typedef) = rest.split(')').next() else { continue };
        let (typedef, per_thread) = match typedef {
            t if t.ends_with("_ptds") => (&t[..t.len() - 5], "_ptds"),
            t if t.ends_with("_ptsz") => (&t[..t.len() - 5], "_ptsz"),
            t => (t, ""),
        };
        let Some((name, version)) = typedef.rsplit_once("_v") else { continue };
        let Ok(version) = version.parse::<u32>() else { continue };
        versions.entry((name.to_owned(), per_thread)).or_default().push(version);
    }
    if versions.is_empty() {
        return Err(format!("{} declares no PFN_ typedef", path.display()));
    }
    for v in versions.values_mut() {
        v.sort_unstable();
        v.dedup();
    }
    let nth = |name: &str, i: usize| {
        if i == 0 { name.to_owned() } else { format!("{name}_v{}", i + 1) }
    };
    let mut out = Vec::new();
    for ((name, per_thread), list) in &versions {
        let plain = versions.get(&(name.clone(), "")).map(Vec::as_slice).unwrap_or(&[]);
        for &version in list {
            let symbol = if per_thread.is_empty() {
                nth(name, plain.iter().position(|&v| v == version).unwrap_or(0))
            } else {
                // the plain variant current at the per-thread one's version
                let i = plain.iter().rposition(|&v| v <= version).unwrap_or(0);
                format!("{}{per_thread}", nth(name, i))
            };
            out.push(ProcVariant { name: name.clone(), version, per_thread, symbol });
        }
    }
    Ok(out)
}

/// The symbol a driver answers for `name` at `version`, asked for the per-thread
/// variants or not; `None` when no variant is that old (or the name is unknown).
pub fn resolve<'a>(
    variants: &'a [ProcVariant],
    name: &str,
    version: u32,
    per_thread: bool,
) -> Option<&'a str> {
    let newest = |threaded: bool| {
        variants
            .iter()
            .filter(|v| {
                v.name == name && v.version <= version && v.per_thread.is_empty() != threaded
            })
            .max_by_key(|v| v.version)
    };
    per_thread.then(|| newest(true)).flatten().or_else(|| newest(false)).map(|v| v.symbol.as_str())
}

/// The table as C rows (`{"cuCtxCreate", 12050, 0, "cuCtxCreate_v4"},`) for the fake
/// driver's `cuGetProcAddress`, which answers as [`resolve`] does.
pub fn c_rows(variants: &[ProcVariant]) -> String {
    variants
        .iter()
        .map(|v| {
            format!(
                "{{\"{}\", {}, {}, \"{}\"}},\n",
                v.name,
                v.version,
                i32::from(!v.per_thread.is_empty()),
                v.symbol
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn variant(name: &str, version: u32, per_thread: &'static str, symbol: &str) -> ProcVariant {
        ProcVariant { name: name.into(), version, per_thread, symbol: symbol.into() }
    }

    /// The order rule on a hand-made header: versions ascending give `name`, `_v2`, …;
    /// a per-thread variant takes the plain variant current at its version.
    #[test]
    fn variants_follow_the_typedefs_versions() {
        let dir = std::env::temp_dir().join(format!("proc-table-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("include")).unwrap();
        std::fs::write(
            dir.join("include/cudaTypedefs.h"),
            "typedef CUresult (CUDAAPI *PFN_cuMemcpyHtoD_v3020)(int);\n\
             typedef CUresult (CUDAAPI *PFN_cuMemcpyHtoD_v7000_ptds)(int);\n\
             typedef CUresult (CUDAAPI *PFN_cuCtxCreate_v12050)(int);\n\
             typedef CUresult (CUDAAPI *PFN_cuCtxCreate_v3020)(int);\n\
             #define PFN_cuCtxCreate PFN_cuCtxCreate_v12050\n\
             typedef CUresult (CUDAAPI *PFN_cuMemcpyHtoD_v2000)(int);\n",
        )
        .unwrap();
        let v = proc_variants(&dir).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(
            v,
            vec![
                variant("cuCtxCreate", 3020, "", "cuCtxCreate"),
                variant("cuCtxCreate", 12050, "", "cuCtxCreate_v2"),
                variant("cuMemcpyHtoD", 2000, "", "cuMemcpyHtoD"),
                variant("cuMemcpyHtoD", 3020, "", "cuMemcpyHtoD_v2"),
                variant("cuMemcpyHtoD", 7000, "_ptds", "cuMemcpyHtoD_v2_ptds"),
            ]
        );
        assert_eq!(resolve(&v, "cuCtxCreate", 3000, false), None);
        assert_eq!(resolve(&v, "cuCtxCreate", 12049, false), Some("cuCtxCreate"));
        assert_eq!(resolve(&v, "cuCtxCreate", 13000, true), Some("cuCtxCreate_v2"));
        assert_eq!(resolve(&v, "cuMemcpyHtoD", 6000, true), Some("cuMemcpyHtoD_v2"));
        assert_eq!(resolve(&v, "cuMemcpyHtoD", 12000, true), Some("cuMemcpyHtoD_v2_ptds"));
        assert_eq!(resolve(&v, "cuMemcpyHtoD", 12000, false), Some("cuMemcpyHtoD_v2"));
    }
}
