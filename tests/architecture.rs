//! The library's modules form layers: each imports only modules of lower layers, so there is no
//! import cycle and the vocabulary (`base`) sits under everything that uses it. The test reads
//! every `crate::…` path of `src/` outside comments and unit-test modules.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The layers, bottom first. A new top-level module must be placed here.
const LAYERS: &[&[&str]] = &[
    &["base", "device"],
    &[
        "data",
        "augment",
        "loss",
        "head",
        "optim",
        "curation",
        "data_parallel",
    ],
    &["curriculum", "error"],
    &["pipeline", "method", "eval"],
    &["train"],
    &["spl_advise", "hooks"],
];

fn layer_of(module: &str) -> usize {
    LAYERS
        .iter()
        .position(|layer| layer.contains(&module))
        .unwrap_or_else(|| panic!("module `{module}` is in no layer of tests/architecture.rs"))
}

/// The top-level modules each module of `src/` names, from its files' code.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut stack = vec![src.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().and_then(|e| e.to_str()) != Some("rs") {
                continue;
            }
            let relative = path.strip_prefix(&src).unwrap();
            let top = relative
                .components()
                .next()
                .unwrap()
                .as_os_str()
                .to_str()
                .unwrap()
                .trim_end_matches(".rs")
                .to_string();
            if top == "lib" {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap();
            let targets = edges.entry(top.clone()).or_default();
            for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
                for (i, _) in line.match_indices("crate::") {
                    let rest = &line[i + "crate::".len()..];
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    let module = match name.as_str() {
                        "Error" | "ConfigError" => "error".to_string(),
                        _ => name,
                    };
                    assert!(
                        !module.is_empty(),
                        "{}: a grouped `crate::{{…}}` import; name each path",
                        relative.display()
                    );
                    if module != top {
                        targets.insert(module);
                    }
                }
            }
        }
    }
    edges
}

#[test]
fn every_import_goes_to_a_lower_layer() {
    let edges = imports();
    let mut upward = Vec::new();
    for (from, targets) in &edges {
        for to in targets {
            if layer_of(to) >= layer_of(from) {
                upward.push(format!(
                    "{from} (layer {}) -> {to} (layer {})",
                    layer_of(from),
                    layer_of(to)
                ));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports that do not go down: {upward:#?}"
    );
    // Every module of src/ is placed, and every placed module exists.
    let placed: BTreeSet<&str> = LAYERS.iter().flat_map(|l| l.iter().copied()).collect();
    let found: BTreeSet<&str> = edges.keys().map(String::as_str).collect();
    assert_eq!(placed, found, "the layers and the modules of src/ differ");
}

/// A burn project that depends on this crate gets the patched collective layer: it is an
/// ordinary dependency under its own name (`curriculum-ssl-collective`, vendor/), not a
/// `[patch.crates-io]` entry, which applies only inside this workspace and left dependents with
/// upstream's burn-collective, whose every all-reduce after the first hangs across machines.
/// The test writes a crate outside the workspace that depends on this one and asks cargo for
/// its dependency tree (offline, with this workspace's lock: nothing is built or downloaded).
#[test]
fn a_crate_outside_the_workspace_gets_the_patched_collective_layer() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::temp_dir().join(format!("curriculum-ssl-dependent-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"dependent\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\
             publish = false\n\n[workspace]\n\n[dependencies]\ncurriculum-ssl = {{ path = {:?} }}\n",
            root.display().to_string()
        ),
    )
    .unwrap();
    std::fs::write(dir.join("src/lib.rs"), "").unwrap();
    std::fs::copy(root.join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(["tree", "--offline", "-e", "normal", "--prefix", "none"])
        .current_dir(&dir)
        .output()
        .unwrap();
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let collective: BTreeSet<&str> = tree
        .lines()
        .filter(|l| l.contains("collective") || l.contains("communication"))
        .map(|l| l.trim_end_matches(" (*)"))
        .collect();
    let vendored = |name: &str| {
        format!(
            "{name} v0.21.0 ({})",
            root.join("vendor")
                .join(match name {
                    "curriculum-ssl-collective" => "burn-collective",
                    _ => "burn-communication",
                })
                .display()
        )
    };
    assert_eq!(
        collective,
        BTreeSet::from([
            vendored("curriculum-ssl-collective").as_str(),
            vendored("curriculum-ssl-communication").as_str(),
        ]),
        "{tree}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
