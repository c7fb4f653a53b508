//! docs/configuration.md is what the configuration struct says: its keys, types, doc
//! comments and defaults. `TESSERA_UPDATE_DOCS=1` rewrites the page instead of comparing.

use std::path::Path;

#[test]
fn the_configuration_reference_matches_the_configuration_struct() {
    let page = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/configuration.md");
    let generated = tesserad::config_reference::markdown();
    if std::env::var_os("TESSERA_UPDATE_DOCS").is_some() {
        std::fs::write(&page, &generated).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&page).unwrap_or_default();
    assert!(
        committed == generated,
        "{} is stale: rewrite it with `TESSERA_UPDATE_DOCS=1 cargo test -p tesserad --test integration config_reference` and commit it",
        page.display()
    );
}

/// Every key of the struct is on the page, and every key on the page parses: a file
/// made of the documented defaults is accepted as the defaults.
#[test]
fn every_key_is_documented_and_the_documented_defaults_parse() {
    let page = tesserad::config_reference::markdown();
    let defaults = toml::Table::try_from(tesserad::config::DaemonConfig::default()).unwrap();
    for (key, value) in &defaults {
        match value {
            toml::Value::Table(section) => {
                assert!(page.contains(&format!("## `[{key}]`")), "no section [{key}]");
                for inner in section.keys().filter(|k| *k != "kind") {
                    assert!(
                        page.contains(&format!("| `{inner}` |")),
                        "[{key}] {inner} undocumented"
                    );
                }
            }
            _ => assert!(page.contains(&format!("| `{key}` |")), "{key} undocumented"),
        }
    }
}
