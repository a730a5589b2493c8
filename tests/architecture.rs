//! The library's modules form layers: each imports only modules of lower layers, so there is no
//! import cycle and the vocabulary (`base`) sits under everything that uses it. The test reads
//! every `crate::…` path of `src/` outside comments and unit-test modules.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The layers, bottom first. A new top-level module must be placed here.
const LAYERS: &[&[&str]] = &[
    &["base", "device"],
    &[
        "augment",
        "loss",
        "head",
        "optim",
        "curation",
        "data_parallel",
    ],
    // The loaders: the streaming one cuts each view's random resized crop (augment's) when it
    // decodes an image.
    &["data"],
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

/// The layers of the recipe binary (`recipes/src`), bottom first: the vocabulary of errors, the
/// run files (their checks refuse a path with a usage error), the backend and signals, the
/// plots, the recipes, and `main` on top. A module that names the crate root (`crate::some_fn`
/// of main.rs) is refused: main.rs stays a leaf.
const RECIPE_LAYERS: &[&[&str]] = &[
    &["usage"],
    &["run_files"],
    &["backend", "signals"],
    &["plots"],
    &["recipes"],
    // The test of the hand-kept lists, which reads the recipe registry.
    &["docs_lists"],
];

/// `crate::NAME` paths of a file's code (outside comments and its unit tests).
fn crate_paths(text: &str) -> Vec<String> {
    let code = text.split("#[cfg(test)]").next().unwrap();
    let mut found = Vec::new();
    for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
        for (i, _) in line.match_indices("crate::") {
            let rest = &line[i + "crate::".len()..];
            found.push(
                rest.chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                    .collect::<String>(),
            );
        }
    }
    found
}

/// The recipe binary's files: (path under `recipes/src`, text), main.rs left out.
fn recipe_files() -> Vec<(std::path::PathBuf, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("recipes/src");
    let mut files = Vec::new();
    let mut stack = vec![src.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().and_then(|e| e.to_str()) == Some("rs") {
                let relative = path.strip_prefix(&src).unwrap().to_path_buf();
                if relative != Path::new("main.rs") && !relative.starts_with("bin") {
                    files.push((relative, std::fs::read_to_string(&path).unwrap()));
                }
            }
        }
    }
    files
}

/// The recipe binary has no import cycle: its modules form layers (main.rs on top, named by
/// no module), and inside `recipes` the shared `common` names no recipe and the recipes name
/// each other without a cycle.
#[test]
fn the_recipe_binary_has_no_import_cycle() {
    let layer = |module: &str| {
        RECIPE_LAYERS
            .iter()
            .position(|l| l.contains(&module))
            .unwrap_or_else(|| {
                panic!(
                    "`crate::{module}`: not a module of a layer of RECIPE_LAYERS (a name of \
                     main.rs? main.rs is a leaf: move it into a module)"
                )
            })
    };
    let mut upward = Vec::new();
    let mut inner: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (relative, text) in recipe_files() {
        let mut parts = relative
            .iter()
            .map(|p| p.to_str().unwrap().trim_end_matches(".rs"));
        let top = parts.next().unwrap().to_string();
        let second = parts
            .next()
            .map(str::to_string)
            .filter(|_| top == "recipes");
        for path in crate_paths(&text) {
            let mut names = path.split("::");
            let to = names.next().unwrap_or_default().to_string();
            assert!(
                !to.is_empty(),
                "{}: a grouped `crate::{{…}}` import; name each path",
                relative.display()
            );
            if to != top && layer(&to) >= layer(&top) {
                upward.push(format!("{} -> crate::{path}", relative.display()));
            }
            if let (Some(from), "recipes", Some(to)) = (&second, to.as_str(), names.next()) {
                if from != to && from != "mod" {
                    inner
                        .entry(from.clone())
                        .or_default()
                        .insert(to.to_string());
                }
            }
        }
        // A recipe module's `super::NAME` is a sibling (in `common` it is `common` itself).
        if let Some(from) = second.as_ref().filter(|s| *s != "common" && *s != "mod") {
            let code = text.split("#[cfg(test)]").next().unwrap();
            for (i, _) in code.match_indices("super::") {
                let name: String = code[i + "super::".len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() && name.chars().next().unwrap().is_lowercase() {
                    inner.entry(from.clone()).or_default().insert(name);
                }
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports that do not go down: {upward:#?}"
    );
    assert!(
        inner.get("common").is_none_or(|to| to.is_empty()),
        "recipes::common names recipes: {:?}",
        inner.get("common")
    );
    // No cycle among the recipes: a depth-first search finds no edge back to its path.
    fn visit<'a>(
        node: &'a str,
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) {
        if let Some(at) = path.iter().position(|n| *n == node) {
            panic!("an import cycle among the recipes: {:?}", &path[at..]);
        }
        if !done.insert(node) {
            return;
        }
        path.push(node);
        for next in edges.get(node).into_iter().flatten() {
            visit(next, edges, path, done);
        }
        path.pop();
    }
    let mut done = BTreeSet::new();
    for node in inner.keys() {
        visit(node, &inner, &mut Vec::new(), &mut done);
    }
}

/// A burn project that depends on this crate gets the patched collective layer: it is an
/// ordinary dependency under its own name (`curriculum-ssl-collective`, vendor/), not a
/// `[patch.crates-io]` entry, which applies only inside this workspace and left dependents with
/// upstream's burn-collective, whose every all-reduce after the first hangs across machines.
/// The test writes a crate outside the workspace that depends on this one and asks cargo for
/// its dependency tree (offline, with this workspace's lock: nothing is built or downloaded).
/// The crate also has the `[patch.crates-io]` entry for the patched burn-autodiff that
/// vendor/burn-autodiff/PATCHED.md asks dependents to add, and gets that copy.
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
             publish = false\n\n[workspace]\n\n[dependencies]\ncurriculum-ssl = {{ path = {:?} }}\n\n\
             [patch.crates-io]\nburn-autodiff = {{ path = {:?} }}\n",
            root.display().to_string(),
            root.join("vendor/burn-autodiff").display().to_string()
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
    let autodiff = format!(
        "burn-autodiff v0.21.0 ({})",
        root.join("vendor/burn-autodiff").display()
    );
    assert!(
        tree.lines().any(|l| l.trim_end_matches(" (*)") == autodiff),
        "{tree}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The differentiable math (`src/loss`, `src/method`, the models' layers) divides a float tensor
/// by a number only as a product with its reciprocal: upstream burn-autodiff 0.21 takes the
/// derivative of `div_scalar` as `1 / (divisor as f32)`, so an f64 gradient through it is off by
/// up to 6e-8 relative. This workspace's copy is patched (vendor/burn-autodiff/PATCHED.md), a
/// crate that embeds this one may not be. The rule reads the method's name only: `x / τ`
/// written with the operator is the same operation and is not caught (the composed contrastive
/// losses divide so by their temperature), which only the patch makes exact.
/// (An integer tensor's `div_scalar(… as i64)` has no gradient and stays, as does a line after a
/// comment that says `not differentiated`.)
#[test]
fn differentiable_code_has_no_float_scalar_division() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    let mut stack = vec![
        root.join("src/loss"),
        root.join("src/method"),
        root.join("models/src/layers.rs"),
        root.join("models/src/vit.rs"),
    ];
    while let Some(path) = stack.pop() {
        if path.is_dir() {
            stack.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (n, line) in lines.iter().enumerate() {
            let code = line.split("//").next().unwrap();
            let exempt = n > 0 && lines[n - 1].contains("not differentiated");
            if code.contains(".div_scalar(") && !code.contains("as i64") && !exempt {
                found.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "float div_scalar in differentiable code: {found:#?}"
    );
}

/// Module paths of a crate's files (`src/a/b.rs` and `src/a/b/mod.rs` are `a::b`; the root is
/// ``), with each file's code before its unit tests, comments removed.
fn crate_files(root: &Path) -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
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
            let relative = path.strip_prefix(root).unwrap().with_extension("");
            let mut parts: Vec<String> = relative
                .components()
                .map(|c| c.as_os_str().to_str().unwrap().to_string())
                .collect();
            if matches!(
                parts.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                parts.pop();
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let code = text.split("#[cfg(test)]\nmod tests").next().unwrap();
            let code: String = code
                .lines()
                .map(|l| l.split("//").next().unwrap())
                .collect::<Vec<_>>()
                .join("\n");
            files.insert(parts.join("::"), code);
        }
    }
    files
}

/// No two files of a crate import each other (the layers above are the top-level modules;
/// this is every file below them too): for each `crate::…` and `super::…` path, the longest
/// module it names, other than the file's own ancestors.
#[test]
fn no_two_files_import_each_other() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for krate in ["src", "models/src", "recipes/src"] {
        let files = crate_files(&root.join(krate));
        let mut edges: BTreeSet<(String, String)> = BTreeSet::new();
        for (module, code) in &files {
            let own: Vec<&str> = module.split("::").filter(|p| !p.is_empty()).collect();
            for (start, _) in code
                .match_indices("crate::")
                .chain(code.match_indices("super::"))
            {
                let before = code[..start].chars().last();
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                    continue;
                }
                let path: String = code[start..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                    .collect();
                let mut parts: Vec<&str> = path.split("::").filter(|p| !p.is_empty()).collect();
                if parts.first() == Some(&"crate") {
                    parts.remove(0);
                } else {
                    // `super::` from a file is its parent module.
                    let mut base = own[..own.len().saturating_sub(1)].to_vec();
                    base.extend(parts.drain(1..));
                    parts = base;
                }
                let target = (1..=parts.len())
                    .rev()
                    .map(|k| parts[..k].join("::"))
                    .find(|m| files.contains_key(m));
                if let Some(target) = target {
                    let ancestor = module == &target || module.starts_with(&format!("{target}::"));
                    if !ancestor && !target.is_empty() {
                        edges.insert((module.clone(), target));
                    }
                }
            }
        }
        let both: Vec<_> = edges
            .iter()
            .filter(|(a, b)| a < b && edges.contains(&(b.clone(), a.clone())))
            .collect();
        assert!(
            both.is_empty(),
            "{krate}: files that import each other: {both:?}"
        );
    }
}
