//! The project's hand-kept lists, checked against the tree and the recipe registry, so that
//! none can go stale unseen: the README's architecture section (every file and folder it
//! describes exists, and every one that exists is named), the paths and relative links of the
//! README and `docs/`, the library's module list (`src/lib.rs`), its method list
//! (`src/method/mod.rs`, against the `SslMethod` implementations), its loss table
//! (`src/loss/mod.rs`, against its modules and the headings of `docs/methods.md`) and the
//! README's table of recipes (against the registry).
//!
//! The checks read the workspace's files as text (no crate parses Markdown lists against a
//! source tree; each rule here is a few lines of string matching).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The workspace's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the recipes crate sits in the workspace")
        .to_path_buf()
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(root().join(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// Whether `word` occurs in `text` as a whole word (not inside a longer identifier).
fn has_word(text: &str, word: &str) -> bool {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(word).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
    })
}

/// The file names ending in one of `extensions` that `text` mentions (`name.rs`, `name.md`),
/// not counting those inside a longer path (`a/name.rs`, checked by [`repository_paths`]).
fn file_names(text: &str, extensions: &[&str]) -> BTreeSet<String> {
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    let mut names = BTreeSet::new();
    for extension in extensions {
        for (at, _) in text.match_indices(extension) {
            let after = text[at + extension.len()..].chars().next();
            if after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                continue;
            }
            let start = text[..at]
                .char_indices()
                .rev()
                .take_while(|(_, c)| is_name(*c))
                .last()
                .map_or(at, |(i, _)| i);
            let before = text[..start].chars().next_back();
            if start < at && before != Some('/') && before != Some('.') {
                names.insert(format!("{}{extension}", &text[start..at]));
            }
        }
    }
    names
}

/// The names in a folder that a description of it must mention: its sub-folders and files,
/// without a crate's or module's root file (`lib.rs`, `main.rs`, `mod.rs`) and hidden entries.
fn children(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| {
            !name.starts_with('.') && !["lib.rs", "main.rs", "mod.rs"].contains(&name.as_str())
        })
        .collect();
    names.sort();
    names
}

/// Every file and folder name under `dir`, at any depth.
fn names_under(dir: &Path) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            names.insert(entry.file_name().to_string_lossy().into_owned());
            if entry.path().is_dir() {
                stack.push(entry.path());
            }
        }
    }
    names
}

/// The README's architecture section: each entry (a line that starts at column 0 or 2 with a
/// file or folder name) with its description, the entries under `src/` given as `src/NAME`.
fn architecture_entries() -> Vec<(String, String)> {
    let readme = read("README.md");
    let block = readme
        .split("## Architecture\n\n```text\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the README's architecture section, a ```text block");
    let mut entries: Vec<(String, String)> = Vec::new();
    for line in block.lines() {
        let indent = line.len() - line.trim_start().len();
        let name = line.split_whitespace().next().unwrap_or_default();
        if indent == 0 || indent == 2 {
            let path = if indent == 2 {
                format!("src/{name}")
            } else {
                name.to_string()
            };
            let text = line.trim_start()[name.len()..].to_string();
            entries.push((path, text));
        } else {
            let (_, text) = entries.last_mut().expect("a description follows its entry");
            text.push(' ');
            text.push_str(line.trim());
        }
    }
    entries
}

/// The README's architecture section names every folder and file of the parts it describes,
/// and every file it names exists there: a file added, moved or deleted fails this test until
/// the section says so.
#[test]
fn the_architecture_section_names_every_file_and_only_files_that_exist() {
    let entries = architecture_entries();
    let nested: BTreeSet<String> = entries
        .iter()
        .filter_map(|(path, _)| path.strip_prefix("src/"))
        .map(|name| {
            name.trim_end_matches('/')
                .trim_end_matches(".rs")
                .to_string()
        })
        .filter(|name| !name.is_empty())
        .collect();
    let mut problems = Vec::new();
    for (path, text) in &entries {
        let on_disk = root().join(path);
        if !on_disk.exists() {
            problems.push(format!("`{path}` is described but does not exist"));
            continue;
        }
        if !path.ends_with('/') {
            continue;
        }
        // The folders whose every entry the description must name: a crate's source folders
        // for the member crates, the folder itself otherwise.
        let folders: &[&str] = match path.as_str() {
            "src/" => &[],
            "models/" => &["models/src", "models/src/kernels"],
            "recipes/" => &[
                "recipes/src",
                "recipes/src/bin",
                "recipes/src/recipes",
                "recipes/src/recipes/common",
                "recipes/src/recipes/study",
            ],
            _ => &[path.as_str()],
        };
        for folder in folders {
            for child in children(&root().join(folder)) {
                let stem = child.strip_suffix(".rs").unwrap_or(&child);
                if !has_word(text, stem) {
                    let folder = folder.trim_end_matches('/');
                    problems.push(format!("`{path}` does not name {folder}/{child}"));
                }
            }
        }
        let present = names_under(&on_disk);
        for name in file_names(text, &[".rs", ".py", ".sh"]) {
            if !present.contains(&name) {
                problems.push(format!("`{path}` names {name}, which is not under {path}"));
            }
        }
    }
    // `src/`: every module folder and file of the library has its own entry.
    for child in children(&root().join("src")) {
        let stem = child.strip_suffix(".rs").unwrap_or(&child);
        if !nested.contains(stem) {
            problems.push(format!("src/{child} has no entry under `src/`"));
        }
    }
    assert!(
        problems.is_empty(),
        "the README's architecture section is stale:\n{}",
        problems.join("\n")
    );
}

/// The repository paths a text mentions (`src/…`, `docs/…`, `studies/…`: a path that starts at
/// one of the workspace's top folders), without trailing punctuation, each with the function
/// named after it (`tests/methods.rs::name`), if any.
fn repository_paths(text: &str) -> Vec<(String, Option<String>)> {
    const TOPS: &[&str] = &[
        "src/",
        "models/",
        "recipes/",
        "tests/",
        "benches/",
        "docs/",
        "scripts/",
        "studies/",
        "examples/",
        "collective/",
        ".ci/",
    ];
    let is_path = |c: char| c.is_ascii_alphanumeric() || "_-./".contains(c);
    let mut paths = Vec::new();
    for top in TOPS {
        for (at, _) in text.match_indices(top) {
            let before = text[..at].chars().next_back();
            if before.is_some_and(|c| is_path(c) || c == '<' || c == '*') {
                continue;
            }
            let end = text[at..]
                .char_indices()
                .find(|(_, c)| !is_path(*c))
                .map_or(text.len(), |(i, _)| at + i);
            let path = text[at..end].trim_end_matches(['.', '-']);
            // A pattern or an elision (`recipes/.../x.rs`, `runs/<arm>/…`) names no one path.
            let rest = &text[end..];
            if path.contains("..") || rest.starts_with(['<', '*', '{']) {
                continue;
            }
            let function = rest.strip_prefix("::").map(|after| {
                after
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect::<String>()
            });
            paths.push((path.to_string(), function.filter(|f| !f.is_empty())));
        }
    }
    paths
}

/// The Markdown files whose paths and links are checked.
fn documents() -> Vec<String> {
    let mut documents = vec!["README.md".to_string(), "benches/README.md".to_string()];
    for name in children(&root().join("docs")) {
        if name.ends_with(".md") {
            documents.push(format!("docs/{name}"));
        }
    }
    documents
}

/// Every path of the repository that the README and `docs/` mention, and every relative link
/// they make, exists: a file moved or renamed fails this test until its mentions follow it.
#[test]
fn the_paths_and_links_of_the_docs_exist() {
    let mut problems = Vec::new();
    for document in documents() {
        let text = read(&document);
        for (path, function) in repository_paths(&text) {
            if !root().join(&path).exists() {
                problems.push(format!("{document}: {path}"));
            } else if let Some(function) = function {
                // `file.rs::name`: a function (a test, mostly) of that file.
                let source = std::fs::read_to_string(root().join(&path)).unwrap_or_default();
                if !has_word(&source, &format!("fn {function}")) {
                    problems.push(format!("{document}: {path}::{function} (no such function)"));
                }
            }
        }
        let folder = root().join(&document).parent().unwrap().to_path_buf();
        for link in text.split("](").skip(1) {
            let target = link.split([')', '#', ' ']).next().unwrap_or_default();
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            if !folder.join(target).exists() {
                problems.push(format!("{document}: link to {target}"));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "paths that do not exist:\n{}",
        problems.join("\n")
    );
}

/// The names of the `[`name`]` links in a text.
fn doc_links(text: &str) -> BTreeSet<String> {
    text.split("[`")
        .skip(1)
        .filter_map(|rest| rest.split_once("`]").map(|(name, _)| name.to_string()))
        .filter(|name| !name.contains(' '))
        .collect()
}

/// The module-level doc comment (`//!` lines) of a source file.
fn module_docs(source: &str) -> String {
    source
        .lines()
        .filter_map(|line| line.strip_prefix("//!"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The library's front page (`src/lib.rs`) has a line for each public module (`pub mod x;`,
/// or a private module's child made public there, `pub use base::seed;`: a lower-case last
/// segment), and links nothing else.
#[test]
fn the_library_page_lists_every_module() {
    let lib = read("src/lib.rs");
    let declared = lib
        .lines()
        .filter_map(|line| line.strip_prefix("pub mod "))
        .map(|name| name.trim_end_matches(';').to_string());
    let re_exported = lib
        .lines()
        .filter_map(|line| line.strip_prefix("pub use "))
        .filter_map(|path| path.trim_end_matches(';').rsplit_once("::"))
        .map(|(_, name)| name.to_string())
        .filter(|name| name.starts_with(|c: char| c.is_ascii_lowercase()));
    let modules: BTreeSet<String> = declared.chain(re_exported).collect();
    let listed: BTreeSet<String> = module_docs(&lib)
        .lines()
        .filter_map(|line| line.strip_prefix(" - [`"))
        .filter_map(|rest| rest.split_once("`]").map(|(name, _)| name.to_string()))
        .collect();
    let missing: Vec<_> = modules.difference(&listed).collect();
    let unknown: Vec<_> = listed.difference(&modules).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "src/lib.rs's list misses the modules {missing:?} and names {unknown:?}, which are not modules"
    );
}

/// The method module's page (`src/method/mod.rs`) links every type that implements
/// `SslMethod`, and no other type as a method.
#[test]
fn the_method_page_lists_every_method() {
    let mut methods = BTreeSet::new();
    for name in children(&root().join("src/method")) {
        let source = read(&format!("src/method/{name}"));
        for rest in source.split("SslMethod<B> for ").skip(1) {
            let ty: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            methods.insert(ty);
        }
    }
    // The methods that are one of these under another name (`pub type BarlowTwins<B, M> =
    // ProjectedPair<B, M, BarlowTwinsLoss>`).
    for name in children(&root().join("src/method")) {
        let source = read(&format!("src/method/{name}"));
        for line in source.lines() {
            if let Some((alias, target)) = line
                .strip_prefix("pub type ")
                .and_then(|rest| rest.split_once(" = "))
            {
                let target = target.split('<').next().unwrap_or_default();
                if methods.contains(target) {
                    methods.insert(alias.split('<').next().unwrap_or_default().to_string());
                }
            }
        }
    }
    let docs = module_docs(&read("src/method/mod.rs"));
    let list = docs
        .split("The methods:")
        .nth(1)
        .and_then(|rest| rest.split("\n\n").next())
        .expect("src/method/mod.rs's list of methods, after `The methods:`");
    let listed = doc_links(list);
    let missing: Vec<_> = methods.difference(&listed).collect();
    let unknown: Vec<_> = listed.difference(&methods).collect();
    assert!(
        methods.len() >= 19 && missing.is_empty() && unknown.is_empty(),
        "src/method/mod.rs's list misses {missing:?} and names {unknown:?}, which implement no \
         SslMethod ({} implementations found)",
        methods.len()
    );
}

/// docs/architecture.md's table of layers is the one `tests/architecture.rs` enforces: the same
/// modules in the same layers, bottom first.
#[test]
fn the_layers_table_is_the_enforced_one() {
    let quoted = |text: &str| -> Vec<String> {
        text.split('"')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect()
    };
    let test = read("tests/architecture.rs");
    let layers = test
        .split("const LAYERS: &[&[&str]] = &[")
        .nth(1)
        .and_then(|rest| rest.split("\n];").next())
        .expect("tests/architecture.rs's LAYERS");
    // Each layer is one `&[...]`; comments between them are not code.
    let code: String = layers
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    // A layer's modules in any order.
    let enforced: Vec<BTreeSet<String>> = code
        .split("&[")
        .skip(1)
        .map(|layer| {
            quoted(layer.split(']').next().unwrap_or_default())
                .into_iter()
                .collect()
        })
        .collect();
    let doc = read("docs/architecture.md");
    let documented: Vec<BTreeSet<String>> = doc
        .lines()
        .filter(|line| {
            line.starts_with("| ") && line[2..].starts_with(|c: char| c.is_ascii_digit())
        })
        .map(|row| {
            let modules = row.split(" | ").nth(1).unwrap_or_default();
            modules
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect()
        })
        .collect();
    assert!(enforced.len() >= 7, "{enforced:?}");
    assert_eq!(
        documented, enforced,
        "docs/architecture.md's layers against tests/architecture.rs's LAYERS"
    );
}

/// GitHub's anchor of a Markdown heading: lower case, spaces to hyphens, other punctuation
/// dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The loss module's table (`src/loss/mod.rs`) has a row for each objective's module (a row
/// links the module's loss type), and each row's section of docs/methods.md exists.
#[test]
fn the_loss_table_lists_every_objective_and_its_section_exists() {
    let source = read("src/loss/mod.rs");
    // The modules that hold no objective of their own: shared checks and similarities, the
    // worked examples of docs/methods.md, the unit tests' helpers.
    let helpers = ["shape_checks", "similarity", "worked_examples", "testing"];
    let modules: BTreeSet<String> = source
        .lines()
        .filter_map(|line| {
            let line = line.trim();
            line.strip_prefix("pub(crate) mod ")
                .or_else(|| line.strip_prefix("pub mod "))
                .or_else(|| line.strip_prefix("mod "))
        })
        .map(|name| name.trim_end_matches(';').to_string())
        .filter(|name| !helpers.contains(&name.as_str()))
        .collect();
    // The module that defines each type the table links.
    let module_of = |ty: &str| -> Option<String> {
        modules.iter().find_map(|m| {
            let file = read(&format!("src/loss/{m}.rs"));
            let defines = [format!("pub struct {ty}<"), format!("pub struct {ty} ")]
                .iter()
                .any(|d| file.contains(d.as_str()));
            defines.then(|| m.clone())
        })
    };
    let docs = module_docs(&source);
    let rows: Vec<&str> = docs.lines().filter(|l| l.starts_with(" | [`")).collect();
    let listed: BTreeSet<String> = rows
        .iter()
        .flat_map(|row| doc_links(row))
        .map(|ty| module_of(&ty).unwrap_or(ty))
        .collect();
    let missing: Vec<_> = modules.difference(&listed).collect();
    let unknown: Vec<_> = listed.difference(&modules).collect();
    let methods = read("docs/methods.md");
    let headings: BTreeSet<String> = methods
        .lines()
        .filter(|line| line.starts_with('#'))
        .map(|line| anchor(line.trim_start_matches('#')))
        .collect();
    let sections: Vec<String> = rows
        .iter()
        .filter_map(|row| row.rsplit("`#").next())
        .map(|rest| rest.trim_end_matches(['|', ' ', '`']).to_string())
        .filter(|section| !headings.contains(section))
        .collect();
    assert!(
        missing.is_empty() && unknown.is_empty() && sections.is_empty(),
        "src/loss/mod.rs's table misses {missing:?}, names {unknown:?}, which are not objective \
         modules, and points at sections docs/methods.md lacks: {sections:?}"
    );
}

/// The README's table of recipes (`| recipe | what it does |`) names every recipe `recipe
/// list` knows, and nothing else besides `resume` (a command of the binary, not a recipe).
#[test]
fn the_readme_lists_every_recipe_and_no_other() {
    let readme = read("README.md");
    let table = readme
        .split("| recipe | what it does |")
        .nth(1)
        .expect("the README's table of recipes");
    let mut listed = BTreeSet::new();
    for row in table.lines().skip(2).take_while(|l| l.starts_with('|')) {
        let first = row.split(" | ").next().unwrap_or_default();
        for name in first.split('`').skip(1).step_by(2) {
            listed.insert(name.to_string());
        }
    }
    let known: BTreeSet<String> = crate::recipes::all()
        .iter()
        .map(|r| r.name.to_string())
        .chain(["resume".to_string()])
        .collect();
    let missing: Vec<_> = known.difference(&listed).collect();
    let stale: Vec<_> = listed.difference(&known).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "README's recipe table misses {missing:?} and names unknown {stale:?}"
    );
}

/// The README's feature table names every recipe of the registry in its `recipes` row, by name
/// or by a family's pattern (`mixup_*`), and no recipe that is not there.
#[test]
fn the_feature_table_names_every_recipe() {
    let readme = read("README.md");
    let row = readme
        .lines()
        .find(|l| l.starts_with("| recipes | "))
        .expect("the README's feature table's recipes row");
    let named: Vec<&str> = row.split('`').skip(1).step_by(2).collect();
    let known: BTreeSet<&str> = crate::recipes::all().iter().map(|r| r.name).collect();
    let covers = |name: &str| {
        named.iter().any(|n| match n.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => *n == name,
        })
    };
    let missing: Vec<_> = known.iter().filter(|&&n| !covers(n)).collect();
    let stale: Vec<_> = named
        .iter()
        .filter(|n| !n.ends_with('*') && !known.contains(*n))
        .collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "the feature table's recipes row misses {missing:?} and names unknown {stale:?}"
    );
}

/// The helpers' own rules, on made-up text.
#[test]
fn the_readers_find_what_they_should() {
    assert!(has_word("a nt_xent, b", "nt_xent"));
    assert!(!has_word("soft_nce_x", "soft_nce"));
    assert_eq!(
        file_names("mod.rs and a/b.rs, x.md; y.rsx", &[".rs", ".md"]),
        BTreeSet::from(["mod.rs".to_string(), "x.md".to_string()])
    );
    assert_eq!(
        repository_paths("see src/loss/mod.rs. and (docs/gpu.md) not ab/src/x, recipes/.../y.rs"),
        vec![
            ("src/loss/mod.rs".to_string(), None),
            ("docs/gpu.md".to_string(), None)
        ]
    );
    assert_eq!(
        repository_paths("`tests/methods.rs::a_test` passes"),
        vec![("tests/methods.rs".to_string(), Some("a_test".to_string()))]
    );
    assert_eq!(anchor(" InfoNCE with a queue"), "infonce-with-a-queue");
    assert_eq!(anchor("DCL and DCLW"), "dcl-and-dclw");
    assert_eq!(
        doc_links("- [`A`]: x, [`b c`] [`D`]"),
        BTreeSet::from(["A".into(), "D".into()])
    );
}
