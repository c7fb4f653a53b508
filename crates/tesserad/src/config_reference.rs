//! The configuration reference (`docs/configuration.md`), written from
//! [`DaemonConfig`]'s own schema: its keys, their types and their doc comments (through
//! `schemars`), and the defaults of [`DaemonConfig::default`]. A test compares the
//! committed page with this, so the page cannot drift from the code.
#![forbid(unsafe_code)]

use crate::config::DaemonConfig;
use serde_json::Value;

/// The sections of the file: tables under their own `[name]` header.
const SECTIONS: [&str; 6] = ["executor", "gpulets", "dcuda", "slurm", "kubernetes", "metrics"];

/// The page, in Markdown.
pub fn markdown() -> String {
    let schema = schemars::schema_for!(DaemonConfig);
    let schema = schema.as_value();
    let mut defaults = serde_json::to_value(DaemonConfig::default()).unwrap_or(Value::Null);
    // the default socket depends on who runs the daemon: say how, not where it was here
    defaults["socket"] = Value::String("$XDG_RUNTIME_DIR/tesserad.sock".into());
    let page = Page { defs: &schema["$defs"] };
    let mut out = String::from(
        "# tesserad's configuration\n\n\
         <!-- Generated from crates/tesserad/src/config.rs by crates/tesserad/src/config_reference.rs; \
         do not edit: `TESSERA_UPDATE_DOCS=1 cargo test -p tesserad --test integration config_reference` rewrites it. -->\n\n\
         `tessera daemon --config FILE` reads a TOML file with these keys; its flags override the \
         file, and a key not listed here is an error. Every key may be left out: the default \
         applies. The Debian package's file is `/etc/tessera/tesserad.toml`; `tessera doctor` \
         checks a node against it.\n\n\
         ## Top-level keys\n\n",
    );
    let props = &schema["properties"];
    let keys: Vec<&str> = props
        .as_object()
        .map(|o| o.keys().map(String::as_str).filter(|k| !SECTIONS.contains(k)).collect())
        .unwrap_or_default();
    out.push_str(&page.table(props, &keys, &defaults));
    for section in SECTIONS {
        let field = &props[section];
        out.push_str(&format!("\n## `[{section}]`\n\n{}\n\n", text(&field["description"])));
        let body = page.resolve(field);
        if let Some(variants) = body["oneOf"].as_array() {
            // a tagged choice ([executor]): each kind with its own keys
            for variant in variants {
                let kind = variant["properties"]["kind"]["const"].as_str().unwrap_or("?");
                out.push_str(&format!(
                    "`kind = \"{kind}\"`: {}\n\n",
                    text(&variant["description"])
                ));
                let keys: Vec<&str> = variant["properties"]
                    .as_object()
                    .map(|o| o.keys().map(String::as_str).filter(|k| *k != "kind").collect())
                    .unwrap_or_default();
                if !keys.is_empty() {
                    let defaults = if defaults[section]["kind"] == kind {
                        defaults[section].clone()
                    } else {
                        Value::Null
                    };
                    out.push_str(&page.table(&variant["properties"], &keys, &defaults));
                    out.push('\n');
                }
            }
        } else {
            let keys: Vec<&str> = body["properties"]
                .as_object()
                .map(|o| o.keys().map(String::as_str).collect())
                .unwrap_or_default();
            out.push_str(&page.table(&body["properties"], &keys, &defaults[section]));
        }
    }
    out
}

struct Page<'a> {
    defs: &'a Value,
}

impl Page<'_> {
    /// The schema `s` stands for: through a `$ref`, or its non-null `anyOf` branch.
    fn resolve<'b>(&'b self, s: &'b Value) -> &'b Value {
        if let Some(name) = s["$ref"].as_str().and_then(|r| r.strip_prefix("#/$defs/")) {
            return self.resolve(&self.defs[name]);
        }
        if let Some(branches) = s["anyOf"].as_array()
            && let Some(some) = branches.iter().find(|b| b["type"] != "null")
        {
            return self.resolve(some);
        }
        s
    }

    fn table(&self, props: &Value, keys: &[&str], defaults: &Value) -> String {
        let mut out = String::from("| key | value | default | meaning |\n|---|---|---|---|\n");
        for key in keys {
            let prop = &props[*key];
            let (value, choices) = self.value(prop);
            let mut meaning = text(&prop["description"]);
            if !choices.is_empty() {
                meaning.push_str(&format!(" Choices — {choices}."));
            }
            out.push_str(&format!(
                "| `{key}` | {value} | {} | {} |\n",
                default_text(key, &defaults[*key]),
                meaning.replace('|', "\\|")
            ));
        }
        out
    }

    /// A value's type in words, and the choices of an enumeration with their meanings.
    fn value(&self, prop: &Value) -> (String, String) {
        let optional =
            prop["anyOf"].as_array().is_some_and(|b| b.iter().any(|x| x["type"] == "null"))
                || prop["type"].as_array().is_some_and(|t| t.iter().any(|x| x == "null"));
        let s = self.resolve(prop);
        let (mut value, choices) = if let Some(variants) = s["oneOf"].as_array() {
            let names: Vec<String> = variants
                .iter()
                .filter_map(|v| v["const"].as_str().map(|c| format!("`\"{c}\"`")))
                .collect();
            let meanings: Vec<String> = variants
                .iter()
                .filter_map(|v| {
                    let meaning = text(&v["description"]);
                    Some(format!(
                        "`\"{}\"`: {}",
                        v["const"].as_str()?,
                        meaning.trim_end_matches('.')
                    ))
                })
                .collect();
            (names.join(", "), meanings.join("; "))
        } else if let Some(values) = s["enum"].as_array() {
            let names: Vec<String> = values.iter().map(|v| format!("`{v}`")).collect();
            (names.join(", "), String::new())
        } else {
            (type_words(s, self), String::new())
        };
        if optional {
            value.push_str(", optional");
        }
        (value, choices)
    }
}

fn type_words(s: &Value, page: &Page) -> String {
    let kind = match &s["type"] {
        Value::Array(kinds) => kinds.iter().find(|k| *k != "null").cloned().unwrap_or(Value::Null),
        k => k.clone(),
    };
    match kind.as_str() {
        Some("integer") if s["minimum"].as_f64() == Some(0.0) => "integer ≥ 0".into(),
        Some("integer") => "integer".into(),
        Some("number") => "number".into(),
        Some("boolean") => "true or false".into(),
        Some("string") => "string".into(),
        Some("array") => {
            let item = type_words(page.resolve(&s["items"]), page);
            match (s["minItems"].as_u64(), s["maxItems"].as_u64()) {
                (Some(a), Some(b)) if a == b => format!("{a} × {item}"),
                _ => format!("list of {item}"),
            }
        }
        _ => "value".into(),
    }
}

/// A doc comment on one line.
fn text(description: &Value) -> String {
    description.as_str().unwrap_or("").split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A default as it would be written in the file.
fn default_text(key: &str, v: &Value) -> String {
    match v {
        Value::Null => "unset".into(),
        // permission bits read as octal
        Value::Number(n) if key.ends_with("_mode") => {
            n.as_u64().map_or_else(|| n.to_string(), |m| format!("`0o{m:o}`"))
        }
        Value::String(s) => format!("`\"{s}\"`"),
        other => format!("`{other}`"),
    }
}
